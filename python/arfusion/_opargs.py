"""The torch ops' string arguments as the library's enum values, and the quantized op's output
shapes as the library lays them out (arfQuantOutputLayout). No torch here: arfusion.torch maps
the element names to torch dtypes, and the CPU tests check this layer without torch."""

from __future__ import annotations

from . import _core
from ._lib import ArfError, Pattern

QUANT_PATTERNS = {
    None: Pattern.ResidualRmsNorm,
    "none": Pattern.ResidualRmsNorm,
    "fp8_per_tensor": Pattern.ResidualRmsNormFp8PerTensor,
    "fp8_per_token": Pattern.ResidualRmsNormFp8PerToken,
    "fp8_per_group": Pattern.ResidualRmsNormFp8PerGroup,
    "nvfp4": Pattern.ResidualRmsNormNvfp4,
    "mxfp4": Pattern.ResidualRmsNormMxfp4,
}
SCALE_LAYOUTS = {"row_major": 0, "mn_major": 1, "swizzled_128x4": 2}
SCALE_FORMATS = {"fp32": 0, "ue8m0_as_fp32": 1, "ue8m0_packed": 2}
NORM_ROUNDINGS = {"once": 0, "before_weight": 1}
# arfFp8ScaleRule_t: how fp8_per_token / fp8_per_group take amax / 448 ("divide": IEEE, the
# default; "times_reciprocal": amax * fp32(1/448), what torch computes for `amax / 448.0` on a GPU).
SCALE_RULES = {"divide": 0, "times_reciprocal": 1}
_algorithms: dict[str, int] = {}


def choice(table: dict, value, what: str) -> int:
    try:
        return int(table[value])
    except KeyError:
        known = ", ".join(repr(k) for k in table if k is not None)
        raise ValueError(f"arfusion: unknown {what} {value!r} (one of {known})") from None


def quant_pattern(quant) -> Pattern:
    return Pattern(choice(QUANT_PATTERNS, quant, "quant"))


def scale_layout_value(name: str) -> int:
    return choice(SCALE_LAYOUTS, name, "scale_layout")


def scale_format_value(name: str) -> int:
    return choice(SCALE_FORMATS, name, "scale_format")


def norm_rounding_value(name: str) -> int:
    return choice(NORM_ROUNDINGS, name, "norm_rounding")


def scale_rule_value(name: str) -> int:
    return choice(SCALE_RULES, name, "scale_rule")


def algorithm_value(name: str) -> int:
    """The arfAlgorithm_t of an algorithm name (the library's arfAlgorithmFromName)."""
    v = _algorithms.get(name)
    if v is None:
        try:
            v = int(_core.algorithm_from_name(name))
        except ArfError:
            raise ValueError(f"arfusion: unknown algorithm {name!r} (auto, oneshot_lamport, "
                             "oneshot_pull, twoshot, unfused, nccl)") from None
        _algorithms[name] = v
    return v


def quant_output_spec(quant: str, scale_layout: str, scale_format: str, rows, hidden: int,
                      lead_shape=None) -> tuple:
    """(quant_out shape, element name, scale_out shape, element name) of
    fused_add_rms_norm_quant for `rows` x `hidden` (lead_shape: the input's shape without its last
    dimension, default (rows,)), as arfQuantOutputLayout lays them out. `rows` may be a torch
    SymInt (fake tensors while tracing); `hidden` is an int. ValueError naming the library's
    reason for a combination it refuses."""
    if quant is None or quant == "none":
        raise ValueError("arfusion.fused_add_rms_norm_quant: needs a quant format")
    try:
        layout = _core.quant_output_layout(quant_pattern(quant), scale_layout_value(scale_layout),
                                           scale_format_value(scale_format), 0, int(hidden))
    except ArfError as e:
        raise ValueError(f"arfusion.fused_add_rms_norm_quant: {e.message}") from None
    # quant_out is [tokens, columns] row-major: the input's leading dimensions stand for tokens
    q_shape = tuple(lead_shape if lead_shape is not None else (rows,)) + \
        layout.quant_out.shape_for(rows)[1:]
    return (q_shape, layout.quant_out.element, layout.scale_out.shape_for(rows),
            layout.scale_out.element)
