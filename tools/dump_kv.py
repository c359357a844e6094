#!/usr/bin/env python3
"""Dump keys, values, queries and loss gradients of a Hugging Face causal LM for GSRQ Studio.

    python3 tools/dump_kv.py --model meta-llama/Meta-Llama-3-8B --text wiki.train.txt \\
        --samples 128 --seq-len 2048 --out llama3-8b-kv/ [--layers 0-31] [--dtype bf16] [--no-grad]
    gsrq info llama3-8b-kv/

Supported: decoder-only attention with q_proj / k_proj / v_proj or a fused qkv_proj: Llama 2/3,
Mistral, Mixtral, Qwen2/3 (and their MoE), Gemma 1/2/3 and Phi-3.
Per layer L it records, for every token of `--samples` sequences of `--seq-len` tokens:
  layers.L.key, layers.L.value   [tokens, kv_heads, head_dim]   keys before RoPE, values
  layers.L.query                 [tokens, heads, head_dim]      queries before RoPE
  layers.L.key_grad, value_grad  [tokens, kv_heads, head_dim]   d(summed next-token loss)/d(key, value)
  layers.L.key_post, query_post  (with --post-rope)             the same after RoPE
and once: positions, sequence_ids [tokens] and rope.inv_freq [rotary_dim/2]. "Before RoPE" is the
projection output (the q, k or v slice of a fused projection), or for models that normalise q and k
per head (Qwen3, Gemma 3) the normalised output that RoPE rotates. "After RoPE" is what the model's
attention received, captured from its attention function where transformers lets one be registered
(so per-layer frequencies, as Gemma 3's local and global layers have, are the model's own), else
recomputed from inv_freq. The metadata records what attention needs beyond q, k and v: sliding
windows, per-layer attention types, logit soft-capping and the query scale. Output: a directory of safetensors shards (common.safetensors, then one
layer_LLL.safetensors per layer) that `gsrq` opens as one dump. Activations go to disk sequence by
sequence and each shard is streamed from there, so memory stays at one sequence's activations.

--model is a transformers model directory, a hub id, or a GGUF file (or a directory holding one, as
tools/fetch_model.py leaves it): transformers dequantizes a GGUF model's weights to --model-dtype, and
a model whose weights and backward pass would not fit in the memory available (estimated from the
GGUF's tensor table before loading) is refused with both figures.
Needs torch and transformers (the user's environment; gguf and accelerate for GGUF models); nothing
is downloaded unless --model is a hub id that is not cached. Exit codes: 0 done, 2 bad input (named), 1 other failures, 128 + N when
stopped by signal N (SIGTERM, SIGHUP, SIGINT: after the sequence in progress); on any failure nothing
is left at --out. The work happens in a staging directory beside --out (.NAME.dump_kv), removed on
every exit unless --resume was given, in which case a stop or crash keeps it and the same command
with --resume continues from the last finished sequence (the result is byte-identical to an
uninterrupted run). Staging that a killed run left is reused with --resume, removed without it.
Before the first sequence the bytes the dump needs at its peak are compared with the free space.
"""
import argparse
import json
import math
import os
import shutil
import struct
import sys
import time

from gsrqtools.hf import DTYPES, InputError, describe, load_model, parse_layers, tokenize, torch_dtype
from gsrqtools.kvhooks import ActivationGradients, AttentionCapture, Recorder, producers  # noqa: F401
from gsrqtools.rope import rope_post, rotate_half  # noqa: F401

TOOL_VERSION = "1.2"


# ---------------------------------------------------------------------------------------------
# Command line


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="local directory or hub id of a Llama-family causal LM")
    ap.add_argument("--text", required=True, help="calibration text file (UTF-8)")
    ap.add_argument("--samples", type=int, default=16, help="sequences to run")
    ap.add_argument("--seq-len", type=int, default=2048, help="tokens per sequence (the first is BOS when the tokenizer has one)")
    ap.add_argument("--out", required=True, help="output directory (must not exist unless --force)")
    ap.add_argument("--layers", default="", help="layers to record, e.g. 0-31 or 0,4,8 (default: all)")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16",
                    help="dtype of the stored tensors (bf16 keeps tiny gradients that f16 would flush to zero)")
    ap.add_argument("--model-dtype", choices=("auto", "f32", "bf16", "f16"), default="auto",
                    help="dtype to run the model in (auto: bf16 on CUDA, f32 on the CPU)")
    ap.add_argument("--device", default="auto", help="cuda, cuda:N, cpu (auto: cuda when available)")
    ap.add_argument("--no-grad", action="store_true", help="skip the backward pass (no key_grad / value_grad)")
    ap.add_argument("--post-rope", action="store_true", help="also store keys and queries after RoPE")
    ap.add_argument("--dry-run", action="store_true", help="print the tensors and bytes it would write, then stop")
    ap.add_argument("--force", action="store_true", help="replace an existing --out")
    ap.add_argument("--resume", action="store_true",
                    help="continue a stopped or killed dump of the same --out and settings from its last finished "
                         "sequence; a stop keeps what a later --resume needs")
    ap.add_argument("--quiet", action="store_true", help="no progress bar")
    a = ap.parse_args(argv)
    if a.samples < 1:
        raise InputError(f"--samples {a.samples}: must be at least 1")
    if a.seq_len < 2:
        raise InputError(f"--seq-len {a.seq_len}: must be at least 2 (the loss needs a next token)")
    if not os.path.isfile(a.text):
        raise InputError(f"--text {a.text}: no such file")
    return a


# ---------------------------------------------------------------------------------------------
# Streaming safetensors writer: the header is known before the data (every shape is), so each
# tensor is copied from its spool file in blocks and no tensor is ever whole in memory.


def write_safetensors(path, entries, metadata):
    """entries: list of (name, dtype_tag, shape, source) in file order; source is bytes or the path
    of a raw little-endian file holding exactly the tensor's bytes."""
    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    offset = 0
    sizes = []
    for name, tag, shape, src in entries:
        n = os.path.getsize(src) if isinstance(src, str) else len(src)
        itemsize = {"F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4}[tag]
        if n != math.prod(shape) * itemsize:
            raise RuntimeError(f"{path}: {name} holds {n} bytes, its shape {shape} needs {math.prod(shape) * itemsize}")
        header[name] = {"dtype": tag, "shape": list(shape), "data_offsets": [offset, offset + n]}
        offset += n
        sizes.append(n)
    blob = json.dumps(header, separators=(",", ":")).encode()
    blob += b" " * (-len(blob) % 8)  # 8-byte aligned data section
    # Written beside `path` and renamed into place: an interrupted export leaves no half file.
    tmp = f"{path}.tmp-{os.getpid()}"
    try:
        _write_safetensors_body(tmp, blob, entries, sizes)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return offset + 8 + len(blob)


def _write_safetensors_body(path, blob, entries, sizes):
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(blob)))
        f.write(blob)
        for (_, _, _, src), n in zip(entries, sizes):
            if isinstance(src, str):
                with open(src, "rb") as s:
                    shutil.copyfileobj(s, f, 16 << 20)
            else:
                f.write(src)
        f.flush()
        os.fsync(f.fileno())


# ---------------------------------------------------------------------------------------------
# Progress (the model, its hooks and RoPE are gsrqtools': hf, kvhooks, rope)


class Progress:
    """A bar redrawn in place on a terminal; elsewhere (a batch job's log) a line at most every
    30 seconds and at the end, so a cluster job's output stays readable."""

    def __init__(self, total, quiet):
        self.total, self.quiet, self.done, self.start = total, quiet, 0, time.time()
        self.tty = sys.stderr.isatty()
        self.last_line = self.start

    def step(self, what):
        self.done += 1
        if self.quiet:
            return
        now = time.time()
        frac = self.done / self.total
        eta = (now - self.start) / self.done * (self.total - self.done)
        if self.tty:
            bar = "#" * int(30 * frac)
            sys.stderr.write(f"\r[{bar:<30}] {self.done}/{self.total} {what}  eta {eta:5.0f}s")
            if self.done == self.total:
                sys.stderr.write("\n")
        elif now - self.last_line >= 30 or self.done == self.total:
            self.last_line = now
            sys.stderr.write(f"{self.done}/{self.total} {what}, eta {eta:.0f} s\n")
        sys.stderr.flush()


# ---------------------------------------------------------------------------------------------
# The dump


def plan(info, layer_ids, a, tokens):
    """(shard file, [(tensor name, shape)]) for every shard, in writing order."""
    kvh, h, hd = info["kv_heads"], info["heads"], info["head_dim"]
    common = [("positions", (tokens,)), ("sequence_ids", (tokens,)), ("rope.inv_freq", (info["rotary_dim"] // 2,))]
    for lt in per_type_freqs(info):
        common.append((f"rope.inv_freq.{lt}", (info["rotary_dim"] // 2,)))
    shards = [("common.safetensors", common)]
    for lid in layer_ids:
        t = [(f"layers.{lid}.key", (tokens, kvh, hd)), (f"layers.{lid}.value", (tokens, kvh, hd)),
             (f"layers.{lid}.query", (tokens, h, hd))]
        if not a.no_grad:
            t += [(f"layers.{lid}.key_grad", (tokens, kvh, hd)), (f"layers.{lid}.value_grad", (tokens, kvh, hd))]
        if a.post_rope:
            t += [(f"layers.{lid}.key_post", (tokens, kvh, hd)), (f"layers.{lid}.query_post", (tokens, h, hd))]
        shards.append((f"layer_{lid:03d}.safetensors", t))
    return shards


def per_type_freqs(info):
    """Layer types whose frequencies are stored beside rope.inv_freq (rope.inv_freq.TYPE): all of them
    when the types rotate differently (Gemma 3's local and global layers), else none."""
    per = info["rope_per_type"]
    first = next(iter(per.values()))[0]
    if all(bool((v[0] == first).all()) for v in per.values()):
        return []
    return sorted(per)


def tensor_bytes(name, shape, store_size):
    return math.prod(shape) * (8 if name in ("positions", "sequence_ids") else 4 if name.startswith("rope.inv_freq")
                               else store_size)


class Stopped(Exception):
    """A signal asked the exporter to stop (after the sequence in progress)."""

    def __init__(self, signum):
        super().__init__(signum)
        self.signum = signum


class StopSignals:
    """SIGTERM (Slurm's time limit and preemption), SIGHUP and SIGINT ask for a stop: the sequence in
    progress finishes, then the exporter cleans up and exits 128 + the signal's number. A second
    SIGINT (Ctrl-C twice) stops at once."""

    SIGNALS = ("SIGTERM", "SIGHUP", "SIGINT")

    def __init__(self):
        self.signum = None
        self.saved = {}

    def __enter__(self):
        import signal
        for name in self.SIGNALS:
            sig = getattr(signal, name, None)
            if sig is not None:
                try:
                    self.saved[sig] = signal.signal(sig, self._handle)
                except ValueError:  # not the main thread: signals stay as they were
                    pass
        return self

    def _handle(self, signum, frame):
        import signal
        if self.signum == signum == signal.SIGINT:
            raise KeyboardInterrupt
        self.signum = signum

    def check(self):
        if self.signum is not None:
            raise Stopped(self.signum)

    def __exit__(self, *exc):
        import signal
        for sig, handler in self.saved.items():
            signal.signal(sig, handler)


def staging_path(out):
    """The staging directory of a dump: beside --out (same file system, so the finished dump is
    renamed into place), one per --out, so that a later run finds what an earlier one left."""
    parent = os.path.dirname(os.path.abspath(out)) or "."
    return os.path.join(parent, f".{os.path.basename(os.path.abspath(out))}.dump_kv")


def pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def read_json(path):
    try:
        with open(path) as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def write_json(path, obj):
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def claim_staging(stage, a, fingerprint):
    """Takes the staging directory for this run: {"done": sequences finished, "loss_sum", "shards":
    shard files finished}. What another process left is refused while that process lives; once it
    is gone, reused with --resume when it was made with the same settings, else removed (with a
    message either way)."""
    state = {"done": 0, "loss_sum": 0.0, "shards": []}
    if os.path.isdir(stage):
        owner = read_json(os.path.join(stage, "owner.json")) or {}
        pid, host = owner.get("pid"), owner.get("host")
        if isinstance(pid, int) and host == socket_host() and pid != os.getpid() and pid_alive(pid):
            raise InputError(f"--out {a.out}: another dump_kv.py (pid {pid}) is writing it (staging {stage})")
        left = read_json(os.path.join(stage, "progress.json"))
        if a.resume and left and owner.get("fingerprint") == fingerprint:
            state = left
            print(f"dump_kv.py: resuming from {stage}: {state['done']} of {a.samples} sequences done"
                  + (f", {len(state['shards'])} shard files written" if state["shards"] else ""), file=sys.stderr)
        else:
            why = ("it was made with other settings" if a.resume and left else
                   "nothing in it can be resumed" if a.resume else "no --resume")
            print(f"dump_kv.py: removing the staging {stage} left by an earlier run (pid {pid}): {why}",
                  file=sys.stderr)
            shutil.rmtree(stage)
    os.makedirs(os.path.join(stage, "spool"), exist_ok=True)
    os.makedirs(os.path.join(stage, "out"), exist_ok=True)
    write_json(os.path.join(stage, "owner.json"), {"pid": os.getpid(), "host": socket_host(),
                                                   "fingerprint": fingerprint})
    return state


def socket_host():
    import socket
    return socket.gethostname()


def run(a, loaded=None):
    """loaded: (model, tokenizer, device, model dtype) already in memory, instead of --model."""
    model, tok, device, mdt = loaded or load_model(a)
    import torch
    info = describe(model)
    layer_ids = parse_layers(a.layers, info["num_layers"])
    tokens = a.samples * a.seq_len
    tag, size = DTYPES[a.dtype]
    shards = plan(info, layer_ids, a, tokens)
    total = sum(tensor_bytes(n, s, size) for _, ts in shards for n, s in ts)
    if a.dry_run or not a.quiet:
        print(f"{a.model}: {info['model_type']}, {info['num_layers']} layers, {info['heads']} heads, "
              f"{info['kv_heads']} KV heads, head_dim {info['head_dim']}; {a.samples} × {a.seq_len} tokens "
              f"on {device} in {mdt}")
    if a.dry_run:
        for fname, ts in shards:
            for n, s in ts:
                print(f"  {fname:<22} {n:<28} {str(list(s)):<22} {tensor_bytes(n, s, size):>14,} bytes")
        print(f"total {total:,} bytes in {len(shards)} files (nothing written: --dry-run)")
        return 0

    if os.path.exists(a.out) and not a.force:
        raise InputError(f"--out {a.out} exists; pass --force to replace it")
    parent = os.path.dirname(os.path.abspath(a.out)) or "."
    if not os.path.isdir(parent):
        raise InputError(f"--out {a.out}: the directory {parent} does not exist")
    fingerprint = json.dumps({"model": os.path.abspath(a.model) if os.path.exists(a.model) else a.model,
                              "text": os.path.abspath(a.text), "text_bytes": os.path.getsize(a.text),
                              "samples": a.samples, "seq_len": a.seq_len, "layers": layer_ids, "dtype": a.dtype,
                              "model_dtype": mdt, "grad": not a.no_grad, "post_rope": a.post_rope,
                              "tool_version": TOOL_VERSION}, sort_keys=True)
    stage = staging_path(a.out)
    keep = False  # the staging stays only when a stop leaves something to --resume
    with StopSignals() as stop:
        try:
            state = claim_staging(stage, a, fingerprint)
            keep = a.resume
            spool, out_dir = os.path.join(stage, "spool"), os.path.join(stage, "out")
            # Per sequence, each spool file grows by its tensor's bytes for seq_len rows.
            per_seq = {n: tensor_bytes(n, s, size) // a.samples for fname, ts in shards[1:] for n, s in ts}
            # The peak: the whole spool, plus the largest shard while it is copied out of it.
            written = sum(per_seq[n] * state["done"] for n in per_seq)
            need = total + max(sum(tensor_bytes(n, s, size) for n, s in ts) for _, ts in shards) - written
            free = shutil.disk_usage(stage).free
            if need > free:
                raise InputError(f"--out {a.out}: the dump needs {need:,} more bytes at its peak (spool and "
                                 f"shards), {parent} has {free:,} free")
            seqs, text_tokens = tokenize(tok, a.text, a.samples, a.seq_len)
            loss_sum = run_sequences(a, model, device, info, layer_ids, seqs, state, spool, per_seq, stop, stage)
            metadata = {
                "format": "gsrq-kv-dump", "format_version": 1, "model": a.model, "model_type": info["model_type"],
                "num_layers": info["num_layers"], "layers": ",".join(map(str, layer_ids)),
                "num_heads": info["heads"], "num_kv_heads": info["kv_heads"], "head_dim": info["head_dim"],
                "key_rope": "pre", "rope_theta": info["rope_theta"], "rope_pairing": "half",
                "rope_attention_scaling": info["rope_scaling"], "dtype": a.dtype, "model_dtype": mdt,
                "text": os.path.basename(a.text), "text_tokens": text_tokens, "tokens": tokens,
                "samples": a.samples, "seq_len": a.seq_len, "gradients": "none" if a.no_grad else
                "d(summed next-token cross-entropy)/d(projection output)",
                "mean_loss": loss_sum / (a.samples * (a.seq_len - 1)),
                "tool": "dump_kv.py", "tool_version": TOOL_VERSION, "rotary_dim": info["rotary_dim"],
                "post_rope_source": state.get("post_rope_source", "none"), **info["extra"],
            }
            pos = torch.arange(a.seq_len, dtype=torch.int64).repeat(a.samples).numpy().tobytes()
            sid = torch.arange(a.samples, dtype=torch.int64).repeat_interleave(a.seq_len).numpy().tobytes()
            inv = info["inv_freq"].to(torch.float32).numpy().tobytes()
            for fname, ts in shards:
                if fname in state["shards"]:
                    continue
                stop.check()
                entries = []
                for n, s in ts:
                    if n == "positions":
                        entries.append((n, "I64", s, pos))
                    elif n == "sequence_ids":
                        entries.append((n, "I64", s, sid))
                    elif n == "rope.inv_freq":
                        entries.append((n, "F32", s, inv))
                    elif n.startswith("rope.inv_freq."):
                        entries.append((n, "F32", s, info["rope_per_type"][n[len("rope.inv_freq."):]][0]
                                        .to(torch.float32).numpy().tobytes()))
                    else:
                        entries.append((n, tag, s, os.path.join(spool, n)))
                write_safetensors(os.path.join(out_dir, fname), entries, metadata)
                state["shards"].append(fname)
                write_json(os.path.join(stage, "progress.json"), state)
                for n, _, _, src in entries:
                    if isinstance(src, str):
                        os.remove(src)  # the spool shrinks as shards are written
            written = sum(os.path.getsize(os.path.join(out_dir, f)) for f, _ in shards)
            if os.path.exists(a.out):
                shutil.rmtree(a.out)
            os.rename(out_dir, a.out)
            keep = False
            if not a.quiet:
                print(f"wrote {a.out}: {len(shards)} files, {written:,} bytes; mean next-token loss "
                      f"{metadata['mean_loss']:.4f}")
            return 0
        except Stopped as e:
            import signal
            name = signal.Signals(e.signum).name
            done = read_json(os.path.join(stage, "progress.json")) or {"done": 0}
            if keep:
                print(f"dump_kv.py: stopped by {name} after {done['done']} of {a.samples} sequences; the staging "
                      f"{stage} is kept: run the same command with --resume to continue", file=sys.stderr)
            else:
                print(f"dump_kv.py: stopped by {name} after {done['done']} of {a.samples} sequences; nothing was "
                      f"kept (--resume keeps what a later run can continue from)", file=sys.stderr)
            return 128 + e.signum
        finally:
            if not keep:
                shutil.rmtree(stage, ignore_errors=True)


def run_sequences(a, model, device, info, layer_ids, seqs, state, spool, per_seq, stop, stage):
    """Runs the sequences not yet done, appending each one's tensors to the spool files and then
    recording it as done in progress.json, so a resumed run continues from a finished sequence
    (a spool file longer than its done sequences, from a kill mid-sequence, is cut back)."""
    import torch
    want_grad = not a.no_grad
    store_dtype = torch_dtype(torch, a.dtype)
    files = {}
    for n, per in per_seq.items():
        path = os.path.join(spool, n)
        f = open(path, "r+b" if os.path.exists(path) else "wb")
        f.truncate(per * state["done"])
        f.seek(per * state["done"])
        files[n] = f

    def put(name, t):
        # [1, T, F] or [1, T, H, hd] -> contiguous little-endian bytes of [T, F] in the stored dtype
        t = t.detach().reshape(t.shape[1], -1).to(store_dtype).contiguous().cpu()
        if t.dtype == torch.bfloat16:
            t = t.view(torch.int16)  # NumPy has no bfloat16; the bytes are what the file holds
        files[name].write(t.numpy().tobytes())

    rec = Recorder(info["layers"], layer_ids, want_grad, info["heads"], info["kv_heads"], info["head_dim"])
    capture = AttentionCapture(model, layer_ids) if a.post_rope else None
    frozen = None
    try:
        frozen = ActivationGradients(model) if want_grad else None
        loss_sum = state["loss_sum"]
        progress = Progress(a.samples - state["done"], a.quiet)
        positions = torch.arange(a.seq_len)
        for si in range(state["done"], a.samples):
            stop.check()
            x = torch.tensor([seqs[si]], device=device)
            model.zero_grad(set_to_none=True)
            with torch.set_grad_enabled(want_grad):
                # use_cache=False: transformers 5 would build a KV cache on every forward
                out = model(input_ids=x, labels=x, use_cache=False)
                # transformers' loss is the mean over the T−1 predicted tokens; the dump's gradients
                # are of the sum, as in the bundled sample
                loss = out.loss * (a.seq_len - 1)
                if want_grad:
                    loss.backward()
            loss_sum += float(loss.detach())
            for lid in layer_ids:
                q, k, v, kg, vg = rec.tensors(lid)
                put(f"layers.{lid}.key", k)
                put(f"layers.{lid}.value", v)
                put(f"layers.{lid}.query", q)
                if want_grad:
                    for kind, t, g in (("key", k, kg), ("value", v, vg)):
                        put(f"layers.{lid}.{kind}_grad", g if g is not None else torch.zeros_like(t))
                if a.post_rope:
                    hd = info["head_dim"]
                    qp = capture.take(lid, "query") if capture.active else None
                    kp = capture.take(lid, "key") if capture.active else None
                    if kp is None or qp is None:
                        inv, scale = info["rope_per_type"][info["layer_types"][lid]]
                        kp = rope_post(k.detach().reshape(a.seq_len, -1, hd).cpu(), positions, inv, scale)
                        qp = rope_post(q.detach().reshape(a.seq_len, -1, hd).cpu(), positions, inv, scale)
                    put(f"layers.{lid}.key_post", kp[None])
                    put(f"layers.{lid}.query_post", qp[None])
            rec.clear()
            for f in files.values():
                f.flush()
                os.fsync(f.fileno())
            state["done"], state["loss_sum"] = si + 1, loss_sum
            if capture is not None:
                state["post_rope_source"] = ("attention inputs" if capture.active else
                                             "recomputed from rope.inv_freq")
            write_json(os.path.join(stage, "progress.json"), state)
            progress.step(f"sequence {si + 1}")
        return loss_sum
    finally:
        rec.remove()
        if frozen is not None:
            frozen.remove()
        if capture is not None:
            capture.remove()
        for f in files.values():
            f.close()


def main(argv=None, loaded=None):
    try:
        a = parse_args(argv)
        return run(a, loaded)
    except InputError as e:
        print(f"dump_kv.py: {e}", file=sys.stderr)
        return 2
    except OSError as e:
        import errno
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            print(f"dump_kv.py: disk full writing {e.filename or 'the dump'}: {e.strerror}; --out was not "
                  f"written", file=sys.stderr)
            return 1
        raise
    except KeyboardInterrupt:
        print("dump_kv.py: interrupted (Ctrl-C twice); --out was not written", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
