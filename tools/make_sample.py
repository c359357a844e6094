#!/usr/bin/env python3
"""Convert the stories260K real KV dump (a directory of .npy files) into the bundled sample.

Output: one safetensors file in the KV dump format of docs/formats.md:
  layers.{L}.key        [tokens, kv_heads, head_dim]  F16   keys before RoPE
  layers.{L}.value      [tokens, kv_heads, head_dim]  F16
  layers.{L}.query      [tokens, heads, head_dim]     F16   queries before RoPE
  layers.{L}.key_grad   [tokens, kv_heads, head_dim]  BF16  dL/d(key before RoPE)
  layers.{L}.value_grad [tokens, kv_heads, head_dim]  BF16  dL/d(value)
  positions, sequence_ids [tokens] I32;  rope.inv_freq [head_dim/2] F32
F16 keeps the sample small (its relative rounding, 2^-11, is far below any quantization error
studied here); gradients use BF16 because they are too small for F16's range.

Standard library only, so it runs with any Python 3.8+:
  python3 tools/make_sample.py ../shared/data/realkv/stories260K-gpl3 resources/samples/stories260K-gpl3.safetensors
"""
import argparse
import array
import ast
import json
import os
import struct
import sys
import tempfile

LAYERS = 5
HEADS, KV_HEADS, HEAD_DIM = 8, 4, 8
ROPE_THETA = 10000.0


def read_npy(path):
    with open(path, "rb") as f:
        raw = f.read()
    if raw[:6] != b"\x93NUMPY":
        sys.exit(f"{path}: not a .npy file")
    major = raw[6]
    if major == 1:
        (hlen,) = struct.unpack_from("<H", raw, 8)
        start = 10
    else:
        (hlen,) = struct.unpack_from("<I", raw, 8)
        start = 12
    header = ast.literal_eval(raw[start:start + hlen].decode("latin1"))
    if header["fortran_order"]:
        sys.exit(f"{path}: Fortran order is not supported")
    code = {"<f4": "f", "<i4": "i"}.get(header["descr"])
    if code is None:
        sys.exit(f"{path}: dtype {header['descr']} is not supported here")
    values = array.array(code)
    values.frombytes(raw[start + hlen:])
    if sys.byteorder != "little":
        values.byteswap()
    count = 1
    for s in header["shape"]:
        count *= s
    if len(values) != count:
        sys.exit(f"{path}: {len(values)} values, shape {header['shape']} needs {count}")
    return header["shape"], values


def to_f16(values):
    return b"".join(struct.pack("<e", v) for v in values)


def to_bf16(values):
    words = array.array("I")
    words.frombytes(values.tobytes())
    out = array.array("H", (((w + 0x7FFF + ((w >> 16) & 1)) >> 16) & 0xFFFF for w in words))
    return out.tobytes()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("src", help="directory with layerLL_*.npy, positions.npy, seq_ids.npy")
    ap.add_argument("out", help="output .safetensors")
    args = ap.parse_args()

    tensors = []  # (name, dtype, shape, bytes)
    tokens = None
    for layer in range(LAYERS):
        def load(stem):
            return read_npy(os.path.join(args.src, f"layer{layer:02d}_{stem}.npy"))

        for name, stem, heads, enc, dt in (
            ("key", "k_pre", KV_HEADS, to_f16, "F16"),
            ("value", "v", KV_HEADS, to_f16, "F16"),
            ("query", "q_pre", HEADS, to_f16, "F16"),
            ("key_grad", "grad_k_pre", KV_HEADS, to_bf16, "BF16"),
            ("value_grad", "grad_v", KV_HEADS, to_bf16, "BF16"),
        ):
            shape, values = load(stem)
            tokens = shape[0]
            if shape[1] != heads * HEAD_DIM:
                sys.exit(f"{stem}: expected {heads * HEAD_DIM} columns, got {shape[1]}")
            tensors.append((f"layers.{layer}.{name}", dt, [shape[0], heads, HEAD_DIM], enc(values)))

    for name, stem in (("positions", "positions"), ("sequence_ids", "seq_ids")):
        shape, values = read_npy(os.path.join(args.src, f"{stem}.npy"))
        tensors.append((name, "I32", list(shape), values.tobytes()))
    inv_freq = array.array("f", [ROPE_THETA ** (-2.0 * i / HEAD_DIM) for i in range(HEAD_DIM // 2)])
    tensors.append(("rope.inv_freq", "F32", [HEAD_DIM // 2], inv_freq.tobytes()))

    metadata = {
        "format": "gsrq-kv-dump",
        "format_version": "1",
        "model": "stories260K (llama2.c tinyllamas, trained on TinyStories; MIT licence)",
        "num_layers": str(LAYERS),
        "num_heads": str(HEADS),
        "num_kv_heads": str(KV_HEADS),
        "head_dim": str(HEAD_DIM),
        "key_rope": "pre",
        "rope_theta": str(ROPE_THETA),
        "rope_pairing": "interleaved",
        "text": "GNU GPL version 3 (/usr/share/common-licenses/GPL-3), 4 sequences x 512 tokens",
        "tokens": str(tokens),
        "loss": "summed next-token cross-entropy",
        "source": "real model run; converted by tools/make_sample.py (keys/values/queries F16, gradients BF16)",
    }
    header = {"__metadata__": metadata}
    offset = 0
    for name, dt, shape, data in tensors:
        header[name] = {"dtype": dt, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    hjson = json.dumps(header, separators=(",", ":")).encode()
    hjson += b" " * ((8 - (8 + len(hjson)) % 8) % 8)

    out_dir = os.path.dirname(os.path.abspath(args.out))
    fd, tmp = tempfile.mkstemp(dir=out_dir, prefix=".sample-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(struct.pack("<Q", len(hjson)))
            f.write(hjson)
            for _, _, _, data in tensors:
                f.write(data)
        os.chmod(tmp, 0o644)
        os.replace(tmp, args.out)
    except BaseException:
        os.unlink(tmp)
        raise
    print(f"wrote {args.out}: {len(tensors)} tensors, {tokens} tokens, {8 + len(hjson) + offset} bytes")


if __name__ == "__main__":
    main()
