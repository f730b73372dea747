"""Numeric definitions of the gates, in plain Python (no torch): bf16 bit patterns, the distance
in units of the last place, cosine, greedy agreement, percentiles.

The GPU side computes the same quantities vectorised with torch (gates.py); at the start of every
run it checks its torch ulp function against `ulp_distance` here on a fixed set of bit patterns
(a demanded gate), so the figures the run reports mean what this file says.

ulp distance of two bf16 values: map each 16-bit pattern to an ordered integer (sign-magnitude
to two's-complement order: +x -> x, -x -> -(x & 0x7fff)), then take |a - b|. Adjacent finite
values are 1 apart, +0 and -0 are 0 apart (the same value), and the distance across zero counts
the values in between (e.g. the smallest positive and the smallest negative subnormal: 2). NaN has
no distance: `ulp_distance` returns None for a pair with a NaN.
"""

from __future__ import annotations

import math
import struct

BF16_SIGN = 0x8000
BF16_EXP_MASK = 0x7F80
BF16_MANT_MASK = 0x007F


def float_to_bf16_bits(x: float) -> int:
    """The bf16 pattern of the fp32 value nearest x, rounded to nearest even (as torch's
    .to(torch.bfloat16) does); NaN -> 0x7fc0."""
    (u,) = struct.unpack("<I", struct.pack("<f", x))
    if (u & 0x7F800000) == 0x7F800000 and (u & 0x007FFFFF):
        return 0x7FC0
    lsb = (u >> 16) & 1
    u = (u + 0x7FFF + lsb) & 0xFFFFFFFF
    return u >> 16


def bf16_bits_to_float(bits: int) -> float:
    (f,) = struct.unpack("<f", struct.pack("<I", (bits & 0xFFFF) << 16))
    return f


def is_nan_bits(bits: int) -> bool:
    return (bits & BF16_EXP_MASK) == BF16_EXP_MASK and (bits & BF16_MANT_MASK) != 0


def ordered(bits: int) -> int:
    bits &= 0xFFFF
    return -(bits & 0x7FFF) if bits & BF16_SIGN else bits


def ulp_distance(a_bits: int, b_bits: int) -> int | None:
    if is_nan_bits(a_bits) or is_nan_bits(b_bits):
        return None
    return abs(ordered(a_bits) - ordered(b_bits))


def ulp_summary(distances) -> dict:
    """max, counts of 0 / 1 / 2 / more ulp, NaN pairs, over an iterable of distances (None = NaN)."""
    n = nan = 0
    hist = {"0": 0, "1": 0, "2": 0, ">2": 0}
    mx = 0
    for d in distances:
        n += 1
        if d is None:
            nan += 1
            continue
        mx = max(mx, d)
        hist[str(d) if d <= 2 else ">2"] += 1
    return {"elements": n, "max_ulp": mx, "hist": hist, "nan_pairs": nan,
            "fraction_equal": (hist["0"] / n) if n else None}


# A fixed probe set: every sign / exponent class, neighbours, both zeros, subnormals, infinities.
PROBE_PATTERNS = [0x0000, 0x8000, 0x0001, 0x8001, 0x007F, 0x0080, 0x3F80, 0x3F81, 0xBF80, 0xBF81,
                  0x4000, 0x3FFF, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x4049, 0xC049, 0x1234, 0x9234]


def probe_pairs() -> list[tuple[int, int]]:
    return [(a, b) for a in PROBE_PATTERNS for b in PROBE_PATTERNS]


def cosine(a, b) -> float | None:
    """Cosine similarity in double precision; None where a norm is 0 or a value is not finite."""
    dot = na = nb = 0.0
    for x, y in zip(a, b, strict=True):
        x, y = float(x), float(y)
        dot += x * y
        na += x * x
        nb += y * y
    if na == 0.0 or nb == 0.0 or not (math.isfinite(dot) and math.isfinite(na) and math.isfinite(nb)):
        return None
    return dot / math.sqrt(na * nb)


def agreement(pred, ref) -> dict:
    """Greedy agreement of a variant's argmax tokens with the reference tokens (same positions)."""
    pred, ref = list(pred), list(ref)
    if len(pred) != len(ref):
        raise ValueError(f"{len(pred)} predictions vs {len(ref)} reference tokens")
    same = [p == r for p, r in zip(pred, ref)]
    first = next((i for i, s in enumerate(same) if not s), None)
    return {"predictions": len(same), "agree": sum(same),
            "fraction": (sum(same) / len(same)) if same else None, "first_disagreement": first}


def percentile(values, q: float) -> float:
    """The q-th percentile (0..100) with linear interpolation between closest ranks (numpy's
    default): p = v[k] + (v[k+1] - v[k]) * f where k + f = (n - 1) * q / 100."""
    v = sorted(float(x) for x in values)
    if not v:
        raise ValueError("percentile of no values")
    if not 0.0 <= q <= 100.0:
        raise ValueError(f"q={q} outside [0, 100]")
    pos = (len(v) - 1) * q / 100.0
    k = int(math.floor(pos))
    f = pos - k
    if k + 1 >= len(v):
        return v[-1]
    return v[k] + (v[k + 1] - v[k]) * f
