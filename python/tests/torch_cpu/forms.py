"""The source forms of all-reduce + residual add + RMSNorm (+ FP8) the pass's tests compile, written
as models and engines write them. Every form takes its tensors as arguments (x: a row-parallel
layer's partial output [T, H], r: the residual, w: the norm weight, ...), so that one function
traces with fake CUDA tensors and runs with CPU tensors alike."""

from __future__ import annotations

import torch
import torch.distributed as dist
import torch.nn.functional as F

EPS = 1e-6
F8_MIN_SCALE = 1.0 / (448.0 * 512.0)


def ar(x):
    """A row-parallel layer's output all-reduced: dist.all_reduce on an intermediate (Dynamo makes
    it _c10d_functional.all_reduce + wait_tensor)."""
    p = x * 2
    dist.all_reduce(p)
    return p


# ---- norms ---------------------------------------------------------------------------------------


def llama(s, w):
    """Hugging Face LlamaRMSNorm (Mistral, Qwen3, Phi-3 alike): weight * x.to(dtype)."""
    h = s.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return w * h.to(s.dtype)


def llama_pow(s, w):
    """The same norm with pow(mean + eps, -0.5) for rsqrt."""
    h = s.to(torch.float32)
    h = h * torch.pow(h.pow(2).mean(-1, keepdim=True) + EPS, -0.5)
    return w * h.to(s.dtype)


def gemma(s, w):
    """Gemma's RMSNorm: fp32 throughout, (1 + w), one rounding."""
    h = s.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return (h * (1.0 + w.float())).type_as(s)


def fp32_weight(s, w32):
    h = s.float()
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return (h * w32).to(s.dtype)


def olmo2(s, w):
    """OLMo 2's RMSNorm: (weight * x) in fp32, then one rounding."""
    h = s.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return (w * h).to(s.dtype)


def f_rms(s, w):
    return F.rms_norm(s, (s.shape[-1],), w, EPS)


# ---- FP8 tails -----------------------------------------------------------------------------------


def per_token(y):
    yf = y.float()
    sc = torch.clamp(yf.abs().amax(dim=-1, keepdim=True) / 448.0, min=F8_MIN_SCALE)
    return (yf / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), sc


def per_token_bf16_amax(y):
    """The amax taken on the bf16 norm, then converted (vLLM's x.abs().max(dim=-1))."""
    amax, _ = y.abs().max(dim=-1)
    sc = (amax.unsqueeze(-1).to(torch.float32) / 448.0).clamp(min=F8_MIN_SCALE)
    return (y.float() / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), sc


def per_token_times_reciprocal(y):
    """The scale written as amax * (1/448): the same fp32 product torch computes for / 448.0 on a
    GPU."""
    yf = y.float()
    sc = torch.clamp(yf.abs().amax(dim=-1, keepdim=True) * (1.0 / 448.0), min=F8_MIN_SCALE)
    return (yf / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), sc


def per_group(y):
    t, h = y.shape
    yf = y.float().reshape(t, h // 128, 128)
    sc = torch.clamp(yf.abs().amax(dim=-1, keepdim=True) / 448.0, min=F8_MIN_SCALE)
    q = (yf / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q.reshape(t, h), sc.reshape(t, h // 128)


def per_group_minus_one(y):
    """Groups by a view with -1 ([T * H / 128, 128])."""
    shape = y.shape
    yf = y.float().view(-1, 128)
    sc = torch.clamp(yf.abs().amax(dim=-1, keepdim=True) / 448.0, min=F8_MIN_SCALE)
    q = (yf / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q.view(shape), sc.view(*shape[:-1], -1)


def vllm_group_native(y):
    """vLLM's QuantFP8._quantize_group_native: bf16 groups, bf16 amax then float(), the bf16 values
    divided by the fp32 scales (promoted by the division)."""
    shape = y.shape
    xg = y.view(-1, shape[-1] // 128, 128)
    absmax = xg.abs().max(dim=-1, keepdim=True)[0].float()
    sc = (absmax / 448.0).clamp(min=F8_MIN_SCALE)
    q = (xg / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q.view(shape), sc.squeeze(-1).reshape(*shape[:-1], shape[-1] // 128)


def static(y, scale):
    return (y.float() / scale).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)


# tails the pass must leave unfused (each with its cause)

def vllm_native_per_token(y):
    """vLLM's QuantFP8.forward_native, per token: x * scale.reciprocal()."""
    x_max, _ = y.abs().max(dim=-1)
    x_max = x_max.unsqueeze(-1).to(torch.float32)
    sc = (x_max / 448.0).clamp(min=F8_MIN_SCALE)
    out = y.to(torch.float32) * sc.reciprocal()
    return out.clamp(-448.0, 448.0).to(torch.float8_e4m3fn), sc


def torchao_rowwise(y):
    """torchao's float8 rowwise scaling: scale = 448 / clamp(amax, 1e-12) in fp64, x * scale."""
    amax = torch.max(torch.abs(y), dim=-1, keepdim=True).values
    sc = (448.0 / torch.clamp(amax.to(torch.float64), min=1e-12)).to(torch.float32)
    q = (y.to(torch.float32) * sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q, sc.reciprocal()


def sglang_native_per_token(y):
    """SGLang's native per-token fallback: the floor 1e-12 on amax before the division."""
    absmax = torch.clamp(y.abs().max(dim=1, keepdim=True).values, min=1e-12)
    sc = absmax / 448.0
    return torch.clamp(y / sc, -448.0, 448.0).to(torch.float8_e4m3fn), sc


def floor_on_amax(y):
    """The floor applied to amax before the division (as SGLang's native fallback does), in fp32."""
    yf = y.float()
    sc = torch.clamp(yf.abs().amax(dim=-1, keepdim=True), min=1e-12) / 448.0
    return (yf / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), sc


def sglang_native_per_tensor(y):
    """SGLang's native dynamic per-tensor fallback: one amax for the whole tensor."""
    absmax = torch.clamp(y.abs().max(), min=1e-12)
    sc = absmax / 448.0
    return torch.clamp(y / sc, -448.0, 448.0).to(torch.float8_e4m3fn), sc


def per_token_other_floor(y):
    yf = y.float()
    sc = torch.clamp(yf.abs().amax(dim=-1, keepdim=True) / 448.0, min=1e-12)
    return (yf / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), sc


def per_group_64(y):
    yf = y.float().view(-1, 64)
    sc = torch.clamp(yf.abs().amax(dim=-1, keepdim=True) / 448.0, min=F8_MIN_SCALE)
    return (yf / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn).view(y.shape), sc


def per_group_ue8m0_exp2(y):
    """vLLM's group quant with use_ue8m0: exp2(ceil(log2(scale)))."""
    shape = y.shape
    xg = y.view(-1, shape[-1] // 128, 128)
    absmax = xg.abs().max(dim=-1, keepdim=True)[0].float()
    raw = (absmax / 448.0).clamp(min=F8_MIN_SCALE)
    sc = torch.exp2(torch.ceil(torch.log2(raw)))
    q = (xg / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
    return q.view(shape), sc
