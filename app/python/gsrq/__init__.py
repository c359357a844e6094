"""GSRQ for Python: the GSRQ Studio engine beside NumPy and PyTorch (docs/python.md).

    import gsrq
    dump = gsrq.open_dump("kv.safetensors")        # tensors as read-only NumPy views of the mapped file
    keys = dump.rows("layers.0.key")                # [tokens, heads * head_dim]
    r = gsrq.train(keys, bpa=1, seed=0)             # GSKM-RQ, the GIL released while it runs
    codes = r.codebooks.encode(keys)                # [N, M, R] int32
    print(r.metrics, gsrq.metrics(keys, r.codebooks.decode(codes)))

The same engine as the `gsrq` command line and the app: the same codes and metrics for the same rows
and settings. Errors raise gsrq.InvalidInput (a ValueError naming the file, tensor or argument) or
gsrq.GsrqError (a RuntimeError). gsrq.hf deploys codebooks as a transformers KV cache.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator, Optional

import numpy as np

from . import _core
from ._core import (
    ClusterResult,
    CodebookFile,
    Codebooks,
    GsrqError,
    InvalidInput,
    RunStore,
    TrainResult,
    gradient_weights,
    gskm,
    kmeans,
    metrics,
)

__version__: str = _core.__version__

__all__ = [
    "ClusterResult", "CodebookFile", "Codebooks", "Dump", "GsrqError", "InvalidInput", "RunStore", "TrainResult",
    "gradient_weights", "gskm", "kmeans", "metrics", "open_dump", "train", "__version__",
]

# A dump's element types as NumPy's. NumPy has no bfloat16: BF16 tensors come as their uint16 bits
# (Dump.load converts them to float32, as the engine does; torch.frombuffer reads them as bfloat16).
_NUMPY = {
    "BOOL": np.bool_, "U8": np.uint8, "I8": np.int8, "U16": np.uint16, "I16": np.int16, "F16": np.float16,
    "BF16": np.uint16, "U32": np.uint32, "I32": np.int32, "F32": np.float32, "U64": np.uint64, "I64": np.int64,
    "F64": np.float64,
}


class Dump:
    """A KV dump (safetensors file, directory of shards, or .npy), memory-mapped: nothing is read until
    an array's elements are. ``dump[name]`` is a read-only NumPy view of the tensor in the mapped file
    (no copy; it keeps the mapping alive after the Dump is gone)."""

    def __init__(self, core: _core.Dump):
        self._d = core

    @property
    def path(self) -> str:
        return self._d.path

    @property
    def format(self) -> str:
        """"safetensors", "safetensors-dir" or "npy"."""
        return self._d.format

    @property
    def files(self) -> list[str]:
        return self._d.files

    @property
    def metadata(self) -> dict[str, str]:
        return self._d.metadata

    @property
    def names(self) -> list[str]:
        return self._d.names

    def keys(self) -> list[str]:
        return self._d.names

    def __iter__(self) -> Iterator[str]:
        return iter(self._d.names)

    def __len__(self) -> int:
        return len(self._d.names)

    def __contains__(self, name: object) -> bool:
        return name in self._d.names

    def info(self, name: str) -> dict[str, Any]:
        """name, dtype (safetensors' spelling), shape, layer, kind (key, value, query, key_grad,
        value_grad, other), file, address and nbytes of a tensor."""
        return self._d.info(name)

    def __getitem__(self, name: str) -> np.ndarray:
        info = self._d.info(name)
        raw = self._d._bytes(name)  # uint8 view of the mapped bytes, holding the mapping
        return raw.view(_NUMPY[info["dtype"]]).reshape(info["shape"])

    def rows(self, name: str) -> np.ndarray:
        """The tensor as [rows, features] (tokens × heads·head_dim), the layout gsrq trains on: a view
        for F32 tensors; F16, BF16 and F64 are converted to float32 (a copy), as the engine converts them."""
        info = self._d.info(name)
        if info["dtype"] == "F32":
            a = self[name]
            return a.reshape(a.shape[0], -1) if a.ndim != 2 else a
        return self._d.load(name)

    def load(self, name: str, drop_non_finite: bool = False) -> np.ndarray:
        """[rows, features] float32 (a copy), checked as the CLI checks it: NaN or Inf raise
        InvalidInput naming the tensor, or their rows are dropped with drop_non_finite."""
        return self._d.load(name, drop_non_finite)

    def weights(self, name: str, mode: str = "grad-log", tau: float = 1.0) -> np.ndarray:
        """Per-row weights of a key or value from its gradient (layers.L.key_grad / value_grad), as
        gsrq train --weights MODE --tau TAU makes them."""
        return self._d.weights(name, mode, tau)

    def __repr__(self) -> str:
        return f"<gsrq.Dump {self.path!r}: {len(self)} tensors>"


def open_dump(path: str | os.PathLike[str]) -> Dump:
    """Opens a KV dump; raises InvalidInput naming the file for anything unreadable or malformed."""
    return Dump(_core.open_dump(os.fspath(path)))


def _as_rows(x: Any, what: str) -> Any:
    """Arrays of more than two dims (tokens × heads × head_dim) as rows, without a copy."""
    shape = getattr(x, "shape", None)
    if shape is None:
        x = np.asarray(x, dtype=np.float32)
        shape = x.shape
    if len(shape) > 2:
        return x.reshape(shape[0], -1)
    if len(shape) < 2:
        raise InvalidInput(f"{what}: needs rows of features (2 or more dims), got shape {tuple(shape)}")
    return x


def train(
    x: Any,
    *,
    bpa: Optional[float] = None,
    dim: int = 0,
    stages: int = 0,
    k: int = 0,
    method: str = "gskm",
    iterations: int = 25,
    seed: int = 0,
    beam: int = 1,
    weights: Any = None,
    grad: Any = None,
    weight_mode: str = "grad-log",
    tau: float = 1.0,
    holdout: float = 0.0,
    holdout_tail: bool = False,
    refine: int = 0,
    refine_beam: int = 0,
    reseed_empty: bool = False,
    tensor: str = "rows",
    progress: Optional[Callable[[dict[str, Any]], Any]] = None,
    threads: int = 0,
    source: Optional[Dump] = None,
    beam_train: str = "all",
    exact_bounds: bool = True,
) -> TrainResult:
    """Trains the GSRQ quantizer (product × residual quantization, KM or GSKM per stage) on rows x
    [N, F] (a NumPy array or a CPU torch tensor; float32 C-order is read in place), as gsrq train does.

    bpa: the paper's settings (2, 1, 0.75 at D=128; 0.375 at D=256), or dim, stages and k.
    weights: one weight ≥ 0 per row; or grad [N, F] (the rows' loss gradients), turned into weights by
    weight_mode (grad-log, grad-raw, grad-sq) and tau, as gsrq train --weights. holdout: the share of
    rows held out (a seeded subset, or the last rows with holdout_tail) and measured after training.
    refine: rounds of joint refinement. beam_train: with beam > 1, each stage trains on every beam's
    residual ("all", as FAISS) or the best beam's only ("best"). exact_bounds: skip the distance work
    that cannot change a label (the same labels and codewords; False scores every codeword).
    progress(info) is called once per iteration with a dict (what, fraction, iteration, nmse, ...);
    returning False cancels (the result says cancelled).
    Ctrl-C raises KeyboardInterrupt at the next iteration. The GIL is released while it runs.
    source: the Dump the rows came from (recorded with the run by RunStore.record_train)."""
    x = _as_rows(x, "x")
    mode = "none"
    if grad is not None:
        if weights is not None:
            raise InvalidInput("weights and grad: give one (grad is turned into weights by weight_mode)")
        weights = gradient_weights(_as_rows(grad, "grad"), weight_mode, tau)
        mode = weight_mode
    return _core.train(
        x, bpa=bpa, dim=dim, stages=stages, k=k, method=method, iterations=iterations, seed=seed, beam=beam,
        weights=weights, holdout=holdout, holdout_tail=holdout_tail, refine=refine, refine_beam=refine_beam,
        reseed_empty=reseed_empty, tensor=tensor, progress=progress, threads=threads, weight_mode=mode, tau=tau,
        source_path=source.path if source else "", source_files=source.files if source else [],
        beam_train=beam_train, exact_bounds=exact_bounds)
