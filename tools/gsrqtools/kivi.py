"""KIVI as `gsrq ppl` runs it: keys quantized per channel over groups of tokens, values per token,
B-bit integers with FP16 scales and zeros, the last tokens of a window in FP16."""
import re

from gsrqtools.hf import InputError


def parse_kivi(name):
    """kivi-B[gG][rN] as `gsrq ppl --methods` reads it: (bits, group, residual)."""
    m = re.fullmatch(r"kivi-(\d{1,2})(?:g(\d{1,6}))?(?:r(\d{1,7}))?", name)
    if not m:
        raise InputError(f"--methods: '{name}' is not a KIVI setting (kivi-B, kivi-BgG or kivi-BgGrN, e.g. kivi-2g32r128)")
    bits, group, residual = int(m.group(1)), int(m.group(2) or 32), int(m.group(3) or 0)
    if not 1 <= bits <= 8:
        raise InputError(f"--methods: '{name}': KIVI's bits must be between 1 and 8")
    if group < 1:
        raise InputError(f"--methods: '{name}': the group must be at least 1")
    return bits, group, residual


def kivi_groups(x, bits, torch):
    """Asymmetric round-to-nearest over the last axis of x [..., n]: min and scale in FP16, as gsrq's
    KIVI (core/cluster/kivi.cpp) stores them."""
    lo, hi = x.min(-1, keepdim=True).values, x.max(-1, keepdim=True).values
    levels = float((1 << bits) - 1)
    zero = lo.half().float()
    scale = ((hi - lo) / levels).half().float()
    safe = torch.where(scale > 0, scale, torch.ones_like(scale))
    q = torch.clamp(torch.round((x - zero) / safe), 0, levels)
    return torch.where(scale > 0, q * scale + zero, zero.expand_as(x))


def kivi_quantize(x, axis, bits, group, residual, torch, counts):
    """KIVI on the rows [T, F] of one sequence, as core/cluster/kivi.cpp: keys per channel over groups of
    G tokens (tokens before the FP16 window that do not fill a group stay FP16), values per token over
    groups of G channels; the last `residual` tokens in FP16. Adds to counts (honest bits)."""
    T, F = x.shape
    quantized = max(0, T - residual)
    y = x.clone()
    if axis == "key":
        quantized -= quantized % group
        if quantized:
            blocks = x[:quantized].reshape(quantized // group, group, F).transpose(1, 2)  # [g, F, G]
            y[:quantized] = kivi_groups(blocks, bits, torch).transpose(1, 2).reshape(quantized, F)
        counts["groups"] += quantized // group * F
    else:
        if F % group:
            raise InputError(f"--methods kivi: the group {group} does not divide the values' {F} channels")
        if quantized:
            y[:quantized] = kivi_groups(x[:quantized].reshape(quantized, F // group, group), bits,
                                        torch).reshape(quantized, F)
        counts["groups"] += quantized * (F // group)
    y[quantized:] = x[quantized:].half().float()
    counts["quantized"] += quantized * F
    counts["fp16"] += (T - quantized) * F
    return y
