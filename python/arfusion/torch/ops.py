"""The ``torch.ops.arfusion`` operators (registered when this module is imported).

Every op names its communicator by a string (the registry name of an
``arfusion.torch.Communicator``: compiled graphs are cached and reloaded by other processes, so
they never hold a pointer), runs on the current CUDA stream and is collective: every rank of the
communicator must call it with the same shape, in the same order. Inputs must be on the
communicator's device; tensors written in place must be contiguous (read-only inputs of the
out-of-place ops are made contiguous). Arguments are in the header's vocabulary:

  norm_rounding  "once" (arfNormRoundOnce, default: round(y * s * w), one rounding; Gemma, TRT-LLM)
                 | "before_weight" (arfNormRoundBeforeWeight: round(round(y * s) * w), vLLM/SGLang
                 rms_norm and Hugging Face LlamaRMSNorm's `weight * x.to(dtype)`)
  algorithm      "auto" | "oneshot_lamport" | "oneshot_pull" | "twoshot" | "unfused" | "nccl"
  quant          "fp8_per_tensor" (static: `scale` = fp32 dequant scale, 1 element)
                 | "fp8_per_token" | "fp8_per_group" (1x128) | "nvfp4" (`scale` = fp32 global
                 scale, 1 element) | "mxfp4"
  scale_layout   "row_major" | "mn_major" (fp8_per_group) | "swizzled_128x4" (nvfp4, mxfp4)
  scale_format   "fp32" | "ue8m0_as_fp32" | "ue8m0_packed" (fp8_per_group only)
  fallback       0 auto, 1 / 2 / 3 kernels (quantized patterns; arfFallbackLevel_t)
  scale_rule     "divide" (arfFp8ScaleDivide, default: scale = max(amax / 448, 2^-9 / 448) with an
                 IEEE division) | "times_reciprocal" (arfFp8ScaleTimesReciprocal: amax * fp32(1/448),
                 then the floor: the bits torch's own `amax / 448.0` gives on a GPU, eager and
                 Inductor alike; what the compile pass passes). fp8_per_token / fp8_per_group only
                 (another quant with "times_reciprocal" is refused); q = e4m3(y / scale) either way

Ops (T = input.numel() // H rows, H = input.shape[-1]):

  fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float eps, str comm,
                     bool gamma_plus_one=False, str norm_rounding="once", str algorithm="auto") -> ()
      in place, the engines' fused_add_rms_norm convention: residual := all_reduce(input) +
      residual; input := RMSNorm(residual) * weight.
  fused_add_rms_norm_out(Tensor input, Tensor? residual, Tensor weight, float eps, str comm, ...)
      -> (norm_out, residual_out); residual None (first layer): residual_out = all_reduce(input).
  fused_add_rms_norm_quant(Tensor input, Tensor? residual, Tensor weight, Tensor? scale,
                     float eps, str comm, str quant, str scale_layout="row_major",
                     str scale_format="fp32", bool with_norm=False, bool gamma_plus_one=False,
                     str norm_rounding="once", str algorithm="auto", int fallback=0,
                     str scale_rule="divide")
      -> (quant_out, scale_out, residual_out, norm_out). quant_out: float8_e4m3fn [..., H] (FP8)
      or uint8 [..., H/2] (packed e2m1, even element in the low nibble). scale_out (every byte of
      arfScaleBufferBytes, padding included):
        fp8_per_tensor  float32 [0] (nothing written; the scale is the input `scale`)
        fp8_per_token   float32 [T, 1]
        fp8_per_group   row_major: float32 [T, H/128] (fp32, ue8m0_as_fp32) or uint8 [T, H/128]
                        (ue8m0_packed); mn_major: float32 [H/128, Tp] or uint8
                        [ceil(H/512), 4 * Tp] (4 codes per 32-bit word along K; .view(torch.int32)
                        gives DeepGEMM's [ceil(H/512), Tp]); Tp = round_up(T, 4). The logical
                        [T, H/128] view of an MN-major fp32 buffer is scale_out.t()[:T].
        nvfp4           float8_e4m3fn [T, H/16] (row_major) or [round_up(T,128), round_up(H/16,4)]
                        (swizzled_128x4)
        mxfp4           uint8 (UE8M0) [T, H/32] or [round_up(T,128), round_up(H/32,4)]
      norm_out: [..., H] in the activation dtype when with_norm, else an empty [0] tensor.
  all_reduce(Tensor input, str comm) -> Tensor          (sum over ranks, fp32 in rank order)
  all_reduce_(Tensor(a!) input, str comm) -> ()         (in place)

After every call the communicator's asynchronous error is read (no synchronization); a failure of
the call or an earlier asynchronous error raises arfusion.ArfError (status name, message, first
lost call).

Kernels: the Python functions below, or, for the ops arfusion.torch._native lists when its C++
library (csrc/ops_stable.cc, torch's stable ABI) is built and ARFUSION_TORCH_OPS allows it, C++
kernels with the same checks; ``backend()`` says which. A C++ kernel raises RuntimeError
("arfusion error [<status>] in <function> (communicator '<name>'...): ..." for library failures,
"arfusion.<op>: ..." for argument checks); ``translate_error`` gives the ArfError / ValueError the
Python kernel raises, and the Communicator methods apply it.
"""

from __future__ import annotations

import torch

import arfusion as _arf
from arfusion import _shapes
from arfusion._lib import ArfError, Pattern, Status

from . import _native
from ._comm import get_communicator
from ._errors import translate_error

NAMESPACE = "arfusion"

QUANT_PATTERNS = _shapes.QUANT_PATTERNS
SCALE_LAYOUTS = _shapes.SCALE_LAYOUTS
SCALE_FORMATS = _shapes.SCALE_FORMATS
NORM_ROUNDINGS = _shapes.NORM_ROUNDINGS
SCALE_RULES = _shapes.SCALE_RULES
_algorithms: dict[str, int] = {}


_choice = _shapes.choice
quant_pattern = _shapes.quant_pattern
scale_layout_value = _shapes.scale_layout_value
scale_format_value = _shapes.scale_format_value
norm_rounding_value = _shapes.norm_rounding_value
scale_rule_value = _shapes.scale_rule_value


def algorithm_value(name: str) -> int:
    v = _algorithms.get(name)
    if v is None:
        try:
            v = int(_arf.algorithm_from_name(name))
        except ArfError:
            raise ValueError(f"arfusion: unknown algorithm {name!r} (auto, oneshot_lamport, "
                             "oneshot_pull, twoshot, unfused, nccl)") from None
        _algorithms[name] = v
    return v


_TORCH_DTYPES = {"float8_e4m3fn": torch.float8_e4m3fn, "uint8": torch.uint8,
                 "float32": torch.float32}


def quant_output_spec(quant: str, scale_layout: str, scale_format: str, rows, hidden,
                      lead_shape) -> tuple:
    """(quant_out shape, dtype, scale_out shape, dtype) of fused_add_rms_norm_quant (torch dtypes;
    arfusion._shapes has the rules). Works on SymInts (fake tensors) too."""
    q_shape, q_kind, s_shape, s_kind = _shapes.quant_output_spec(
        quant, scale_layout, scale_format, rows, hidden, lead_shape)
    return q_shape, _TORCH_DTYPES[q_kind], s_shape, _TORCH_DTYPES[s_kind]


# ---- checks shared by the real and fake implementations ------------------------------------------


def _rows_hidden(input: torch.Tensor):
    if input.dim() < 1:
        raise ValueError("arfusion: input must have at least one dimension (the hidden size last)")
    hidden = input.shape[-1]
    rows = input.numel() // hidden if hidden != 0 else 0
    return rows, hidden


def _check_activation(input, what: str):
    # the call's dtype goes to the library as the input's own (a call in another dtype than the
    # communicator's is refused there); anything but bf16/fp16 is not an activation at all
    if input.dtype not in (torch.bfloat16, torch.float16):
        raise ValueError(f"arfusion.{what}: input dtype {input.dtype}: the activation dtype is "
                         "torch.bfloat16 or torch.float16")


def _check_common(input, residual, weight, what: str):
    _check_activation(input, what)
    rows, hidden = _rows_hidden(input)
    if residual is not None:
        if residual.shape != input.shape:
            raise ValueError(f"arfusion.{what}: residual shape {tuple(residual.shape)} != input "
                             f"shape {tuple(input.shape)}")
        if residual.dtype != input.dtype:
            raise ValueError(f"arfusion.{what}: residual dtype {residual.dtype} != input dtype "
                             f"{input.dtype}")
    if weight.dim() != 1 or weight.shape[0] != hidden:
        raise ValueError(f"arfusion.{what}: weight must be 1-D of the hidden size {hidden}, got "
                         f"shape {tuple(weight.shape)}")
    if weight.dtype not in (input.dtype, torch.float32):
        raise ValueError(f"arfusion.{what}: weight dtype {weight.dtype} must be the input's "
                         f"({input.dtype}) or torch.float32")
    return rows, hidden


def _on_device(comm, what: str, **tensors):
    for name, t in tensors.items():
        if t is not None and t.device != comm.device:
            raise ValueError(f"arfusion.{what}: {name} is on {t.device}, the communicator "
                             f"{comm.name!r} on {comm.device}")


def _args(comm, pattern: int, dtype, hidden: int, weight_dtype, gamma_plus_one: bool, eps: float,
          norm_rounding: str, algorithm: str, scale_layout: int = 0, scale_format: int = 0,
          fallback: int = 0, scale_rule: str = "divide") -> _arf.arfFusedArgs_t:
    key = (pattern, dtype, hidden, weight_dtype, bool(gamma_plus_one), float(eps), norm_rounding,
           algorithm, scale_layout, scale_format, fallback, scale_rule)
    args = comm.cached_args(key)
    if args is None:
        args = comm.shape_args(pattern, hidden, 0, dtype=dtype, gamma_dtype=weight_dtype,
                               gamma_plus_one=gamma_plus_one, eps=eps,
                               norm_rounding=norm_rounding_value(norm_rounding),
                               algorithm=algorithm_value(algorithm), scale_layout=scale_layout,
                               scale_format=scale_format, fallback=fallback,
                               scale_rule=scale_rule_value(scale_rule))
        comm.store_args(key, args)
    return args


def _set_pointers(args, *, num_tokens, input, allreduce_out=None, residual_in=None,
                  residual_out=None, norm_out=None, gamma=None, quant_out=None, scale_out=None,
                  scale_in=None) -> None:
    args.num_tokens = num_tokens
    args.input = input
    args.allreduce_out = allreduce_out
    args.residual_in = residual_in
    args.residual_out = residual_out
    args.norm_out = norm_out
    args.gamma = gamma
    args.quant_out = quant_out
    args.scale_out = scale_out
    args.scale_in = scale_in


def _ptr(t):
    return None if t is None else t.data_ptr()


# ---- implementations -----------------------------------------------------------------------------


def _fused_add_rms_norm(input, residual, weight, eps, comm, gamma_plus_one=False,
                        norm_rounding="once", algorithm="auto"):
    c = get_communicator(comm)
    rows, hidden = _check_common(input, residual, weight, "fused_add_rms_norm")
    _on_device(c, "fused_add_rms_norm", input=input, residual=residual, weight=weight)
    if not (input.is_contiguous() and residual.is_contiguous()):
        raise ValueError("arfusion.fused_add_rms_norm: input and residual are written in place "
                         "and must be contiguous")
    if rows == 0:
        return
    weight = weight.contiguous()
    args = _args(c, Pattern.ResidualRmsNorm, input.dtype, hidden, weight.dtype, gamma_plus_one, eps,
                 norm_rounding, algorithm)
    x, r = input.data_ptr(), residual.data_ptr()
    _set_pointers(args, num_tokens=rows, input=x, residual_in=r, residual_out=r, norm_out=x,
                  gamma=weight.data_ptr())
    c.launch_fused(args)


def _fused_add_rms_norm_fake(input, residual, weight, eps, comm, gamma_plus_one=False,
                             norm_rounding="once", algorithm="auto"):
    _check_common(input, residual, weight, "fused_add_rms_norm")
    return None


def _fused_add_rms_norm_out(input, residual, weight, eps, comm, gamma_plus_one=False,
                            norm_rounding="once", algorithm="auto"):
    c = get_communicator(comm)
    rows, hidden = _check_common(input, residual, weight, "fused_add_rms_norm_out")
    _on_device(c, "fused_add_rms_norm_out", input=input, residual=residual, weight=weight)
    norm = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    res_out = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    if rows == 0:
        return norm, res_out
    input = input.contiguous()
    residual = residual.contiguous() if residual is not None else None
    weight = weight.contiguous()
    args = _args(c, Pattern.ResidualRmsNorm, input.dtype, hidden, weight.dtype, gamma_plus_one, eps,
                 norm_rounding, algorithm)
    _set_pointers(args, num_tokens=rows, input=input.data_ptr(), residual_in=_ptr(residual),
                  residual_out=res_out.data_ptr(), norm_out=norm.data_ptr(),
                  gamma=weight.data_ptr())
    c.launch_fused(args)
    return norm, res_out


def _fused_add_rms_norm_out_fake(input, residual, weight, eps, comm, gamma_plus_one=False,
                                 norm_rounding="once", algorithm="auto"):
    _check_common(input, residual, weight, "fused_add_rms_norm_out")
    return input.new_empty(input.shape), input.new_empty(input.shape)


def _quant_outputs(input, quant, scale_layout, scale_format, with_norm, alloc):
    rows, hidden = _rows_hidden(input)
    q_shape, q_dtype, s_shape, s_dtype = quant_output_spec(quant, scale_layout, scale_format, rows,
                                                           hidden, input.shape[:-1])
    q = alloc(q_shape, q_dtype)
    s = alloc(s_shape, s_dtype)
    res_out = alloc(tuple(input.shape), input.dtype)
    norm = alloc(tuple(input.shape) if with_norm else (0,), input.dtype)
    return q, s, res_out, norm


def _check_scale_in(quant, scale):
    needs = quant in ("fp8_per_tensor", "nvfp4")
    if needs:
        if scale is None:
            raise ValueError(f"arfusion.fused_add_rms_norm_quant: {quant} needs `scale` (a float32 "
                             "device tensor of one element)")
        if scale.dtype != torch.float32 or scale.numel() != 1:
            raise ValueError("arfusion.fused_add_rms_norm_quant: `scale` must be a float32 tensor "
                             f"of one element, got {scale.dtype} with {scale.numel()} elements")
    elif scale is not None:
        raise ValueError(f"arfusion.fused_add_rms_norm_quant: {quant} takes no input `scale`")


def _check_scale_rule(quant, scale_rule):
    scale_rule_value(scale_rule)  # ValueError for a name outside SCALE_RULES
    if scale_rule != "divide" and quant not in ("fp8_per_token", "fp8_per_group"):
        raise ValueError(f"arfusion.fused_add_rms_norm_quant: scale_rule {scale_rule!r} applies to "
                         f"fp8_per_token and fp8_per_group only, not {quant}")


def _fused_add_rms_norm_quant(input, residual, weight, scale, eps, comm, quant,
                              scale_layout="row_major", scale_format="fp32", with_norm=False,
                              gamma_plus_one=False, norm_rounding="once", algorithm="auto",
                              fallback=0, scale_rule="divide"):
    c = get_communicator(comm)
    rows, hidden = _check_common(input, residual, weight, "fused_add_rms_norm_quant")
    _check_scale_in(quant, scale)
    _check_scale_rule(quant, scale_rule)
    _on_device(c, "fused_add_rms_norm_quant", input=input, residual=residual, weight=weight,
               scale=scale)
    dev = input.device
    q, s, res_out, norm = _quant_outputs(
        input, quant, scale_layout, scale_format, with_norm,
        lambda shape, dtype: torch.empty(shape, dtype=dtype, device=dev))
    if rows == 0:
        return q, s, res_out, norm
    pattern = quant_pattern(quant)
    layout, fmt = scale_layout_value(scale_layout), scale_format_value(scale_format)
    expected = _arf.scale_buffer_bytes(pattern, layout, fmt, rows, hidden)
    if s.numel() * s.element_size() != expected:
        raise ArfError(Status.Internal, f"scale_out of {s.numel() * s.element_size()} bytes, "
                       f"arfScaleBufferBytes says {expected} ({quant}, {scale_layout}, "
                       f"{scale_format}, T={rows}, H={hidden})", "fused_add_rms_norm_quant",
                       comm_name=comm)
    input = input.contiguous()
    residual = residual.contiguous() if residual is not None else None
    weight = weight.contiguous()
    args = _args(c, pattern, input.dtype, hidden, weight.dtype, gamma_plus_one, eps, norm_rounding,
                 algorithm, layout, fmt, int(fallback), scale_rule)
    _set_pointers(args, num_tokens=rows, input=input.data_ptr(), residual_in=_ptr(residual),
                  residual_out=res_out.data_ptr(), norm_out=norm.data_ptr() if with_norm else None,
                  gamma=weight.data_ptr(), quant_out=q.data_ptr(),
                  scale_out=s.data_ptr() if expected else None, scale_in=_ptr(scale))
    c.launch_fused(args)
    return q, s, res_out, norm


def _fused_add_rms_norm_quant_fake(input, residual, weight, scale, eps, comm, quant,
                                   scale_layout="row_major", scale_format="fp32", with_norm=False,
                                   gamma_plus_one=False, norm_rounding="once", algorithm="auto",
                                   fallback=0, scale_rule="divide"):
    _check_common(input, residual, weight, "fused_add_rms_norm_quant")
    _check_scale_in(quant, scale)
    _check_scale_rule(quant, scale_rule)
    return _quant_outputs(input, quant, scale_layout, scale_format, with_norm,
                          lambda shape, dtype: input.new_empty(shape, dtype=dtype))


def _all_reduce(input, comm):
    c = get_communicator(comm)
    _check_activation(input, "all_reduce")
    _on_device(c, "all_reduce", input=input)
    out = torch.empty(input.shape, dtype=input.dtype, device=input.device)
    if input.numel() == 0:
        return out
    input = input.contiguous()
    c.launch_all_reduce(input.data_ptr(), out.data_ptr(), input.numel(), input.dtype)
    return out


def _all_reduce_fake(input, comm):
    return input.new_empty(input.shape)


def _all_reduce_(input, comm):
    c = get_communicator(comm)
    _check_activation(input, "all_reduce_")
    _on_device(c, "all_reduce_", input=input)
    if not input.is_contiguous():
        raise ValueError("arfusion.all_reduce_: the input is written in place and must be contiguous")
    if input.numel() == 0:
        return
    c.launch_all_reduce(input.data_ptr(), input.data_ptr(), input.numel(), input.dtype)


def _all_reduce__fake(input, comm):
    return None


# ---- registration --------------------------------------------------------------------------------

SCHEMAS = {
    "fused_add_rms_norm":
        "fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float eps, "
        "str comm, bool gamma_plus_one=False, str norm_rounding=\"once\", "
        "str algorithm=\"auto\") -> ()",
    "fused_add_rms_norm_out":
        "fused_add_rms_norm_out(Tensor input, Tensor? residual, Tensor weight, float eps, "
        "str comm, bool gamma_plus_one=False, str norm_rounding=\"once\", "
        "str algorithm=\"auto\") -> (Tensor, Tensor)",
    "fused_add_rms_norm_quant":
        "fused_add_rms_norm_quant(Tensor input, Tensor? residual, Tensor weight, Tensor? scale, "
        "float eps, str comm, str quant, str scale_layout=\"row_major\", "
        "str scale_format=\"fp32\", bool with_norm=False, bool gamma_plus_one=False, "
        "str norm_rounding=\"once\", str algorithm=\"auto\", int fallback=0, "
        "str scale_rule=\"divide\") -> (Tensor, Tensor, Tensor, Tensor)",
    "all_reduce": "all_reduce(Tensor input, str comm) -> Tensor",
    "all_reduce_": "all_reduce_(Tensor(a!) input, str comm) -> ()",
}
_IMPLS = {
    "fused_add_rms_norm": (_fused_add_rms_norm, _fused_add_rms_norm_fake),
    "fused_add_rms_norm_out": (_fused_add_rms_norm_out, _fused_add_rms_norm_out_fake),
    "fused_add_rms_norm_quant": (_fused_add_rms_norm_quant, _fused_add_rms_norm_quant_fake),
    "all_reduce": (_all_reduce, _all_reduce_fake),
    "all_reduce_": (_all_reduce_, _all_reduce__fake),
}


def _register():
    # Schemas here, once; then the C++ kernels (arfusion.torch._native, per ARFUSION_TORCH_OPS);
    # the Python kernel for every op the C++ library does not implement; fakes for all.
    lib = torch.library.Library(NAMESPACE, "FRAGMENT")
    for name, schema in SCHEMAS.items():
        lib.define(schema)
    _native.load(repr(SCHEMAS))
    for name in SCHEMAS:
        impl, fake = _IMPLS[name]
        if name not in _native.native_ops():
            lib.impl(name, impl, "CUDA")
        torch.library.register_fake(f"{NAMESPACE}::{name}", fake, lib=lib)
    return lib


_LIBRARY = _register()  # kept alive for the process: dropping it would unregister the ops


def backend() -> dict:
    """Which implementation the ops run: {"backend": "cpp" | "python", "library", "reason",
    "native_ops"} (arfusion.torch._native)."""
    return _native.backend()


def op(name: str):
    """The OpOverload torch.ops.arfusion.<name>.default."""
    return getattr(torch.ops.arfusion, name).default


__all__ = ["SCHEMAS", "op", "backend", "translate_error", "quant_output_spec", "quant_pattern",
           "QUANT_PATTERNS", "SCALE_LAYOUTS", "SCALE_FORMATS", "NORM_ROUNDINGS", "SCALE_RULES"]
