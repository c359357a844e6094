#!/usr/bin/env python3
"""The engine's GGUF dequantization against the `gguf` Python package's, tensor by tensor, bit for bit.

For every tensor of a GGUF file, the SHA-256 of its FP32 values as `gsrq info MODEL.gguf --checksums`
computes them (the engine's reader and dequantization) against the SHA-256 of
`gguf.quants.dequantize` on the same bytes (gguf-py's NumPy implementation).

  python3 tools/gguf_checksums.py MODEL.gguf [--gsrq build/app/cli/gsrq]
  python3 tools/gguf_checksums.py --model qwen2.5-coder-1.5b     # a model of tools/python/models.json

Prints one line per tensor type (tensors, identical) and the tensors that differ; exit 0 when every
tensor is identical, 1 when any differs, 2 for bad input. Needs numpy and gguf (tools/hf_env.sh).
"""
import argparse
import hashlib
import json
import subprocess
import sys
import time

from gsrqtools import models


def python_checksums(path):
    """{name: (type name, SHA-256 of gguf-py's FP32 values)} for every tensor of the file."""
    import gguf
    import numpy as np
    reader = gguf.GGUFReader(path)
    out = {}
    for t in reader.tensors:
        values = gguf.quants.dequantize(t.data, t.tensor_type)
        raw = np.ascontiguousarray(values, dtype="<f4").tobytes()
        out[t.name] = (t.tensor_type.name, hashlib.sha256(raw).hexdigest())
    return out


def engine_checksums(path, gsrq):
    """{name: (type name, SHA-256)} from `gsrq info --checksums --json`; raises on a failing gsrq."""
    r = subprocess.run([gsrq, "info", path, "--checksums", "--json"], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"gsrq info {path} --checksums exited {r.returncode}: {r.stderr.strip()}")
    info = json.loads(r.stdout)
    return {t["name"]: (t["type"], t["fp32_sha256"]) for t in info["tensors"]}


def compare(path, gsrq):
    """(per type {type: [tensors, identical]}, [names that differ or are missing on one side])."""
    ours, theirs = engine_checksums(path, gsrq), python_checksums(path)
    by_type, bad = {}, []
    for name in sorted(set(ours) | set(theirs)):
        a, b = ours.get(name), theirs.get(name)
        kind = (a or b)[0]
        row = by_type.setdefault(kind, [0, 0])
        row[0] += 1
        if a and b and a[1] == b[1]:
            row[1] += 1
        else:
            bad.append(name)
    return by_type, bad


def main(argv=None):
    a, path = models.gguf_check_arguments(argparse.ArgumentParser(description=__doc__.split("\n\n")[0]), argv,
                                          "gguf_checksums.py")
    t0 = time.time()
    by_type, bad = compare(path, a.gsrq)
    for kind, (n, same) in sorted(by_type.items()):
        print(f"{kind:6s} {n:4d} tensors, {same:4d} identical")
    for name in bad:
        print(f"DIFFERS: {name}")
    total = sum(n for n, _ in by_type.values())
    print(f"{path}: {total - len(bad)} of {total} tensors bit for bit identical ({time.time() - t0:.0f} s)")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
