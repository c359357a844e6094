"""Reading GSRQ codebooks files (safetensors, docs/formats.md) and reconstructing rows from them
greedily, stage by stage per subspace, through the reference decoder docs/gsrq_decode.py."""
from gsrqtools import paths
from gsrqtools.hf import InputError


def load_codebooks(path):
    """{tensor: [M, R, K, D] float32 array} and the metadata of a codebooks file."""
    try:
        meta, tensor = paths.gsrq_decode().load(path)
    except (OSError, AssertionError, ValueError, KeyError) as e:
        raise InputError(f"--codebooks {path}: not a GSRQ codebooks file ({e})")
    names = [n.strip() for n in meta.get("tensors", "").split(",") if n.strip()]
    books, orders = {}, {}
    for n in names:
        try:
            books[n] = tensor(n + ".codebooks").astype("float32")
        except KeyError:
            raise InputError(f"--codebooks {path}: lists {n} but holds no {n}.codebooks")
        if n + ".order" in tensor.names:  # strided channel groups (gsrq train --method vqllm)
            order = tensor(n + ".order").astype("int64").reshape(-1)
            M, _, _, D = books[n].shape
            if sorted(order.tolist()) != list(range(M * D)):
                raise InputError(f"--codebooks {path}: {n}.order is not a permutation of its {M * D} features")
            orders[n] = order
    meta = dict(meta)
    meta["_orders"] = orders
    return meta, books


def reconstruct(x, books, torch):
    """Greedy residual encoding of rows x [N, M·D] with books [M, R, K, D]; returns the reconstruction."""
    M, R, K, D = books.shape
    out = torch.empty_like(x)
    for m in range(M):
        res = x[:, m * D:(m + 1) * D].clone()
        for r in range(R):
            c = books[m, r]  # K × D
            idx = ((res * res).sum(1, keepdim=True) - 2 * res @ c.T + (c * c).sum(1)[None]).argmin(1)
            res -= c[idx]
        out[:, m * D:(m + 1) * D] = x[:, m * D:(m + 1) * D] - res
    return out
