"""The numerics contract of arfusion.h written in plain torch (CPU, fp32 IEEE operations), for the
GPU tests: the sum in fp32 in rank order, the rounding steps of residual_out and norm_out, and the
quantizers of the quantized patterns applied to the kernel's own rounded norm."""

from __future__ import annotations

import torch

F8_MAX = 448.0
MIN_FP8_SCALE = torch.tensor(1.0 / (448.0 * 512.0), dtype=torch.float32)  # 2^-9 / 448 in fp32
# RN(1/448) in fp32 (bits 0x3B124925): the factor of the "times_reciprocal" scale rule
F8_MAX_RECIPROCAL = torch.tensor(1.0 / 448.0, dtype=torch.float32)


def all_reduce(xs, dtype):
    """round(fp32 sum over ranks in rank order), -0 canonicalised to +0."""
    acc = xs[0].float()
    for x in xs[1:]:
        acc = acc + x.float()
    return (acc + 0.0).to(dtype)


def residual_out(ar, residual, dtype):
    if residual is None:
        return ar.clone()
    return (ar.float() + residual.float()).to(dtype)


def rms_norm(y, gamma, eps, gamma_plus_one, rounding, dtype):
    """norm of the rounded residual y: fp32 sum of squares in column order / H, rsqrt, then
    round(y*s*g) ("once") or round(round(y*s)*g) ("before_weight")."""
    yf = y.float().reshape(-1, y.shape[-1])
    t, h = yf.shape
    ss = torch.zeros(t, dtype=torch.float32)
    for c in range(h):
        col = yf[:, c]
        ss = ss + col * col
    mean = ss / float(h)
    s = torch.rsqrt(mean + torch.tensor(eps, dtype=torch.float32))
    g = gamma.float()
    if gamma_plus_one:
        g = g + 1.0
    ys = yf * s[:, None]
    if rounding == "before_weight":
        out = ys.to(dtype).float() * g
    else:
        out = ys * g
    return out.to(dtype).reshape(y.shape)


def ulp_distance(a, b):
    """Elementwise distance in units of the last place of two bf16/fp16 tensors."""
    assert a.dtype == b.dtype and a.dtype in (torch.bfloat16, torch.float16)
    ia = a.view(torch.int16).to(torch.int32)
    ib = b.view(torch.int16).to(torch.int32)
    # sign-magnitude -> ordered integers
    oa = torch.where(ia < 0, -(ia & 0x7FFF), ia)
    ob = torch.where(ib < 0, -(ib & 0x7FFF), ib)
    return (oa - ob).abs()


def bits_equal(a, b):
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.numel() == 0:
        return True
    return torch.equal(a.contiguous().view(torch.uint8), b.contiguous().view(torch.uint8))


# ---- FP8 --------------------------------------------------------------------------------------


def e4m3(x):
    """Saturating RNE e4m3 (OCP e4m3fn): clamp to +-448 then convert (NaN stays NaN)."""
    return x.clamp(-F8_MAX, F8_MAX).to(torch.float8_e4m3fn)


def dynamic_scale(amax, scale_rule="divide"):
    """max(amax / 448, 2^-9 / 448) in fp32 (arfFp8ScaleRule_t): "divide" the IEEE quotient (a CPU
    fp32 tensor divided by a number is an IEEE division), "times_reciprocal" one fp32
    multiplication by RN(1/448), what torch computes for `amax / 448.0` on a GPU."""
    assert amax.device.type == "cpu" and amax.dtype == torch.float32
    if scale_rule == "divide":
        q = amax / torch.tensor(F8_MAX, dtype=torch.float32)
    elif scale_rule == "times_reciprocal":
        q = amax * F8_MAX_RECIPROCAL
    else:
        raise ValueError(f"scale_rule {scale_rule!r}")
    return torch.maximum(q, MIN_FP8_SCALE)


def ue8m0_round_up(s):
    """fp32 scale rounded up to a power of two: (the UE8M0 code, its fp32 value)."""
    bits = s.view(torch.int32)
    exp = (bits >> 23) & 0xFF
    mant = bits & 0x7FFFFF
    code = exp + (mant != 0).to(torch.int32)
    code = code.clamp(0, 0xFE)
    value = (code << 23).view(torch.float32)
    return code.to(torch.uint8), value


def torch_fp8_per_token(y):
    """The FP8 per-token tail as a torch model writes it (the form the compile pass matches),
    evaluated on y's device: on a GPU its scale is amax * fp32(1/448), scale_rule
    "times_reciprocal"; on the CPU the IEEE quotient, "divide". Returns (q, scales [T, 1])."""
    yf = y.float()
    sc = torch.clamp(yf.abs().amax(dim=-1, keepdim=True) / 448.0, min=1.0 / (448.0 * 512.0))
    return (yf / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), sc


def fp8_per_tensor(norm, scale):
    return e4m3(norm.float() / scale.float().reshape(()))


def fp8_per_token(norm, scale_rule="divide"):
    nf = norm.float().reshape(-1, norm.shape[-1])
    s = dynamic_scale(nf.abs().amax(dim=-1, keepdim=True), scale_rule)
    return e4m3(nf / s).reshape(norm.shape), s


def fp8_per_group(norm, scale_format, scale_rule="divide"):
    """(q [T,H], scales [T, H/128] fp32 values, UE8M0 codes or None)."""
    nf = norm.float().reshape(-1, norm.shape[-1])
    t, h = nf.shape
    g = nf.reshape(t, h // 128, 128)
    s = dynamic_scale(g.abs().amax(dim=-1), scale_rule)
    codes = None
    if scale_format != "fp32":
        codes, s = ue8m0_round_up(s)
    q = e4m3(g / s[:, :, None]).reshape(t, h)
    return q, s, codes


def mn_major_fp32(s):
    """[T, cols] -> the [cols, round_up(T, 4)] buffer, padding 0."""
    t, cols = s.shape
    tp = (t + 3) // 4 * 4
    out = torch.zeros(cols, tp, dtype=s.dtype)
    out[:, :t] = s.t()
    return out


def mn_major_packed(codes):
    """UE8M0 codes [T, cols] -> bytes [ceil(cols/4), 4 * Tp]: word (c/4) * Tp + t, byte c % 4."""
    t, cols = codes.shape
    tp = (t + 3) // 4 * 4
    words = (cols + 3) // 4
    out = torch.zeros(words, tp, 4, dtype=torch.uint8)
    for c in range(cols):
        out[c // 4, :t, c % 4] = codes[:, c]
    return out.reshape(words, 4 * tp)


# ---- FP4 --------------------------------------------------------------------------------------

_E2M1_MIDS = torch.tensor([0.25, 0.75, 1.25, 1.75, 2.5, 3.5, 5.0], dtype=torch.float32)


def e2m1_codes(v):
    """RNE e2m1 codes (4 bits, sign in bit 3) of fp32 values; |v| > 6 saturates."""
    a = v.abs()
    idx = torch.searchsorted(_E2M1_MIDS, a.contiguous(), right=True)
    prev = torch.clamp(idx - 1, min=0)
    tie = (idx > 0) & (a == _E2M1_MIDS[prev]) & (idx % 2 == 1)
    idx = torch.where(tie, idx - 1, idx)
    idx = torch.where(torch.isnan(a), torch.full_like(idx, 7), idx)
    sign = torch.signbit(v) & ~torch.isnan(v)
    return (idx | (sign.to(idx.dtype) << 3)).to(torch.uint8)


def pack_fp4(codes):
    """[T, H] codes -> [T, H/2] bytes, even element in the low nibble."""
    return (codes[:, 0::2] | (codes[:, 1::2] << 4)).to(torch.uint8)


def mxfp4(norm):
    """(packed q [T, H/2], UE8M0 codes [T, H/32])."""
    nf = norm.float().reshape(-1, norm.shape[-1])
    t, h = nf.shape
    blocks = nf.reshape(t, h // 32, 32)
    amax = blocks.abs().amax(dim=-1)
    exp = (amax.view(torch.int32) >> 23) & 0xFF
    code = torch.where(exp > 2, exp - 2, torch.zeros_like(exp))
    code = torch.where(torch.isinf(amax) | torch.isnan(amax), torch.full_like(code, 0xFF), code)
    # reciprocal of 2^(code - 127): 2^(127 - code), exact as a float when 1 <= 254 - code <= 254
    recip = ((254 - code).clamp(1, 254) << 23).view(torch.float32)
    q = e2m1_codes(blocks * recip[:, :, None]).reshape(t, h)
    return pack_fp4(q), code.to(torch.uint8)


def nvfp4(norm, global_scale):
    """(packed q [T, H/2], e4m3 scale codes [T, H/16] as uint8)."""
    nf = norm.float().reshape(-1, norm.shape[-1])
    t, h = nf.shape
    gs = torch.tensor(float(global_scale), dtype=torch.float32)
    blocks = nf.reshape(t, h // 16, 16)
    amax = blocks.abs().amax(dim=-1)
    sf = e4m3((amax / 6.0) * gs)
    sf_f = sf.float()
    mult = torch.where(sf_f == 0, torch.zeros_like(sf_f), gs / torch.where(sf_f == 0, torch.ones_like(sf_f), sf_f))
    q = e2m1_codes(blocks * mult[:, :, None]).reshape(t, h)
    return pack_fp4(q), sf.view(torch.uint8)


def swizzle_128x4(codes):
    """[T, cols] byte scales -> [round_up(T,128), round_up(cols,4)] in the 128x4 tiled layout."""
    t, cols = codes.shape
    tp = (t + 127) // 128 * 128
    cp = (cols + 3) // 4 * 4
    flat = torch.zeros(tp * cp, dtype=torch.uint8)
    col_tiles = cp // 4
    for r in range(t):
        for c in range(cols):
            tile = (r // 128) * col_tiles + c // 4
            off = tile * 512 + (r % 32) * 16 + ((r % 128) // 32) * 4 + c % 4
            flat[off] = codes[r, c]
    return flat.reshape(tp, cp)
