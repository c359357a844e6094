"""GSRQ codebooks deployed in transformers: a KV cache that holds keys and values as GSRQ codes.

    import gsrq, gsrq.hf
    books = gsrq.CodebookFile.load("codebooks.safetensors")    # from gsrq train (or gsrq.train)
    cache = gsrq.hf.GsrqCache(model, books, window=32)
    out = model.generate(ids, cache=cache, max_new_tokens=64, do_sample=False)
    print(cache.memory())

Every layer the codebooks cover keeps its keys and values as codes (one byte per stage and subspace
for K ≤ 256): the newest `window` tokens stay in full precision, as KIVI and transformers'
QuantizedCache keep them, and each token is encoded once, as it leaves the window. Attention reads
the codes' reconstruction. Layers (or keys, or values) the codebooks do not cover stay in full
precision. Keys arrive from the model after RoPE; codebooks trained on keys before RoPE (gsrq train's
default, key_rope = pre) see them rotated back at their positions, encoded, and rotated again, and
codebooks of keys whose RoPE pairs are interleaved (llama2.c's; rope_pairing = interleaved) see each
head's features in that order. So the same codebooks give the same reconstructions here as in
tools/hf_ppl.py's hooks on the key and value projections.

Positions are the tokens' order in the cache (batch rows without left padding). Tested with
transformers 5 (tools/hf_env.sh); needs torch and transformers.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np
import torch
from transformers.cache_utils import Cache, DynamicLayer

from . import CodebookFile, Codebooks, InvalidInput


def _rotate_half(x: torch.Tensor) -> torch.Tensor:
    h = x.shape[-1] // 2
    return torch.cat((-x[..., h:], x[..., :h]), dim=-1)


class _Rope:
    """The model's rotary embedding (rotate-half, as transformers applies it): cos and sin at the given
    positions, and its inverse."""

    def __init__(self, inv_freq: torch.Tensor, scaling: float):
        self.inv_freq = inv_freq.detach().float().cpu()
        self.scaling = float(scaling)

    def _cos_sin(self, positions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        freqs = positions.double()[:, None] * self.inv_freq.double()[None, :]
        emb = torch.cat((freqs, freqs), dim=-1)
        return (emb.cos() * self.scaling).float(), (emb.sin() * self.scaling).float()

    def apply(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x [..., T, head_dim] at positions [T]."""
        cos, sin = self._cos_sin(positions)
        return x * cos + _rotate_half(x) * sin

    def undo(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        cos, sin = self._cos_sin(positions)
        return (x * cos - _rotate_half(x) * sin) / (self.scaling * self.scaling)


class _Quantizer:
    """One tensor's codebooks: rows [N, kv_heads·head_dim] in the model's layout to codes and back."""

    def __init__(self, books: Codebooks, kv_heads: int, head_dim: int, rope: Optional[_Rope], interleaved: bool):
        self.books = books
        self.kv_heads, self.head_dim = kv_heads, head_dim
        self.rope, self.interleaved = rope, interleaved
        M, R, K, D = books.codewords.shape
        self.M, self.R, self.K, self.D = M, R, K, D
        # Feature j of a rotate-half head is the codebooks' feature from_pairs[j] (interleaved pairs).
        self.from_pairs = torch.arange(head_dim).reshape(head_dim // 2, 2).T.reshape(-1)
        self.to_pairs = torch.argsort(self.from_pairs)
        order = books.order
        self.order = None if order is None else torch.from_numpy(np.asarray(order, dtype=np.int64))
        self.code_dtype = torch.uint8 if K <= 256 else torch.int16 if K <= 32768 else torch.int32
        # Codewords flattened per subspace for one gather: [M, R·K, D].
        self._flat: dict[torch.device, torch.Tensor] = {}
        self._offsets = (torch.arange(R) * K).view(1, 1, R)

    def _books_on(self, device: torch.device) -> torch.Tensor:
        if device not in self._flat:
            cw = torch.from_numpy(np.array(self.books.codewords, dtype=np.float32))
            self._flat[device] = cw.reshape(self.M, self.R * self.K, self.D).to(device)
        return self._flat[device]

    def _to_book_layout(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x [B, H, T, hd] (the model's) -> rows [B·T, H·hd] as the codebooks were trained on."""
        B, H, T, hd = x.shape
        x = x.float()
        if self.rope is not None:
            x = self.rope.undo(x, positions.to(x.device))
        if self.interleaved:
            x = x[..., self.to_pairs.to(x.device)]
        return x.permute(0, 2, 1, 3).reshape(B * T, H * hd)

    def _from_book_layout(self, rows: torch.Tensor, B: int, T: int, positions: torch.Tensor) -> torch.Tensor:
        x = rows.reshape(B, T, self.kv_heads, self.head_dim).permute(0, 2, 1, 3)
        if self.interleaved:
            x = x[..., self.from_pairs.to(x.device)]
        if self.rope is not None:
            x = self.rope.apply(x, positions.to(x.device))
        return x

    def encode(self, x: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """x [B, H, T, hd] -> codes [B, T, M, R] (the engine's greedy encoding, as tools/hf_ppl.py's)."""
        B, H, T, _ = x.shape
        rows = self._to_book_layout(x, positions).detach().cpu().contiguous().numpy()
        codes = self.books.encode(rows)  # [B·T, M, R] int32
        return torch.from_numpy(codes).to(self.code_dtype).reshape(B, T, self.M, self.R).to(x.device)

    def decode(self, codes: torch.Tensor, positions: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
        """codes [B, T, M, R] -> x̂ [B, H, T, hd] in `dtype`."""
        B, T = codes.shape[:2]
        flat = self._books_on(codes.device)
        idx = codes.reshape(B * T, self.M, self.R).long() + self._offsets.to(codes.device)
        # x̂ of subspace m = Σ_r C[m, r, code] (added stage by stage, as the engine decodes).
        rows = torch.zeros(B * T, self.M, self.D, device=codes.device)
        m_idx = torch.arange(self.M, device=codes.device).view(1, self.M)
        for r in range(self.R):
            rows += flat[m_idx, idx[:, :, r]]
        rows = rows.reshape(B * T, self.M * self.D)
        if self.order is not None:  # strided channel groups: back to the data's feature order
            out = torch.empty_like(rows)
            out[:, self.order.to(rows.device)] = rows
            rows = out
        return self._from_book_layout(rows, B, T, positions).to(dtype)


class GsrqLayer(DynamicLayer):
    """One decoder layer's cache: codes for the tokens that left the full-precision window, the
    window itself, and full-precision tensors for what the codebooks do not cover."""

    is_croppable = False

    def __init__(self, keys: Optional[_Quantizer], values: Optional[_Quantizer], window: int):
        super().__init__()
        self.kq, self.vq, self.window = keys, values, window
        self.key_codes: Optional[torch.Tensor] = None  # [B, Tq, M, R]
        self.value_codes: Optional[torch.Tensor] = None
        self.coded = 0  # tokens held as codes (positions 0..coded−1)
        self.cumulative_length = 0
        # Tokens past the window of a tensor without codebooks, in full precision.
        self._fp_keys: Optional[torch.Tensor] = None
        self._fp_values: Optional[torch.Tensor] = None

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        self.dtype, self.device = key_states.dtype, key_states.device
        B, H, _, hd = key_states.shape
        self.keys = key_states.new_zeros((B, H, 0, hd))
        self.values = value_states.new_zeros((B, value_states.shape[1], 0, value_states.shape[-1]))
        self.is_initialized = True

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args: Any, **kwargs: Any):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        self.cumulative_length += key_states.shape[-2]
        self.keys = torch.cat([self.keys, key_states], dim=-2)
        self.values = torch.cat([self.values, value_states], dim=-2)
        # Tokens that leave the window are encoded once, in order.
        leaving = self.keys.shape[-2] - self.window
        if leaving > 0 and (self.kq is not None or self.vq is not None):
            pos = torch.arange(self.coded, self.coded + leaving)
            old_k, old_v = self.keys[:, :, :leaving], self.values[:, :, :leaving]
            if self.kq is not None:
                c = self.kq.encode(old_k, pos)
                self.key_codes = c if self.key_codes is None else torch.cat([self.key_codes, c], dim=1)
            if self.vq is not None:
                c = self.vq.encode(old_v, pos)
                self.value_codes = c if self.value_codes is None else torch.cat([self.value_codes, c], dim=1)
            self.keys, self.values = self.keys[:, :, leaving:], self.values[:, :, leaving:]
            if self.kq is None:
                self._fp_keys = old_k if self._fp_keys is None else torch.cat([self._fp_keys, old_k], dim=-2)
            if self.vq is None:
                self._fp_values = old_v if self._fp_values is None else torch.cat([self._fp_values, old_v], dim=-2)
            self.coded += leaving
        return self._old("k", self.keys.dtype), self._old("v", self.values.dtype)

    def _old(self, which: str, dtype: torch.dtype) -> torch.Tensor:
        recent = self.keys if which == "k" else self.values
        if self.coded == 0:
            return recent
        q, codes = (self.kq, self.key_codes) if which == "k" else (self.vq, self.value_codes)
        if q is None:
            old = self._fp_keys if which == "k" else self._fp_values
        else:
            old = q.decode(codes, torch.arange(self.coded), dtype)
        return torch.cat([old, recent], dim=-2)

    def get_seq_length(self) -> int:
        return self.cumulative_length

    def get_mask_sizes(self, query_length: int, *args: Any, **kwargs: Any) -> tuple[int, int]:
        return self.cumulative_length + query_length, 0

    def get_max_length(self) -> int:
        return -1

    def reset(self) -> None:
        super().reset()
        self.key_codes = self.value_codes = self._fp_keys = self._fp_values = None
        self.coded = self.cumulative_length = 0

    def reorder_cache(self, beam_idx: torch.LongTensor) -> None:
        if self.key_codes is not None:
            self.key_codes = self.key_codes.index_select(0, beam_idx.to(self.key_codes.device))
        if self.value_codes is not None:
            self.value_codes = self.value_codes.index_select(0, beam_idx.to(self.value_codes.device))
        if self._fp_keys is not None:
            self._fp_keys = self._fp_keys.index_select(0, beam_idx.to(self._fp_keys.device))
        if self._fp_values is not None:
            self._fp_values = self._fp_values.index_select(0, beam_idx.to(self._fp_values.device))
        if self.keys is not None and self.keys.numel():
            self.keys = self.keys.index_select(0, beam_idx.to(self.keys.device))
            self.values = self.values.index_select(0, beam_idx.to(self.values.device))

    def bytes(self) -> dict[str, int]:
        codes = sum(int(c.numel() * c.element_size()) for c in (self.key_codes, self.value_codes) if c is not None)
        full = 0
        for t in (self.keys, self.values, self._fp_keys, self._fp_values):
            if t is not None:
                full += int(t.numel() * t.element_size())
        return {"codes": codes, "full_precision": full}


def _model_parts(model: Any) -> tuple[int, int, int, Optional[_Rope]]:
    config = model.config.get_text_config(decoder=True) if hasattr(model.config, "get_text_config") else model.config
    layers = int(config.num_hidden_layers)
    heads = int(config.num_attention_heads)
    kv_heads = int(getattr(config, "num_key_value_heads", None) or heads)
    head_dim = int(getattr(config, "head_dim", None) or config.hidden_size // heads)
    types = set(getattr(config, "layer_types", None) or ["full_attention"])
    if types - {"full_attention"}:
        raise InvalidInput(f"model: layer types {sorted(types)}; GsrqCache holds full-attention layers only")
    rope = None
    for name, module in model.named_modules():
        if hasattr(module, "inv_freq") and name.endswith("rotary_emb"):
            rope = _Rope(module.inv_freq, getattr(module, "attention_scaling", 1.0))
            break
    return layers, kv_heads, head_dim, rope


class GsrqCache(Cache):
    """A transformers cache (transformers.cache_utils.Cache) whose layers hold GSRQ codes; pass it to
    generate(cache=...) or a forward pass (cache=..., use_cache=True).

    model: the causal LM (its config gives layers, KV heads, head_dim; its rotary embedding, RoPE).
    codebooks: a CodebookFile (gsrq train's output) or its path, with tensors layers.L.key and
    layers.L.value over kv_heads·head_dim features. window: the newest tokens kept in full
    precision (0: every token is encoded as it arrives)."""

    def __init__(self, model: Any, codebooks: Any, window: int = 32):
        if window < 0:
            raise InvalidInput(f"window {window}: must be ≥ 0")
        file = codebooks if isinstance(codebooks, CodebookFile) else CodebookFile.load(str(codebooks))
        meta = file.metadata
        n_layers, kv_heads, head_dim, rope = _model_parts(model)
        post = meta.get("key_rope", "pre") == "post"
        interleaved = meta.get("rope_pairing", "half") == "interleaved"
        if rope is None and not post and any(t.endswith(".key") for t in file.tensors):
            raise InvalidInput("model: no rotary embedding found (model.*.rotary_emb) to take keys back before "
                               "RoPE, as codebooks trained with key_rope = pre need")
        features = kv_heads * head_dim
        self.window = window
        self.codebook_bytes = 0
        layers = []
        for lid in range(n_layers):
            qs = []
            for kind in ("key", "value"):
                name = f"layers.{lid}.{kind}"
                if name not in file.tensors:
                    qs.append(None)
                    continue
                books = file.get(name)
                if books.features != features:
                    raise InvalidInput(f"codebooks for {name} cover {books.features} features; the model's keys and "
                                       f"values have {features} (kv_heads × head_dim): codebooks of another model?")
                self.codebook_bytes += books.codewords.size * 4
                is_key = kind == "key"
                qs.append(_Quantizer(books, kv_heads, head_dim, rope if is_key and not post else None,
                                     interleaved and is_key))
            layers.append(GsrqLayer(qs[0], qs[1], window))
        super().__init__(layers=layers)

    def memory(self) -> dict[str, Any]:
        """What the cache holds now, in bytes: codes, full-precision tensors (the window and what the
        codebooks do not cover), codebooks (shared by every sequence, counted once), their total,
        and what a DynamicCache holds for the same tokens in the model's dtype."""
        codes = full = dense = 0
        tokens = 0
        for layer in self.layers:
            if not getattr(layer, "is_initialized", False):
                continue
            b = layer.bytes()
            codes += b["codes"]
            full += b["full_precision"]
            B, H, _, hd = layer.keys.shape
            el = layer.keys.element_size()
            dense += 2 * B * H * layer.cumulative_length * hd * el
            tokens = max(tokens, layer.cumulative_length)
        total = codes + full + self.codebook_bytes
        return {"tokens": tokens, "codes": codes, "full_precision": full, "codebooks": self.codebook_bytes,
                "total": total, "dynamic_cache": dense, "ratio": (total / dense) if dense else float("nan")}


def dynamic_cache_bytes(cache: Any) -> int:
    """The bytes a transformers DynamicCache (or any cache of DynamicLayers) holds in keys and values."""
    n = 0
    for layer in cache.layers:
        for t in (getattr(layer, "keys", None), getattr(layer, "values", None)):
            if t is not None:
                n += int(t.numel() * t.element_size())
    return n
