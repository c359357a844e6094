"""Rotary position embedding as transformers applies it (rotate-half pairs), and the inverse
frequencies a layer uses (per-layer for models whose local and global layers differ)."""


def rotate_half(x):
    h = x.shape[-1] // 2
    return __import__("torch").cat((-x[..., h:], x[..., :h]), dim=-1)


def rope_post(x, positions, inv_freq, scaling=1.0):
    """x: [T, heads, head_dim] before RoPE -> after, with Hugging Face's rotate-half pairing over the
    first 2·len(inv_freq) features (all of them unless the model rotates part of each head)."""
    import torch
    ang = positions[:, None].to(torch.float32) * inv_freq[None, :].to(torch.float32)  # [T, rot/2]
    emb = torch.cat((ang, ang), dim=-1)
    cos = (emb.cos() * scaling)[:, None, :]
    sin = (emb.sin() * scaling)[:, None, :]
    xf = x.to(torch.float32)
    rot = emb.shape[-1]
    out = xf[..., :rot] * cos + rotate_half(xf[..., :rot]) * sin
    return out if rot == xf.shape[-1] else torch.cat((out, xf[..., rot:]), dim=-1)


def rope_of(info, lid):
    inv, _ = info["rope_per_type"][info["layer_types"][lid]]
    return inv
