"""Decode a GSRQ codebooks file with NumPy alone: x_hat[n, m*D:(m+1)*D] = sum_r books[m, r, codes[n, m, r]]."""
import json, struct, sys
import numpy as np

DTYPES = {"F32": np.float32, "F16": np.float16, "U8": np.uint8, "U16": np.uint16, "I32": np.int32}

def load(path):
    raw = open(path, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__", {})
    assert meta.get("format") == "gsrq-codebooks" and meta.get("format_version") in ("1", "2"), "not a GSRQ codebooks file"
    def tensor(name):
        h = header[name]; a, b = h["data_offsets"]
        return np.frombuffer(raw[8 + n + a:8 + n + b], DTYPES[h["dtype"]]).reshape(h["shape"])
    tensor.names = set(header)                                       # T.codebooks, T.codes, T.order (version 2)
    return meta, tensor

def decode(path, name):
    meta, tensor = load(path)
    books = tensor(name + ".codebooks").astype(np.float32)            # [M, R, K, D]
    codes = tensor(name + ".codes").astype(np.int64)                  # [N, M, R]
    M, R = books.shape[:2]
    parts = [sum(books[m, r][codes[:, m, r]] for r in range(R)) for m in range(M)]
    x = np.concatenate(parts, axis=1)                                 # [N, M*D], the books' order
    if name + ".order" in tensor.names:                               # strided groups: back to the data's
        out = np.empty_like(x); out[:, tensor(name + ".order")] = x; return out
    return x

if __name__ == "__main__":   # python3 gsrq_decode.py codebooks.safetensors layers.2.value out.npy
    np.save(sys.argv[3], decode(sys.argv[1], sys.argv[2]))
