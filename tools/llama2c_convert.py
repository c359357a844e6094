#!/usr/bin/env python3
"""Convert between llama2.c checkpoints (what `gsrq ppl` runs) and transformers' LlamaForCausalLM.

    python3 tools/llama2c_convert.py to-hf --model stories260K.bin --tokenizer tok512.bin --out DIR
    python3 tools/llama2c_convert.py to-llama2c --model DIR --out model.bin --tokenizer-out tok.bin

Both directions keep every weight exactly (float32). The two implementations pair RoPE's features
differently: llama2.c rotates interleaved pairs (x[2i], x[2i+1]), transformers' Llama rotates halves
(x[i], x[i + head_dim/2]). A permutation of the rows of wq and wk inside each head maps one onto the
other, so the attention scores, and so the logits, are the same; only the stored pre-RoPE keys and
queries come out in the permuted feature order (`permute_heads` / `unpermute_heads`).

The tokenizer: llama2.c's is sentencepiece BPE with byte fallback that merges the adjacent pair whose
concatenation has the highest score. As a `tokenizers` BPE, every split of a piece into two pieces is
a merge, ranked by the merged piece's score (ties by id), with the same byte fallback and prefix
space; `to-llama2c` writes scores of −id, which is the merge order the BPE trainer produced.
Exit codes: 0 done, 2 bad input (named).
"""
import argparse
import json
import os
import struct
import sys

import numpy as np

HEADER = struct.Struct("<7i")
SPECIAL = ("<unk>", "<s>", "</s>")
LLAMA2C_SPECIAL = ("<unk>", "\n<s>\n", "\n</s>\n")


class InputError(Exception):
    pass


# ---------------------------------------------------------------------------------------------
# RoPE pairing


def permute_heads(w, heads):
    """Rows of a [heads·hd, in] projection from interleaved pairs to rotate-half order."""
    out_dim, in_dim = w.shape
    hd = out_dim // heads
    return w.reshape(heads, hd // 2, 2, in_dim).transpose(0, 2, 1, 3).reshape(out_dim, in_dim)


def unpermute_heads(w, heads):
    """The inverse of permute_heads: rotate-half rows back to interleaved pairs."""
    out_dim, in_dim = w.shape
    hd = out_dim // heads
    return w.reshape(heads, 2, hd // 2, in_dim).transpose(0, 2, 1, 3).reshape(out_dim, in_dim)


def interleaved_feature_order(head_dim):
    """index[j]: the interleaved feature that rotate-half feature j holds (per head)."""
    return np.arange(head_dim).reshape(head_dim // 2, 2).T.reshape(-1)


# ---------------------------------------------------------------------------------------------
# llama2.c files


def read_llama2c(path):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise InputError(f"--model {path}: {e.strerror}")
    if len(raw) < HEADER.size:
        raise InputError(f"--model {path}: {len(raw)} bytes, shorter than a llama2.c header")
    dim, hidden, layers, heads, kv_heads, vocab, max_seq = HEADER.unpack_from(raw)
    shared = vocab > 0
    vocab = abs(vocab)
    if min(dim, hidden, layers, heads, kv_heads, vocab, max_seq) <= 0 or dim % heads or heads % kv_heads:
        raise InputError(f"--model {path}: not a llama2.c checkpoint (header {dim}, {hidden}, {layers}, {heads}, "
                         f"{kv_heads}, {vocab}, {max_seq})")
    hd = dim // heads
    kv_dim = kv_heads * hd
    shapes = [("embed", (vocab, dim)), ("attn_norm", (layers, dim)), ("wq", (layers, dim, dim)),
              ("wk", (layers, kv_dim, dim)), ("wv", (layers, kv_dim, dim)), ("wo", (layers, dim, dim)),
              ("ffn_norm", (layers, dim)), ("w1", (layers, hidden, dim)), ("w2", (layers, dim, hidden)),
              ("w3", (layers, hidden, dim)), ("final_norm", (dim,)), ("freq_cos", (max_seq, hd // 2)),
              ("freq_sin", (max_seq, hd // 2))]
    if not shared:
        shapes.append(("classifier", (vocab, dim)))
    need = HEADER.size + 4 * sum(int(np.prod(s)) for _, s in shapes)
    if len(raw) < need:
        raise InputError(f"--model {path}: {len(raw)} bytes, its header promises {need}")
    w, off = {}, HEADER.size
    for name, shape in shapes:
        n = int(np.prod(shape))
        w[name] = np.frombuffer(raw, dtype="<f4", count=n, offset=off).reshape(shape).copy()
        off += 4 * n
    cfg = dict(dim=dim, hidden=hidden, layers=layers, heads=heads, kv_heads=kv_heads, vocab=vocab, max_seq=max_seq,
               shared=shared)
    return cfg, w


def write_llama2c(path, cfg, w):
    """w as read_llama2c returns it (freq tables are recomputed with θ = 10000 when absent)."""
    hd = cfg["dim"] // cfg["heads"]
    if "freq_cos" not in w:
        inv = 1.0 / (10000.0 ** (np.arange(0, hd, 2, dtype=np.float64) / hd))
        ang = np.arange(cfg["max_seq"])[:, None] * inv[None, :]
        w["freq_cos"], w["freq_sin"] = np.cos(ang).astype(np.float32), np.sin(ang).astype(np.float32)
    vocab = cfg["vocab"] if cfg["shared"] else -cfg["vocab"]
    order = ["embed", "attn_norm", "wq", "wk", "wv", "wo", "ffn_norm", "w1", "w2", "w3", "final_norm", "freq_cos",
             "freq_sin"] + ([] if cfg["shared"] else ["classifier"])
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(HEADER.pack(cfg["dim"], cfg["hidden"], cfg["layers"], cfg["heads"], cfg["kv_heads"], vocab,
                            cfg["max_seq"]))
        for name in order:
            f.write(np.ascontiguousarray(w[name], dtype="<f4").tobytes())
    os.replace(tmp, path)


def read_tokenizer(path, vocab):
    try:
        with open(path, "rb") as f:
            raw = f.read()
    except OSError as e:
        raise InputError(f"--tokenizer {path}: {e.strerror}")
    pieces, scores, off = [], [], 4
    for i in range(vocab):
        if off + 8 > len(raw):
            raise InputError(f"--tokenizer {path}: ends at token {i} of {vocab}")
        score, n = struct.unpack_from("<fi", raw, off)
        off += 8
        if n < 0 or off + n > len(raw):
            raise InputError(f"--tokenizer {path}: token {i} has a bad length {n}")
        pieces.append(raw[off:off + n].decode("utf-8", errors="surrogateescape"))
        scores.append(score)
        off += n
    return pieces, scores


def write_tokenizer(path, pieces, scores):
    blobs = [p.encode("utf-8") for p in pieces]
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<i", max(len(b) for b in blobs)))
        for b, s in zip(blobs, scores):
            f.write(struct.pack("<fi", s, len(b)))
            f.write(b)
    os.replace(tmp, path)


# ---------------------------------------------------------------------------------------------
# tokenizers' side


def is_byte_piece(p):
    return len(p) == 6 and p.startswith("<0x") and p.endswith(">")


def hf_tokenizer_json(pieces, scores):
    """A tokenizer.json (Llama's sentencepiece-BPE conventions) that encodes as llama2.c does."""
    vocab = {}
    for i, p in enumerate(pieces):
        key = SPECIAL[i] if i < 3 else p if is_byte_piece(p) else p.replace(" ", "\u2581")
        vocab.setdefault(key, i)
    merges = []
    for i, p in enumerate(pieces):
        if i < 3 or is_byte_piece(p) or len(p) < 2:
            continue
        key = p.replace(" ", "\u2581")
        for cut in range(1, len(key)):
            a, b = key[:cut], key[cut:]
            if a in vocab and b in vocab:
                merges.append((-scores[i], i, vocab[a], a, b))
    merges.sort()
    return {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": i, "content": SPECIAL[i], "single_word": False, "lstrip": False, "rstrip": False,
                          "normalized": False, "special": True} for i in range(3)],
        "normalizer": {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"},
                                                           {"type": "Replace", "pattern": {"String": " "},
                                                            "content": "\u2581"}]},
        "pre_tokenizer": None,
        "post_processor": {"type": "TemplateProcessing",
                           "single": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                      {"Sequence": {"id": "A", "type_id": 0}}],
                           "pair": [{"SpecialToken": {"id": "<s>", "type_id": 0}},
                                    {"Sequence": {"id": "A", "type_id": 0}},
                                    {"Sequence": {"id": "B", "type_id": 1}}],
                           "special_tokens": {"<s>": {"id": "<s>", "ids": [1], "tokens": ["<s>"]}}},
        "decoder": {"type": "Sequence", "decoders": [{"type": "Replace", "pattern": {"String": "\u2581"},
                                                      "content": " "},
                                                     {"type": "ByteFallback"}, {"type": "Fuse"},
                                                     {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
        "model": {"type": "BPE", "dropout": None, "unk_token": "<unk>", "continuing_subword_prefix": None,
                  "end_of_word_suffix": None, "fuse_unk": True, "byte_fallback": True, "ignore_merges": False,
                  "vocab": vocab, "merges": [[a, b] for _, _, _, a, b in merges]},
    }


def pieces_from_hf(tokenizer_json):
    """llama2.c pieces and scores from a tokenizers BPE trained with Llama's conventions (ids 0–2 the
    special tokens, then the byte tokens): the pieces in id order, spaces for ▁, score −id."""
    vocab = tokenizer_json["model"]["vocab"]
    pieces = [None] * len(vocab)
    for p, i in vocab.items():
        pieces[i] = p
    if None in pieces or tuple(pieces[:3]) != SPECIAL:
        raise InputError("tokenizer.json: expected ids 0, 1, 2 to be <unk>, <s>, </s> and no gaps")
    # llama2.c's own exports write BOS and EOS with newlines around them (its decoder prints them so).
    out = [LLAMA2C_SPECIAL[i] if i < 3 else p if is_byte_piece(p) else p.replace("\u2581", " ")
           for i, p in enumerate(pieces)]
    scores = [0.0 if (i < 3 or is_byte_piece(p)) else -float(i) for i, p in enumerate(pieces)]
    return out, scores


# ---------------------------------------------------------------------------------------------
# The two directions


def to_hf(model_path, tok_path, out_dir):
    import torch
    import transformers
    cfg, w = read_llama2c(model_path)
    pieces, scores = read_tokenizer(tok_path, cfg["vocab"])
    hc = transformers.LlamaConfig(
        vocab_size=cfg["vocab"], hidden_size=cfg["dim"], intermediate_size=cfg["hidden"],
        num_hidden_layers=cfg["layers"], num_attention_heads=cfg["heads"], num_key_value_heads=cfg["kv_heads"],
        max_position_embeddings=cfg["max_seq"], rms_norm_eps=1e-5, rope_theta=10000.0,
        tie_word_embeddings=cfg["shared"], bos_token_id=1, eos_token_id=2, pad_token_id=None,
        attention_bias=False, mlp_bias=False, hidden_act="silu")
    model = transformers.LlamaForCausalLM(hc)
    sd = {"model.embed_tokens.weight": w["embed"], "model.norm.weight": w["final_norm"]}
    for l in range(cfg["layers"]):
        p = f"model.layers.{l}."
        sd[p + "input_layernorm.weight"] = w["attn_norm"][l]
        sd[p + "post_attention_layernorm.weight"] = w["ffn_norm"][l]
        sd[p + "self_attn.q_proj.weight"] = permute_heads(w["wq"][l], cfg["heads"])
        sd[p + "self_attn.k_proj.weight"] = permute_heads(w["wk"][l], cfg["kv_heads"])
        sd[p + "self_attn.v_proj.weight"] = w["wv"][l]
        sd[p + "self_attn.o_proj.weight"] = w["wo"][l]
        sd[p + "mlp.gate_proj.weight"] = w["w1"][l]
        sd[p + "mlp.down_proj.weight"] = w["w2"][l]
        sd[p + "mlp.up_proj.weight"] = w["w3"][l]
    sd["lm_head.weight"] = w["embed"] if cfg["shared"] else w["classifier"]
    missing, unexpected = model.load_state_dict({k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in sd.items()},
                                                strict=False)
    if unexpected or [m for m in missing if "rotary" not in m]:
        raise RuntimeError(f"weights do not match LlamaForCausalLM: missing {missing}, unexpected {unexpected}")
    os.makedirs(out_dir, exist_ok=True)
    model.save_pretrained(out_dir)
    tj = hf_tokenizer_json(pieces, scores)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        json.dump(tj, f, ensure_ascii=False)
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>",
                   "unk_token": "<unk>", "add_bos_token": True, "add_eos_token": False,
                   "clean_up_tokenization_spaces": False, "model_max_length": cfg["max_seq"]}, f, indent=1)
    return cfg


def to_llama2c(model_dir, out_bin, tok_out):
    import torch
    import transformers
    model = transformers.LlamaForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    c = model.config
    hd = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    if hd * c.num_attention_heads != c.hidden_size:
        raise InputError(f"--model {model_dir}: llama2.c needs hidden_size = heads × head_dim "
                         f"({c.hidden_size} ≠ {c.num_attention_heads} × {hd})")
    theta = getattr(c, "rope_theta", None) or (getattr(c, "rope_parameters", None) or {}).get("rope_theta")
    if float(theta) != 10000.0 or abs(float(c.rms_norm_eps) - 1e-5) > 1e-12:
        raise InputError(f"--model {model_dir}: llama2.c fixes RoPE θ = 10000 and RMSNorm ε = 1e-5 "
                         f"(the model has {theta} and {c.rms_norm_eps})")
    sd = {k: v.detach().float().numpy() for k, v in model.state_dict().items()}
    L = c.num_hidden_layers
    shared = bool(c.tie_word_embeddings)
    cfg = dict(dim=c.hidden_size, hidden=c.intermediate_size, layers=L, heads=c.num_attention_heads,
               kv_heads=c.num_key_value_heads, vocab=c.vocab_size, max_seq=c.max_position_embeddings, shared=shared)
    st = lambda name: np.stack([sd[f"model.layers.{l}.{name}"] for l in range(L)])  # noqa: E731
    w = {"embed": sd["model.embed_tokens.weight"], "attn_norm": st("input_layernorm.weight"),
         "wq": np.stack([unpermute_heads(sd[f"model.layers.{l}.self_attn.q_proj.weight"], cfg["heads"]) for l in range(L)]),
         "wk": np.stack([unpermute_heads(sd[f"model.layers.{l}.self_attn.k_proj.weight"], cfg["kv_heads"]) for l in range(L)]),
         "wv": st("self_attn.v_proj.weight"), "wo": st("self_attn.o_proj.weight"),
         "ffn_norm": st("post_attention_layernorm.weight"), "w1": st("mlp.gate_proj.weight"),
         "w2": st("mlp.down_proj.weight"), "w3": st("mlp.up_proj.weight"), "final_norm": sd["model.norm.weight"]}
    if not shared:
        w["classifier"] = sd["lm_head.weight"]
    write_llama2c(out_bin, cfg, w)
    with open(os.path.join(model_dir, "tokenizer.json"), encoding="utf-8") as f:
        pieces, scores = pieces_from_hf(json.load(f))
    write_tokenizer(tok_out, pieces, scores)
    return cfg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a1 = sub.add_parser("to-hf", help="llama2.c checkpoint and tokenizer -> transformers model directory")
    a1.add_argument("--model", required=True)
    a1.add_argument("--tokenizer", required=True)
    a1.add_argument("--out", required=True)
    a2 = sub.add_parser("to-llama2c", help="transformers Llama directory -> llama2.c checkpoint and tokenizer")
    a2.add_argument("--model", required=True)
    a2.add_argument("--out", required=True)
    a2.add_argument("--tokenizer-out", required=True)
    a = ap.parse_args(argv)
    try:
        if a.cmd == "to-hf":
            cfg = to_hf(a.model, a.tokenizer, a.out)
        else:
            if not os.path.isdir(a.model):
                raise InputError(f"--model {a.model}: no such directory")
            cfg = to_llama2c(a.model, a.out, a.tokenizer_out)
    except InputError as e:
        print(f"llama2c_convert.py: {e}", file=sys.stderr)
        return 2
    print(f"{a.cmd}: dim {cfg['dim']}, {cfg['layers']} layers, {cfg['heads']} heads, {cfg['kv_heads']} KV heads, "
          f"vocab {cfg['vocab']} -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
