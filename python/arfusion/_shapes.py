"""Vocabulary and output layouts of the quantized ops, without torch (so the CPU tests check them
against the library's arfScaleBufferBytes). arfusion.torch.ops maps the dtype names to torch."""

from __future__ import annotations

from ._lib import Pattern

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
QUANT_BLOCK = {"fp8_per_group": 128, "nvfp4": 16, "mxfp4": 32}
ELEMENT_BYTES = {"float8_e4m3fn": 1, "uint8": 1, "float32": 4}


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


def _ceil_div(a, b):
    return (a + b - 1) // b


def _round_up(a, b):
    return _ceil_div(a, b) * b


def quant_output_spec(quant: str, scale_layout: str, scale_format: str, rows, hidden,
                      lead_shape=None) -> tuple:
    """(quant_out shape, dtype name, scale_out shape, dtype name) of fused_add_rms_norm_quant for
    `rows` x `hidden` (lead_shape: the input's shape without its last dimension; default
    (rows,)). Shapes cover every byte arfScaleBufferBytes counts (padding included). Works on
    torch SymInts too. ValueError for combinations the library refuses."""
    quant_pattern(quant)
    if quant is None or quant == "none":
        raise ValueError("arfusion: fused_add_rms_norm_quant needs a quant format")
    if lead_shape is None:
        lead_shape = (rows,)
    layout = scale_layout_value(scale_layout)
    fmt = scale_format_value(scale_format)
    block = QUANT_BLOCK.get(quant)
    if block is not None and hidden % block != 0:
        raise ValueError(f"arfusion: {quant} needs hidden % {block} == 0 (hidden {hidden})")
    if fmt != 0 and quant != "fp8_per_group":
        raise ValueError(f"arfusion: scale_format {scale_format!r} is for fp8_per_group only")
    if layout == 1 and quant != "fp8_per_group":
        raise ValueError("arfusion: scale_layout 'mn_major' is for fp8_per_group only")
    if layout == 2 and quant not in ("nvfp4", "mxfp4"):
        raise ValueError("arfusion: scale_layout 'swizzled_128x4' is for nvfp4 / mxfp4 only")
    if quant.startswith("fp8"):
        q_shape, q_dtype = tuple(lead_shape) + (hidden,), "float8_e4m3fn"
    else:
        q_shape, q_dtype = tuple(lead_shape) + (hidden // 2,), "uint8"
    if quant == "fp8_per_tensor":
        s_shape, s_dtype = (0,), "float32"
    elif quant == "fp8_per_token":
        s_shape, s_dtype = (rows, 1), "float32"
    elif quant == "fp8_per_group":
        cols = hidden // 128
        packed = fmt == 2
        if layout == 0:
            s_shape, s_dtype = (rows, cols), ("uint8" if packed else "float32")
        else:
            tp = _round_up(rows, 4)
            if packed:
                s_shape, s_dtype = (_ceil_div(cols, 4), 4 * tp), "uint8"
            else:
                s_shape, s_dtype = (cols, tp), "float32"
    else:
        cols = hidden // block
        s_dtype = "float8_e4m3fn" if quant == "nvfp4" else "uint8"
        s_shape = (rows, cols) if layout == 0 else (_round_up(rows, 128), _round_up(cols, 4))
    return q_shape, q_dtype, s_shape, s_dtype


def spec_bytes(shape, dtype_name: str) -> int:
    n = 1
    for d in shape:
        n *= d
    return n * ELEMENT_BYTES[dtype_name]
