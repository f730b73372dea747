"""Forms around the residual add that AllReduceFusionPass fuses only on request or refuses with the
real cause (arfusion.torch._match.match_site calls these after the exact forms failed):

  fp32 residual add  f32(sum) + f32(residual) (or with the bf16 residual promoted by the add
                     itself, as engines' native RMSNorm writes `x.to(float32) + residual`), the
                     sum rounded once as the new residual and the norm reading the unrounded fp32
                     sum: fused with fp32_residual_add=True (the norm then reads the rounded sum)
  refused            a bias added to the sum before the residual add (row-parallel layers with
                     bias), another tensor added to it (a second all-reduce's sum, a shared
                     expert's output), a residual multiplier, an fp32 residual stream
"""

from __future__ import annotations

import torch

from ._graph import (ADD_TENSOR, MUL, VIEW, NoMatch, convert_dtype, depends_on, describe,
                     dtype, is_call, numel, other_operand, scalar, shape)


def _fp32_sides(v):
    """(fp32 add, the operand that is not the all-reduce side) for every fp32 add reading the
    all-reduce value v, explicitly converted or promoted by the add itself."""
    out = []
    for ar_side in [v] + [c for c in v.users if convert_dtype(c) == torch.float32]:
        for s32 in ar_side.users:
            if (is_call(s32, *ADD_TENSOR) and s32.kwargs.get("alpha", 1) == 1
                    and dtype(s32) == torch.float32):
                other = other_operand(s32, ar_side)
                if other is not None and other is not ar_side:
                    out.append((s32, other, ar_side is v))
    return out


def match_fp32_residual(v, ar_val, hidden, act, shape_, order, match_decomposed_from):
    """vLLM's / SGLang's native RMSNorm: s32 = f32(ar) + f32(residual) (either conversion implicit
    in the add); residual := round(s32); the norm reads s32. Returns (norm, residual node, the
    rounded-residual node the fused op's residual_out replaces), or None. match_decomposed_from:
    _match's matcher of the fp32 norm chain (passed in: _match imports this module)."""
    for s32, other, ar_implicit in _fp32_sides(v):
        explicit = convert_dtype(other) == torch.float32
        res = other.args[0] if explicit else other
        if ar_implicit and not explicit:
            continue  # bf16 + bf16 is not an fp32 add
        if (not hasattr(res, "op") or dtype(res) != act or shape(res) != shape_
                or order[res] > order[ar_val]):
            continue
        rounded = [u for u in s32.users if convert_dtype(u) == act]
        if len(rounded) != 1:
            continue
        try:
            norm = match_decomposed_from(s32, [s32], hidden, act)
        except NoMatch:
            continue
        if norm.out is None:
            continue
        return norm, res, rounded[0]
    return None


def diagnose(v, ar_val, hidden, act, shape_, order):
    """Why the all-reduce value v (after its views) is not followed by a fusable add, when the cause
    is one the fused op cannot express; None when nothing specific is found."""
    for u in v.users:
        if is_call(u, *MUL) and scalar(other_operand(u, v)) is not None:
            return (f"the all-reduce result is scaled by {other_operand(u, v)} ({describe(u)}) "
                    "before the residual add (a residual multiplier): the fused op adds the sum "
                    "unscaled")
        if not is_call(u, *ADD_TENSOR):
            continue
        other = other_operand(u, v)
        if other is None or other is v:
            continue
        if scalar(other) is not None:
            return (f"a constant ({other}) is added to the all-reduce result ({describe(u)}): the "
                    "fused op has no such addend")
        s = shape(other)
        if s is not None and numel(s) < numel(shape_) and s[-1:] == (hidden,):
            head = (f"a bias {describe(other)} of shape {list(s)} is added to the all-reduce "
                    f"result ({describe(u)}), as a row-parallel layer adds its bias once after the "
                    "sum")
            if not _feeds_add(u):
                return (head + ", and a norm reads it without a residual add: round(sum + bias) "
                        "is what the fused op makes of a [T, H] residual input holding the bias, "
                        "which the pass does not build")
            return (head + ", before the residual add: the unfused graph rounds sum + bias to the "
                    "activation dtype and then adds the residual (two roundings); the fused op "
                    "adds the residual to the rounded sum, and moving the bias into the residual "
                    "(round(sum + round(residual + bias))) or into one rank's input changes the "
                    "bits")
        if dtype(other) == torch.float32 and s == shape_:
            return (f"the residual {describe(other)} is fp32 (an fp32 residual stream): arfusion's "
                    "residual is in the activation dtype")
        if (s == shape_ and dtype(other) == act and order.get(other, -1) > order[ar_val]
                and not depends_on(other, v)):
            return (f"the all-reduce result is added to {describe(other)}, computed after the "
                    "all-reduce (another all-reduce's sum, or an output added to it such as a "
                    "shared expert's): the unfused graph rounds that sum before any residual add "
                    "or norm, and the fused op takes one addend, the residual")
    return None


def _feeds_add(n) -> bool:
    """n, through views, is an operand of a tensor add."""
    for u in n.users:
        if is_call(u, *ADD_TENSOR):
            return True
        if is_call(u, *VIEW) and _feeds_add(u):
            return True
    return False


def unnormalized(v) -> str:
    """The reason for an all-reduce whose result no RMSNorm reads, directly or after a residual add
    (e.g. a model without a norm before its first layer's attention, as OLMo 2)."""
    readers = ", ".join(describe(u) for u in list(v.users)[:4])
    more = f" and {len(v.users) - 4} more" if len(v.users) > 4 else ""
    return (f"no RMSNorm follows the all-reduce, directly or after a residual add: its result is "
            f"read by {readers}{more}")
