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
  fused_add_rms_norm_out(Tensor input, Tensor? residual, Tensor weight, float eps, str comm, ...,
                         Tensor? post_weight=None)
      -> (norm_out, residual_out); residual None (first layer): residual_out = all_reduce(input).
      post_weight set: a sandwich call (Gemma 2/3's norm after the all-reduce, before the residual
      add): h = RMSNorm(all_reduce(input)) * post_weight rounded to the dtype (never returned),
      residual_out = h + residual (= h without a residual), norm_out = RMSNorm(residual_out) *
      weight; post_weight has weight's dtype and shares its eps, gamma_plus_one and
      norm_rounding. Not offered yet: the library refuses it (ArfError, arfUnsupported) unless
      ARF_EXPERIMENTAL_SANDWICH=1 until its GPU tests have passed.
  fused_add_rms_norm_quant(Tensor input, Tensor? residual, Tensor weight, Tensor? scale,
                     float eps, str comm, str quant, str scale_layout="row_major",
                     str scale_format="fp32", bool with_norm=False, bool gamma_plus_one=False,
                     str norm_rounding="once", str algorithm="auto", int fallback=0,
                     str scale_rule="divide", Tensor? post_weight=None)
      -> (quant_out, scale_out, residual_out, norm_out); post_weight as for
      fused_add_rms_norm_out (the quantization reads the second norm). quant_out and scale_out are shaped as
      the library lays them out (arfQuantOutputLayout in arfusion.h; in Python
      arfusion.quant_output_layout): quant_out float8_e4m3fn [..., H] (FP8) or uint8 [..., H/2]
      (packed e2m1, even element in the low nibble); scale_out every byte of arfScaleBufferBytes,
      padding included (fp8_per_tensor: float32 [0], nothing written). An MN-major fp32 buffer
      [H/128, round_up(T, 4)] reads as the logical [T, H/128] through scale_out.t()[:T]; a packed
      one's .view(torch.int32) is DeepGEMM's [ceil(H/512), round_up(T, 4)].
      norm_out: [..., H] in the activation dtype when with_norm, else an empty [0] tensor.
  all_reduce(Tensor input, str comm) -> Tensor          (sum over ranks, fp32 in rank order)
  all_reduce_(Tensor(a!) input, str comm) -> ()         (in place)

After every call the communicator's asynchronous error is read (no synchronization); a failure of
the call or an earlier asynchronous error raises arfusion.ArfError (status name, message, first
lost call).

Kernels: the C++ op library (csrc/ops_stable.cc on torch's stable ABI, loaded by
arfusion.torch._oplib) defines the schemas and the CUDA kernels; this module registers the fake
(meta) implementations tracing uses, with quant_out / scale_out shaped by the library's
arfQuantOutputLayout. A kernel raises RuntimeError ("arfusion error [<status>] in <function>
(communicator '<name>'...): ..." for library failures, "arfusion.<op>: ..." for argument checks);
``translate_error`` gives the ArfError / ValueError it stands for, and the Communicator methods
apply it.
"""

from __future__ import annotations

import torch

from arfusion import _opargs
from arfusion._opargs import (NORM_ROUNDINGS, QUANT_PATTERNS, SCALE_FORMATS, SCALE_LAYOUTS,
                              SCALE_RULES, algorithm_value, norm_rounding_value, quant_pattern,
                              scale_format_value, scale_layout_value, scale_rule_value)

from . import _oplib
from ._errors import translate_error

NAMESPACE = "arfusion"
OPS = ("fused_add_rms_norm", "fused_add_rms_norm_out", "fused_add_rms_norm_quant", "all_reduce",
       "all_reduce_")


def quant_output_spec(quant: str, scale_layout: str, scale_format: str, rows, hidden,
                      lead_shape) -> tuple:
    """(quant_out shape, dtype, scale_out shape, dtype) of fused_add_rms_norm_quant, as the library
    lays them out; `rows` may be a SymInt (fake tensors)."""
    q_shape, q_kind, s_shape, s_kind = _opargs.quant_output_spec(
        quant, scale_layout, scale_format, rows, hidden, lead_shape)
    return q_shape, getattr(torch, q_kind), s_shape, getattr(torch, s_kind)


# ---- fake implementations: the outputs' metadata while tracing (the kernels check arguments) ----


def _rows_hidden(input):
    hidden = input.shape[-1]
    return (input.numel() // hidden if hidden != 0 else 0), hidden


def _fused_add_rms_norm_fake(input, residual, weight, eps, comm, gamma_plus_one=False,
                             norm_rounding="once", algorithm="auto"):
    return None


def _fused_add_rms_norm_out_fake(input, residual, weight, eps, comm, gamma_plus_one=False,
                                 norm_rounding="once", algorithm="auto", post_weight=None):
    return input.new_empty(input.shape), input.new_empty(input.shape)


def _fused_add_rms_norm_quant_fake(input, residual, weight, scale, eps, comm, quant,
                                   scale_layout="row_major", scale_format="fp32", with_norm=False,
                                   gamma_plus_one=False, norm_rounding="once", algorithm="auto",
                                   fallback=0, scale_rule="divide", post_weight=None):
    rows, hidden = _rows_hidden(input)
    q_shape, q_dtype, s_shape, s_dtype = quant_output_spec(quant, scale_layout, scale_format, rows,
                                                           hidden, input.shape[:-1])
    return (input.new_empty(q_shape, dtype=q_dtype), input.new_empty(s_shape, dtype=s_dtype),
            input.new_empty(input.shape), input.new_empty(input.shape if with_norm else (0,)))


def _all_reduce_fake(input, comm):
    return input.new_empty(input.shape)


def _all_reduce__fake(input, comm):
    return None


_FAKES = {
    "fused_add_rms_norm": _fused_add_rms_norm_fake,
    "fused_add_rms_norm_out": _fused_add_rms_norm_out_fake,
    "fused_add_rms_norm_quant": _fused_add_rms_norm_quant_fake,
    "all_reduce": _all_reduce_fake,
    "all_reduce_": _all_reduce__fake,
}
for _name in OPS:
    torch.library.register_fake(f"{NAMESPACE}::{_name}", _FAKES[_name])


def op(name: str):
    """The OpOverload torch.ops.arfusion.<name>.default."""
    return getattr(torch.ops.arfusion, name).default


def library_path() -> str:
    """The op library loaded (arfusion/torch/libarfusion_torch_ops.so of the installed package)."""
    return str(_oplib.LIBRARY)


__all__ = ["OPS", "op", "library_path", "translate_error", "quant_output_spec", "quant_pattern",
           "algorithm_value", "norm_rounding_value", "scale_layout_value", "scale_format_value",
           "scale_rule_value", "QUANT_PATTERNS", "SCALE_LAYOUTS", "SCALE_FORMATS",
           "NORM_ROUNDINGS", "SCALE_RULES"]
