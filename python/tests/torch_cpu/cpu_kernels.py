"""CPU kernels for torch.ops.arfusion.* (test-only), so that a model compiled with the pass runs on
the CPU and its outputs can be compared with the eager model bit for bit.

They follow the numerics contract of include/arfusion/arfusion.h, for the rank count a fake process
group gives (its all-reduce returns the input, so the sum over ranks is this rank's data, rounded
once: the data itself, -0.0 read as +0.0) with one change: the fp32 sum of squares of a row is
torch's own `y.pow(2).mean(-1, keepdim=True)` instead of the kernel's column-order sum. The order of
an fp32 sum is where a GPU kernel and the CPU legitimately differ; every rounding step of the
contract (residual_out = round(sum + residual), norm = round(y * s * g) or round(round(y * s) * g),
the FP8 scale rules and q = e4m3(y / scale)) is kept, so a form whose rounding order differs from
the unfused graph shows up as different bits. The FP8 quantizers are the GPU tests' reference
(python/tests/gpu/reference.py).
"""

from __future__ import annotations

import importlib.util
import os

import torch


def _load_reference():
    """python/tests/gpu/reference.py, by its path (that directory's harness.py is another one)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "gpu", "reference.py")
    spec = importlib.util.spec_from_file_location("arfusion_gpu_reference", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


ref = _load_reference()

_libs = []


def all_reduce_one_rank(x):
    """The contract's sum over one rank: round(fp32(x) + 0), which turns -0.0 into +0.0."""
    return (x.float() + 0.0).to(x.dtype)


# A deliberate fault for negative controls: "drop_residual" leaves the residual out of the sum,
# "round_once" rounds every norm once (the other rounding order of norm_rounding="before_weight").
MUTANT = None


def residual_out(x, residual, post=None):
    """round(sum + residual); a sandwich call (post = (post_weight, eps, gamma_plus_one,
    rounding)) adds the residual to h = the rounded norm of the sum with post_weight instead."""
    s = all_reduce_one_rank(x)
    if post is not None:
        s = rms_norm(s, *post)
    if residual is None or MUTANT == "drop_residual":
        return s
    return (s.float() + residual.float()).to(x.dtype)


def rms_norm(y, weight, eps, gamma_plus_one, rounding):
    """round(y * s * g) ("once") or round(round(y * s) * g) ("before_weight"), s = rsqrt(mean(y^2) +
    eps) in fp32 with torch's mean."""
    yf = y.float()
    s = torch.rsqrt(yf.pow(2).mean(-1, keepdim=True) + eps)
    g = weight.float()
    if gamma_plus_one:
        g = g + 1.0
    ys = yf * s
    if rounding == "before_weight" and MUTANT != "round_once":
        return (ys.to(y.dtype).float() * g).to(y.dtype)
    return (ys * g).to(y.dtype)


def _fused_out(input, residual, weight, eps, comm, gamma_plus_one=False, norm_rounding="once",
               algorithm="auto", post_weight=None):
    post = None if post_weight is None else (post_weight, eps, gamma_plus_one, norm_rounding)
    res = residual_out(input, residual, post)
    return rms_norm(res, weight, eps, gamma_plus_one, norm_rounding), res


def _fused_quant(input, residual, weight, scale, eps, comm, quant, scale_layout="row_major",
                 scale_format="fp32", with_norm=False, gamma_plus_one=False,
                 norm_rounding="once", algorithm="auto", fallback=0, scale_rule="divide",
                 post_weight=None):
    assert scale_layout == "row_major" and scale_format == "fp32", (scale_layout, scale_format)
    norm, res = _fused_out(input, residual, weight, eps, comm, gamma_plus_one, norm_rounding,
                           post_weight=post_weight)
    rows, hidden = norm.numel() // norm.shape[-1], norm.shape[-1]
    flat = norm.reshape(rows, hidden)
    if quant == "fp8_per_tensor":
        q, s = ref.fp8_per_tensor(flat, scale), torch.empty(0, dtype=torch.float32)
    elif quant == "fp8_per_token":
        q, s = ref.fp8_per_token(flat, scale_rule)
    elif quant == "fp8_per_group":
        q, s, _ = ref.fp8_per_group(flat, "fp32", scale_rule)
    else:
        raise NotImplementedError(quant)
    out_norm = norm if with_norm else norm.new_empty(0)
    return q.reshape(norm.shape), s.contiguous(), res, out_norm


def _all_reduce(input, comm):
    return all_reduce_one_rank(input)


def register() -> None:
    """CPU kernels for the ops the pass inserts (once per process)."""
    if _libs:
        return
    import arfusion.torch  # noqa: F401  (defines the ops)

    lib = torch.library.Library("arfusion", "IMPL")
    lib.impl("fused_add_rms_norm_out", _fused_out, "CPU")
    lib.impl("fused_add_rms_norm_quant", _fused_quant, "CPU")
    lib.impl("all_reduce", _all_reduce, "CPU")
    _libs.append(lib)
