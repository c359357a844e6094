"""Loading a Hugging Face causal LM as the tools run it, and describing it: the supported families,
a model directory, hub id or GGUF file (transformers dequantizes GGUF weights), the memory check
before loading, the layers' RoPE, and the text cut into token sequences. torch and transformers are
imported when a model is loaded, not before."""
import json
import os
import struct

SUPPORTED = ("llama", "mistral", "mixtral", "qwen2", "qwen3", "qwen2_moe", "qwen3_moe", "gemma", "gemma2",
             "gemma3_text", "gemma3", "phi3")
DTYPES = {"f32": ("F32", 4), "f16": ("F16", 2), "bf16": ("BF16", 2)}


class InputError(Exception):
    """Bad input: exit code 2."""


def parse_layers(text, num_layers):
    if not text:
        return list(range(num_layers))
    out = set()
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = (int(v) for v in part.split("-", 1))
                out.update(range(a, b + 1))
            else:
                out.add(int(part))
        except ValueError:
            raise InputError(f"--layers {text}: expected a list like 0-3,7")
    bad = [l for l in sorted(out) if l < 0 or l >= num_layers]
    if bad or not out:
        raise InputError(f"--layers {text}: the model has layers 0..{num_layers - 1}")
    return sorted(out)


def torch_dtype(torch, tag):
    return {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[tag]


def text_config(cfg):
    """The language model's config: a multimodal model's (Gemma 3) text part, else cfg itself."""
    get = getattr(cfg, "get_text_config", None)
    return get() if callable(get) else cfg


def decoder(model):
    """(the module that holds the decoder layers and the rotary embedding, its layers)."""
    for path in ("model", "model.language_model", "language_model.model", "language_model"):
        inner = model
        for part in path.split("."):
            inner = getattr(inner, part, None)
        layers = getattr(inner, "layers", None)
        if layers is not None and len(layers) and hasattr(layers[0], "self_attn"):
            return inner, layers
    raise InputError(f"--model: {type(model).__name__} has no decoder layers with self_attn: not a "
                     f"Llama-family causal LM")


def rope_thetas(cfg, layer_types):
    """θ per layer from the config: `rope_parameters` (transformers 5: flat, or keyed by layer
    type as Gemma 3's is) or `rope_theta` / `rope_local_base_freq` (4.x)."""
    params = getattr(cfg, "rope_parameters", None) or {}
    default = params.get("rope_theta") if isinstance(params.get("rope_theta"), (int, float)) else None
    default = default or getattr(cfg, "rope_theta", None) or 10000.0
    out = []
    for lt in layer_types:
        sub = params.get(lt) if isinstance(params.get(lt), dict) else None
        if sub and sub.get("rope_theta") is not None:
            out.append(float(sub["rope_theta"]))
        elif lt == "sliding_attention" and getattr(cfg, "rope_local_base_freq", None) is not None:
            out.append(float(cfg.rope_local_base_freq))
        else:
            out.append(float(default))
    return out


def describe(model):
    """Head counts, head_dim, RoPE per layer and the decoder layers of a supported model.

    The rotary frequencies are the model's own (its rotary module's inv_freq, which carries any
    frequency scaling and a partial rotary width), per layer: Gemma 3 keeps one set per layer type
    (`full_attention_inv_freq`, `sliding_attention_inv_freq` in transformers 5; `rotary_emb` and
    `rotary_emb_local` in 4.x)."""
    import torch
    cfg = text_config(model.config)
    mtype = getattr(model.config, "model_type", "?")
    if mtype not in SUPPORTED:
        raise InputError(f"--model: model_type '{mtype}' is not a supported family ({', '.join(SUPPORTED)})")
    inner, layers = decoder(model)
    heads = cfg.num_attention_heads
    kv_heads = getattr(cfg, "num_key_value_heads", None) or heads
    head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // heads
    layer_types = list(getattr(cfg, "layer_types", None) or ["full_attention"] * len(layers))
    thetas = rope_thetas(cfg, layer_types)
    # One rotary module for the model (transformers ≥ 4.45), or one per attention module (older).
    rotary = getattr(inner, "rotary_emb", None)
    if rotary is None:
        rotary = getattr(getattr(layers[0], "self_attn", None), "rotary_emb", None)
    local = getattr(inner, "rotary_emb_local", None)
    per_type = {}
    for lt in sorted(set(layer_types)):
        inv = getattr(rotary, f"{lt}_inv_freq", None) if rotary is not None else None
        scale = getattr(rotary, f"{lt}_attention_scaling", None) if rotary is not None else None
        if inv is None and lt == "sliding_attention" and local is not None:
            inv, scale = getattr(local, "inv_freq", None), getattr(local, "attention_scaling", None)
        if inv is None and rotary is not None:
            inv, scale = getattr(rotary, "inv_freq", None), getattr(rotary, "attention_scaling", None)
        if inv is None:  # no rotary module to read: θ and the config's rotary width
            factor = float(getattr(cfg, "partial_rotary_factor", None) or
                           (getattr(cfg, "rope_parameters", None) or {}).get("partial_rotary_factor", 1.0) or 1.0)
            rot = int(head_dim * factor)
            theta = thetas[layer_types.index(lt)]
            inv = 1.0 / (theta ** (torch.arange(0, rot, 2, dtype=torch.float32) / rot))
        per_type[lt] = (inv.detach().float().cpu(), float(scale if scale is not None else 1.0))
    widths = {v[0].numel() for v in per_type.values()}
    if len(widths) != 1:
        raise InputError(f"--model: its layer types rotate different widths ({sorted(2 * w for w in widths)})")
    first = layer_types.index("full_attention") if "full_attention" in layer_types else 0
    # What attention needs besides q, k and v, as the config states it (absent: not used).
    extra = {}
    for key in ("sliding_window", "attn_logit_softcapping", "final_logit_softcapping", "query_pre_attn_scalar",
                "rope_local_base_freq", "num_local_experts", "num_experts", "num_experts_per_tok"):
        v = getattr(cfg, key, None)
        if v is not None and not isinstance(v, bool):
            extra[key] = v
    if getattr(cfg, "layer_types", None):
        extra["layer_types"] = ",".join(str(t) for t in layer_types)
    if len(set(thetas)) > 1:
        extra["layer_rope_theta"] = ",".join(f"{t:g}" for t in thetas)
    scalar = getattr(cfg, "query_pre_attn_scalar", None)
    extra["attention_scale"] = (float(scalar) ** -0.5) if scalar else head_dim ** -0.5
    return {
        "model_type": mtype, "layers": layers, "num_layers": len(layers), "heads": heads,
        "kv_heads": kv_heads, "head_dim": head_dim, "inv_freq": per_type[layer_types[first]][0],
        "rope_theta": thetas[first], "rope_scaling": per_type[layer_types[first]][1],
        "rotary_dim": 2 * widths.pop(), "extra": extra, "layer_types": layer_types, "rope_per_type": per_type,
    }


def gguf_location(model):
    """(directory, file name) when --model is a GGUF file, or a directory with one .gguf file and no
    config.json (as tools/fetch_model.py leaves a model); None for a transformers model directory or
    hub id. Several .gguf files in one directory: name one."""
    if os.path.isfile(model):
        if not model.endswith(".gguf"):
            raise InputError(f"--model {model}: a file, but not a .gguf one (give a GGUF file or a model directory)")
        return os.path.dirname(os.path.abspath(model)), os.path.basename(model)
    if os.path.isdir(model) and not os.path.isfile(os.path.join(model, "config.json")):
        ggufs = sorted(f for f in os.listdir(model) if f.endswith(".gguf"))
        if len(ggufs) == 1:
            return os.path.abspath(model), ggufs[0]
        if len(ggufs) > 1:
            raise InputError(f"--model {model}: holds {len(ggufs)} GGUF files ({', '.join(ggufs)}): name one")
    return None


def gguf_parameters(path):
    """The GGUF file's parameter count, from its tensor table (nothing dequantized)."""
    try:
        import gguf
    except ImportError as e:
        raise InputError(f"--model {path}: reading a GGUF model needs the gguf package in this Python ({e}; "
                         "tools/hf_env.sh installs it)")
    try:
        reader = gguf.GGUFReader(path)
    except Exception as e:  # noqa: BLE001 - a truncated or foreign file, named
        raise InputError(f"--model {path}: not a readable GGUF file ({type(e).__name__}: {first_line(e)})")
    return sum(int(t.n_elements) for t in reader.tensors)


def available_memory():
    """Bytes the kernel says a new process can use without swapping (MemAvailable), or None."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def memory_estimate(params, cfg, seq_len, backward, model_bytes=4):
    """Peak bytes of loading a model of `params` parameters in FP32 (transformers holds the dequantized
    state dict and the model at once: 2 copies) and running one sequence, with the activations a
    backward pass keeps (per layer about seq_len · hidden · (34 + 5 · heads · seq_len / hidden) values,
    Korthikanti et al. 2022, in the model's dtype) when `backward`. An estimate, stated as one."""
    weights = params * model_bytes
    tc = text_config(cfg)
    hidden, heads = int(tc.hidden_size), int(tc.num_attention_heads)
    layers = int(tc.num_hidden_layers)
    act = seq_len * hidden * (34 + 5 * heads * seq_len / hidden) * model_bytes / 2 * layers
    return int(2 * weights + (act if backward else act / layers)), int(weights)


def load_model(a, seq_len=None, backward=None):
    """(model, tokenizer, device, model dtype) of --model: a transformers model directory, a hub id, or
    a GGUF file (transformers dequantizes it to the model dtype; needs gguf and accelerate). A GGUF
    model that would not fit in memory (weights plus backward, estimated before loading) is refused
    with both numbers."""
    try:
        import torch
        import transformers
    except ImportError as e:
        raise InputError(f"dump_kv.py needs torch and transformers in this Python ({e})")
    device = a.device
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    mdt = a.model_dtype if a.model_dtype != "auto" else ("bf16" if device.startswith("cuda") else "f32")
    gg = gguf_location(a.model)
    local = a.model.startswith(("/", ".", "~")) or os.path.exists(a.model)
    if local and gg is None and not os.path.isdir(a.model):
        raise InputError(f"--model {a.model}: no such directory or GGUF file")
    where, extra = (gg[0], {"gguf_file": gg[1]}) if gg else (a.model, {})
    try:
        cfg = transformers.AutoConfig.from_pretrained(where, **extra)
    except (OSError, ValueError, KeyError, RuntimeError) as e:
        raise InputError(f"--model {a.model}: cannot read its config ({first_line(e)})")
    if getattr(cfg, "model_type", None) not in SUPPORTED:
        raise InputError(f"--model {a.model}: model_type '{getattr(cfg, 'model_type', '?')}' is not a supported "
                         f"family ({', '.join(SUPPORTED)})")
    if gg:
        params = gguf_parameters(os.path.join(*gg))
        seq = seq_len if seq_len is not None else getattr(a, "seq_len", 512)
        grad = backward if backward is not None else not getattr(a, "no_grad", True)
        # transformers dequantizes in host memory whatever the device; the activations are the
        # host's only when the model runs on the CPU.
        need, weights = memory_estimate(params, cfg, seq, grad and device == "cpu",
                                        DTYPES[mdt][1] if mdt in DTYPES else 4)
        if device != "cpu":
            need = 2 * weights
        have = available_memory()
        if have is not None and need > have:
            raise InputError(f"--model {a.model}: needs about {need / 2**30:.1f} GiB ({params / 1e9:.2f} B parameters: "
                             f"{weights / 2**30:.1f} GiB of {mdt} weights, twice while loading, plus "
                             f"{'the backward pass of ' if grad else ''}one {seq}-token sequence); this machine has "
                             f"{have / 2**30:.1f} GiB available")
    try:
        tok = transformers.AutoTokenizer.from_pretrained(where, **extra)
    except Exception as e:  # noqa: BLE001 - any tokenizer failure is the model directory's
        raise InputError(f"--model {a.model}: no usable tokenizer ({first_line(e)})")
    # transformers 5 names the argument dtype; 4.x calls it torch_dtype (and would pass an unknown
    # dtype= on to the config, silently loading FP32).
    major = int(str(getattr(transformers, "__version__", "4")).split(".")[0] or 4)
    kw = {"dtype" if major >= 5 else "torch_dtype": torch_dtype(torch, mdt), **extra}
    # Logit soft-capping (Gemma 2) is implemented by the eager attention only.
    if getattr(text_config(cfg), "attn_logit_softcapping", None):
        kw["attn_implementation"] = "eager"
    try:
        model = transformers.AutoModelForCausalLM.from_pretrained(where, **kw)
    except Exception as e:  # noqa: BLE001 - a truncated or mismatched weights file, named
        raise InputError(f"--model {a.model}: cannot load its weights ({type(e).__name__}: {first_line(e)})")
    if gg:
        # The weights are dequantized, plain tensors of the model dtype: nothing of the GGUF
        # quantizer is left in the forward pass, so the model is an ordinary one from here on.
        model.hf_quantizer = None
        if hasattr(model.config, "quantization_config"):
            del model.config.quantization_config
    elif os.path.isdir(a.model):
        check_stored_dtypes(a.model, model)
    model.to(device)
    model.eval()
    return model, tok, device, mdt


def check_stored_dtypes(model_dir, model):
    """transformers casts an integer tensor into a floating-point parameter without a word, which
    would make every activation of the dump meaningless: refuse, naming the file and tensor."""
    floats = {n for n, t in model.state_dict().items() if t.is_floating_point()}
    for f in sorted(os.listdir(model_dir)):
        if not f.endswith(".safetensors"):
            continue
        path = os.path.join(model_dir, f)
        try:
            with open(path, "rb") as fh:
                n = struct.unpack("<Q", fh.read(8))[0]
                header = json.loads(fh.read(n))
        except (OSError, ValueError, struct.error):
            continue  # transformers has read it already; its own errors were reported
        for name, e in header.items():
            if name in floats and isinstance(e, dict) and e.get("dtype") in ("I8", "I16", "I32", "I64", "U8", "BOOL"):
                raise InputError(f"--model {model_dir}: {f} stores {name} as {e['dtype']}, where the model has "
                                 f"floating-point weights")


def first_line(e):
    text = str(e).strip().splitlines()
    return text[0][:300] if text else type(e).__name__


def tokenize(tok, text_path, samples, seq_len, prepare=None):
    """samples × seq_len token ids: each sequence is BOS (when the tokenizer has one) and the next
    text tokens, cut from one pass over the text (after prepare(text), when given)."""
    try:
        with open(text_path, encoding="utf-8") as f:
            text = f.read()
    except UnicodeDecodeError as e:
        raise InputError(f"--text {text_path}: not UTF-8 text (byte {e.start} is 0x{e.object[e.start]:02x})")
    if prepare is not None:
        text = prepare(text)
    ids = tok(text, add_special_tokens=False)["input_ids"]
    bos = getattr(tok, "bos_token_id", None)
    body = seq_len - (1 if bos is not None else 0)
    need = samples * body
    if len(ids) < need:
        raise InputError(f"--text {text_path}: {len(ids):,} tokens, but --samples {samples} × --seq-len {seq_len} "
                         f"needs {need:,}{' (plus BOS each)' if bos is not None else ''}")
    seqs = []
    for s in range(samples):
        chunk = ids[s * body:(s + 1) * body]
        seqs.append(([bos] if bos is not None else []) + chunk)
    return seqs, len(ids)
