#!/usr/bin/env python3
"""Write one tensor of a gsrq KV dump (.safetensors) as a 2-D float32 .npy of rows of its last axis.

For an outside baseline (FAISS) to cluster the same rows gsrq does: a tensor [tokens, heads, head_dim]
becomes tokens x heads rows of head_dim, every head's rows together. numpy only (bf16, f16, f32).
    kv_rows.py DUMP.safetensors TENSOR OUT.npy
"""
import json
import struct
import sys

import numpy as np


def main():
    path, name, out = sys.argv[1:4]
    with open(path, "rb") as f:
        size = struct.unpack("<Q", f.read(8))[0]
        header = json.loads(f.read(size))
        if name not in header:
            sys.exit(f"{path}: no tensor {name}")
        t = header[name]
        start, end = t["data_offsets"]
        f.seek(8 + size + start)
        raw = f.read(end - start)
    if t["dtype"] == "BF16":
        x = (np.frombuffer(raw, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)
    elif t["dtype"] == "F16":
        x = np.frombuffer(raw, dtype=np.float16).astype(np.float32)
    elif t["dtype"] == "F32":
        x = np.frombuffer(raw, dtype=np.float32)
    else:
        sys.exit(f"{path}: {name} is {t['dtype']}; expected BF16, F16 or F32")
    x = x.reshape(t["shape"]).reshape(-1, t["shape"][-1])
    np.save(out, np.ascontiguousarray(x))
    print(f"{name}: {x.shape[0]} rows of {x.shape[1]}", file=sys.stderr)


if __name__ == "__main__":
    main()
