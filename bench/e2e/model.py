"""The tensor-parallel decoder (torch side): Llama-3-70B shapes, Megatron-style sharding, one
layer's weights reused by all L layers, and the variants' all-reduce + residual + RMSNorm sites.

Sharding (rank r of TP ranks): the embedding is vocab-parallel (rows of rank r's vocabulary range,
zeros elsewhere, then an all-reduce: the first all-reduce -> RMSNorm site, no residual yet); QKV
and gate/up are column-parallel (rank r's heads / FFN columns), o_proj and down are row-parallel
(partial sums, then the all-reduce at the end of attention and of the MLP, followed by the residual
add and the next RMSNorm). Every layer has two such sites; the last layer's second site carries
the final norm. The LM head (vocab x hidden) is replicated and is used by the gates only.

Weights are N(0, 1/fan_in) (embedding N(0, 1), norm weights 1 + 0.1 N(0, 1)), drawn in blocks of
32 rows of the GLOBAL matrix, each block from its own seed (seed, name, block index): every TP
degree shards the same model. RMSNorm is Hugging Face's LlamaRMSNorm (fp32 statistics,
`weight * x.to(bf16)`), the rounding vLLM's and SGLang's rms_norm kernels have; the fused ops are
called with norm_rounding="before_weight", which is that rounding (arfusion.h, arfNormRounding_t).

All functions here are traced by torch.compile in the compiled variants: the constants they read
come from a frozen `Static` (closure), every tensor is an argument.
"""

from __future__ import annotations

import dataclasses
import hashlib

import torch
import torch.distributed as dist
import torch.nn.functional as F

F8 = torch.float8_e4m3fn
F8_MAX = 448.0
MIN_FP8_SCALE = 1.0 / (448.0 * 512.0)   # arfusion's floor of a dynamic FP8 scale (2^-9 / 448)
# The fused quantizing op's scale rule: torch's own arithmetic for `amax / 448.0` on a GPU
# (amax * fp32(1/448), arfFp8ScaleTimesReciprocal), which is also what the compile pass passes
# for the tails it fuses: (e_c) then quantizes exactly as torch_quant would on the GPU, and (e_d)
# == (e_c_compiled) holds bitwise with the pass's op in place of the model's.
SCALE_RULE = "times_reciprocal"
BLOCK_ROWS = 32

_CPU_GROUP = None   # the gloo group of variant (a') (set by rank.py)


def set_cpu_group(group) -> None:
    global _CPU_GROUP
    _CPU_GROUP = group


@dataclasses.dataclass(frozen=True)
class Static:
    """Constants of one (variant, phase): what the traced code branches on."""
    hidden: int
    nq: int            # query heads of this rank
    nkv: int           # KV heads of this rank
    head_dim: int
    group: int         # query heads per KV head
    ffn_local: int
    vocab_start: int
    vocab_local: int
    eps: float
    ar: str            # "c10d" | "gloo_copy" | "arf_ar" | "fused"
    inplace: bool      # "fused": fused_add_rms_norm in place at the layer sites, else _out
    comm: str          # arfusion communicator name (the ops' registry string)
    algorithm: str
    fp8: str | None    # None | "per_group" | "per_token"
    phase: str         # "prefill" | "decode"


# ---- weights ---------------------------------------------------------------------------------------


def _block_seed(seed: int, name: str, block: int) -> int:
    digest = hashlib.sha256(f"{seed}:{name}:{block}".encode()).digest()
    return int.from_bytes(digest[:8], "little") & ((1 << 63) - 1)


def _rows(name, first_row, nrows, cols, std, seed, device) -> torch.Tensor:
    """Rows [first_row, first_row + nrows) of the global bf16 matrix `name` (N(0, std^2))."""
    if first_row % BLOCK_ROWS or nrows % BLOCK_ROWS:
        raise ValueError(f"{name}: rows {first_row}+{nrows} not in blocks of {BLOCK_ROWS}")
    out = torch.empty(nrows, cols, dtype=torch.bfloat16, device=device)
    g = torch.Generator(device=device)
    for i in range(nrows // BLOCK_ROWS):
        g.manual_seed(_block_seed(seed, name, first_row // BLOCK_ROWS + i))
        blk = torch.randn(BLOCK_ROWS, cols, generator=g, device=device, dtype=torch.float32)
        out[i * BLOCK_ROWS:(i + 1) * BLOCK_ROWS] = (blk * std).to(torch.bfloat16)
    return out


def _norm_weight(name, n, seed, device) -> torch.Tensor:
    g = torch.Generator(device=device)
    g.manual_seed(_block_seed(seed, name, 0))
    w = 1.0 + 0.1 * torch.randn(n, generator=g, device=device, dtype=torch.float32)
    return w.to(torch.bfloat16)


@dataclasses.dataclass
class Weights:
    emb: torch.Tensor      # [V/tp, H] vocab-parallel
    qkv: torch.Tensor      # [(nq + 2 nkv) D, H] column-parallel (q, k, v heads of this rank)
    o: torch.Tensor        # [H, nq D] row-parallel
    gu: torch.Tensor       # [2 F/tp, H] column-parallel (gate rows, then up rows)
    down: torch.Tensor     # [H, F/tp] row-parallel
    norm1: torch.Tensor    # input_layernorm (also the first norm after the embedding)
    norm2: torch.Tensor    # post_attention_layernorm
    normf: torch.Tensor    # final norm
    lm: torch.Tensor       # [V, H] replicated LM head
    qkv8: torch.Tensor | None = None
    qkv_s: torch.Tensor | None = None
    gu8: torch.Tensor | None = None
    gu_s: torch.Tensor | None = None


def make_weights(dims, tp: int, rank: int, seed: int, device) -> Weights:
    H, D = dims.hidden, dims.head_dim
    nq, nkv = dims.heads // tp, dims.kv_heads // tp
    fl, vl = dims.ffn // tp, dims.vocab // tp
    s_h = 1.0 / H ** 0.5
    q = _rows("wq", rank * nq * D, nq * D, H, s_h, seed, device)
    k = _rows("wk", rank * nkv * D, nkv * D, H, s_h, seed, device)
    v = _rows("wv", rank * nkv * D, nkv * D, H, s_h, seed, device)
    qkv = torch.cat([q, k, v], 0)
    del q, k, v
    o = _rows("wo_t", rank * nq * D, nq * D, H, 1.0 / (dims.heads * D) ** 0.5, seed, device)
    o = o.t().contiguous()
    gate = _rows("wg", rank * fl, fl, H, s_h, seed, device)
    up = _rows("wu", rank * fl, fl, H, s_h, seed, device)
    gu = torch.cat([gate, up], 0)
    del gate, up
    down = _rows("wd_t", rank * fl, fl, H, 1.0 / dims.ffn ** 0.5, seed, device).t().contiguous()
    emb = _rows("emb", rank * vl, vl, H, 1.0, seed, device)
    lm = _rows("lm", 0, dims.vocab, H, s_h, seed, device)
    return Weights(emb=emb, qkv=qkv, o=o, gu=gu, down=down,
                   norm1=_norm_weight("norm1", H, seed, device),
                   norm2=_norm_weight("norm2", H, seed, device),
                   normf=_norm_weight("normf", H, seed, device), lm=lm)


def rope_tables(dims, positions: int, device):
    """cos, sin [positions, head_dim] in bf16 (Hugging Face's rotate_half convention)."""
    D = dims.head_dim
    inv = 1.0 / (dims.rope_theta ** (torch.arange(0, D, 2, device=device, dtype=torch.float32) / D))
    t = torch.arange(positions, device=device, dtype=torch.float32)
    freqs = torch.outer(t, inv)
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos().to(torch.bfloat16), emb.sin().to(torch.bfloat16)


# ---- FP8 -------------------------------------------------------------------------------------------


def quant_weight(w: torch.Tensor, mode: str):
    """Weight [N, K] -> (e4m3 [N, K], scales): per_group 128x128 blocks (scales [N/128, K/128],
    contiguous), per_token one scale per output row (scales [N]). scale = max(amax/448, floor)."""
    n, k = w.shape
    wf = w.float()
    if mode == "per_group":
        blocks = wf.view(n // 128, 128, k // 128, 128)
        s = (blocks.abs().amax(dim=(1, 3)) / F8_MAX).clamp_min(MIN_FP8_SCALE)
        q = (blocks / s[:, None, :, None]).clamp(-F8_MAX, F8_MAX).to(F8).view(n, k)
        return q.contiguous(), s.contiguous()
    s = (wf.abs().amax(dim=1) / F8_MAX).clamp_min(MIN_FP8_SCALE)
    q = (wf / s[:, None]).clamp(-F8_MAX, F8_MAX).to(F8)
    return q.contiguous(), s.contiguous()


def torch_quant(y: torch.Tensor, mode: str):
    """torch FP8 quantization of the bf16 norm, written exactly in the form arfusion's pass
    recognises (scale = max(amax / 448, 1/(448*512)), q = e4m3(clamp(y / scale))). On the CPU
    `amax / 448.0` is the IEEE quotient (arfusion's default rule), on a GPU amax * fp32(1/448)
    (scale_rule "times_reciprocal", SCALE_RULE); q = y / scale is an IEEE division on both.
    per_group: (q [T, H], scales [T, H/128] row-major); per_token: (q [T, H], scales [T, 1])."""
    if mode == "per_group":
        t, h = y.shape
        yf = y.float().reshape(t, h // 128, 128)
        sc = torch.clamp(yf.abs().amax(dim=-1, keepdim=True) / 448.0, min=1.0 / (448.0 * 512.0))
        q = (yf / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn)
        return q.reshape(t, h), sc.reshape(t, h // 128)
    yf = y.float()
    sc = torch.clamp(yf.abs().amax(dim=-1, keepdim=True) / 448.0, min=1.0 / (448.0 * 512.0))
    return (yf / sc).clamp(-448.0, 448.0).to(torch.float8_e4m3fn), sc


def outer_major(s: torch.Tensor) -> torch.Tensor:
    """[M, K/128] scales in the layout torch._scaled_mm takes for 1x128 blocks (stride (1, M)):
    a view when they already are (arfusion's MN-major buffer when M % 4 == 0), else a copy."""
    m = s.shape[0]
    if s.stride(0) == 1 and (s.shape[1] == 1 or s.stride(1) == m):
        return s
    return s.t().contiguous().t()


def fp8_gemm(q, s, w8, ws, mode):
    """bf16 [M, N] = (q * s) @ (w8 * ws)^T with torch._scaled_mm (cuBLASLt).

    Per group, M is padded to M' = round_up(M, 4) (zero rows of scale 1, their output rows
    dropped), so the outer-dim-major 1x128 scales' leading dimension spans whole 16 bytes, which
    cuBLASLt's block scaling is reported to need: unpadded, torch 2.11 on an H200 refused the
    probe's GEMMs (M in [1, 32]) with CUBLAS_STATUS_NOT_SUPPORTED. Every variant pads the same
    way, so they compare the same GEMM."""
    if mode == "per_group":
        m = q.shape[0]
        pad = -m % 4
        if pad:
            q = F.pad(q.view(torch.uint8), (0, 0, 0, pad)).view(q.dtype)
            s = F.pad(s.t(), (0, pad), value=1.0).t()   # [M', K/128], strides (1, M')
        out = torch._scaled_mm(q, w8.t(), outer_major(s), ws.t(), out_dtype=torch.bfloat16)
        return out[:m] if pad else out
    return torch._scaled_mm(q, w8.t(), s, ws.view(1, -1), out_dtype=torch.bfloat16)


# ---- the model's pieces --------------------------------------------------------------------------


def llama_norm(x, w, eps):
    """Hugging Face LlamaRMSNorm: fp32 statistics, round to bf16, then times the weight."""
    h = x.to(torch.float32)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)
    return w * h.to(x.dtype)


def ar_add_norm(x, residual, w, S: Static, quant: bool):
    """The site: all-reduce(x) (+ residual) -> RMSNorm (-> FP8). Returns (h, h_scale, residual):
    h the bf16 norm (h_scale None) or the e4m3 quantized norm and its scales."""
    if S.ar == "fused":
        if quant:
            if S.fp8 == "per_group":
                q, s, r, _ = torch.ops.arfusion.fused_add_rms_norm_quant(
                    x, residual, w, None, S.eps, S.comm, "fp8_per_group", "mn_major", "fp32",
                    False, False, "before_weight", S.algorithm, 0, SCALE_RULE)
                return q, s.t()[:x.shape[0]], r     # logical [T, H/128] view of [H/128, Tp]
            q, s, r, _ = torch.ops.arfusion.fused_add_rms_norm_quant(
                x, residual, w, None, S.eps, S.comm, "fp8_per_token", "row_major", "fp32",
                False, False, "before_weight", S.algorithm, 0, SCALE_RULE)
            return q, s, r
        if residual is None or not S.inplace:   # first site: residual_out = the all-reduce
            y, r = torch.ops.arfusion.fused_add_rms_norm_out(
                x, residual, w, S.eps, S.comm, False, "before_weight", S.algorithm)
            return y, None, r
        torch.ops.arfusion.fused_add_rms_norm(x, residual, w, S.eps, S.comm, False,
                                              "before_weight", S.algorithm)
        return x, None, residual
    if S.ar == "c10d":
        dist.all_reduce(x)
    elif S.ar == "gloo_copy":   # (a') on a shared GPU: NCCL cannot put two ranks on one GPU
        y = x.cpu()
        dist.all_reduce(y, group=_CPU_GROUP)
        x.copy_(y)
    elif S.ar == "arf_ar":
        x = torch.ops.arfusion.all_reduce(x, S.comm)
    else:
        raise ValueError(f"all-reduce mode {S.ar!r}")
    r = x if residual is None else x + residual
    y = llama_norm(r, w, S.eps)
    if quant:
        q, s = torch_quant(y, S.fp8)
        return q, s, r
    return y, None, r


def _rotate_half(x):
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def _rotary(x, cos, sin):
    return x * cos + _rotate_half(x) * sin


def attention(qkv, kc, vc, cos, sin, positions, mask, S: Static):
    """Rotary, KV cache write at `positions`, SDPA. Decode: every sequence of the batch at the
    same position, attending to the whole static cache through `mask` (positions <= current);
    the query heads of a KV group are the query rows of one SDPA head (no KV expansion). Prefill:
    one sequence of M tokens at positions 0..M-1, causal within itself."""
    m = qkv.shape[0]
    D, nq, nkv = S.head_dim, S.nq, S.nkv
    q = qkv[:, :nq * D].view(m, nq, D)
    k = qkv[:, nq * D:(nq + nkv) * D].view(m, nkv, D)
    v = qkv[:, (nq + nkv) * D:].view(m, nkv, D)
    if S.phase == "decode":
        c, s = cos.view(1, 1, D), sin.view(1, 1, D)
        q = _rotary(q, c, s)
        k = _rotary(k, c, s)
        kc[:, :, positions] = k.unsqueeze(2)
        vc[:, :, positions] = v.unsqueeze(2)
        out = F.scaled_dot_product_attention(q.view(m, nkv, S.group, D), kc, vc, attn_mask=mask)
        return out.reshape(m, nq * D)
    c, s = cos.view(m, 1, D), sin.view(m, 1, D)
    q = _rotary(q, c, s)
    k = _rotary(k, c, s)
    kt = k.transpose(0, 1).unsqueeze(0)      # [1, nkv, M, D]
    vt = v.transpose(0, 1).unsqueeze(0)
    kc[:, :, positions] = kt
    vc[:, :, positions] = vt
    qt = q.transpose(0, 1).unsqueeze(0)      # [1, nq, M, D]
    out = F.scaled_dot_product_attention(qt, kt.repeat_interleave(S.group, dim=1),
                                         vt.repeat_interleave(S.group, dim=1), is_causal=True)
    return out[0].transpose(0, 1).reshape(m, nq * D)


def _linear_in(h, hs, w, w8, ws, S: Static):
    if S.fp8 is not None:
        return fp8_gemm(h, hs, w8, ws, S.fp8)
    return F.linear(h, w)


def attn_partial(h, hs, qkv_w, o_w, qkv8, qkv_s, kc, vc, cos, sin, positions, mask, S: Static):
    """QKV (column-parallel), attention over this rank's heads, o_proj (row-parallel): this
    rank's partial sum of the attention output."""
    qkv = _linear_in(h, hs, qkv_w, qkv8, qkv_s, S)
    return F.linear(attention(qkv, kc, vc, cos, sin, positions, mask, S), o_w)


def mlp_partial(h, hs, gu_w, down_w, gu8, gu_s, S: Static):
    """gate/up (column-parallel), SwiGLU, down (row-parallel): this rank's partial sum."""
    gu = _linear_in(h, hs, gu_w, gu8, gu_s, S)
    act = F.silu(gu[:, :S.ffn_local]) * gu[:, S.ffn_local:]
    return F.linear(act, down_w)


def embed_partial(ids, emb_w, S: Static):
    """Vocab-parallel embedding: this rank's rows, +0 for tokens outside its vocabulary range."""
    local = ids - S.vocab_start
    ok = (local >= 0) & (local < S.vocab_local)
    e = F.embedding(torch.where(ok, local, torch.zeros_like(local)), emb_w)
    return e.masked_fill(~ok.unsqueeze(-1), 0.0)


def layer_step(h, hs, residual, qkv_w, o_w, gu_w, down_w, norm2_w, next_w, qkv8, qkv_s, gu8,
               gu_s, kc, vc, cos, sin, positions, mask, *, S: Static, quant_next: bool):
    o = attn_partial(h, hs, qkv_w, o_w, qkv8, qkv_s, kc, vc, cos, sin, positions, mask, S)
    h2, hs2, residual = ar_add_norm(o, residual, norm2_w, S, quant=S.fp8 is not None)
    d = mlp_partial(h2, hs2, gu_w, down_w, gu8, gu_s, S)
    return ar_add_norm(d, residual, next_w, S, quant=quant_next)


def embed_step(ids, emb_w, first_w, *, S: Static):
    return ar_add_norm(embed_partial(ids, emb_w, S), None, first_w, S, quant=S.fp8 is not None)


def make_static(dims, tp, rank, *, comm_name, ar, algorithm, fp8, phase, inplace=True) -> Static:
    return Static(hidden=dims.hidden, nq=dims.heads // tp, nkv=dims.kv_heads // tp,
                  head_dim=dims.head_dim, group=dims.heads // dims.kv_heads,
                  ffn_local=dims.ffn // tp, vocab_start=rank * (dims.vocab // tp),
                  vocab_local=dims.vocab // tp, eps=dims.eps, ar=ar, inplace=inplace,
                  comm=comm_name, algorithm=algorithm, fp8=fp8, phase=phase)


def _bind_embed(S):
    def embed(ids, emb_w, first_w):
        return embed_step(ids, emb_w, first_w, S=S)
    return embed


def _bind_layer(S, quant_next):
    def layer(h, hs, residual, qkv_w, o_w, gu_w, down_w, norm2_w, next_w, qkv8, qkv_s, gu8, gu_s,
              kc, vc, cos, sin, positions, mask):
        return layer_step(h, hs, residual, qkv_w, o_w, gu_w, down_w, norm2_w, next_w, qkv8, qkv_s,
                          gu8, gu_s, kc, vc, cos, sin, positions, mask, S=S,
                          quant_next=quant_next)
    return layer


class Runner:
    """One variant in one phase: embed + L layers (+ the final norm), eager or compiled.

    compiled variants: one torch.compile per function (embedding site, middle layer, last layer
    when it differs), fullgraph, static shapes; each with its own AllReduceFusionPass where the
    variant has the pass, so `passes` says per function what the pass did on every graph."""

    def __init__(self, *, variant, phase, weights: Weights, dims, tp, rank, comm_name, ar_mode,
                 fp8_mode, layers):
        self.S = make_static(dims, tp, rank, comm_name=comm_name, ar=ar_mode,
                             algorithm=variant.algorithm, fp8=fp8_mode if variant.fp8 else None,
                             phase=phase, inplace=variant.inplace)
        self.W = weights
        self.layers = layers
        fp8 = self.S.fp8 is not None
        embed = _bind_embed(self.S)
        mid = _bind_layer(self.S, quant_next=fp8)
        last = _bind_layer(self.S, quant_next=False) if fp8 else mid
        self.passes: dict[str, object] = {}
        if variant.compiled:
            import arfusion.torch as aft

            def comp(fn, key):
                options = {}
                if variant.fusion_pass:
                    p = aft.AllReduceFusionPass(comm_name)
                    self.passes[key] = p
                    options = {"post_grad_custom_post_pass": p}
                return torch.compile(fn, fullgraph=True, dynamic=False, options=options)

            embed = comp(embed, "embed")
            cmid = comp(mid, "mid")
            last = comp(last, "last") if fp8 else cmid
            mid = cmid
        self.embed, self.mid, self.last = embed, mid, last
        # what every graph of each function must contain: (all-reduce sites, FP8 tails)
        self.expected = {"embed": (1, 1 if fp8 else 0), "mid": (2, 2 if fp8 else 0)}
        if fp8:
            self.expected["last"] = (2, 1)
        # the functions forward() calls (with L = 1 and FP8 only the last layer's)
        self.used = {"embed", "last" if fp8 else "mid"} | ({"mid"} if layers > 1 else set())

    def forward(self, ids, positions, caches, cos, sin, mask):
        W = self.W
        h, hs, r = self.embed(ids, W.emb, W.norm1)
        L = self.layers
        for i in range(L):
            last = i == L - 1
            fn = self.last if last else self.mid
            kc, vc = caches[i]
            h, hs, r = fn(h, hs, r, W.qkv, W.o, W.gu, W.down, W.norm2, W.normf if last else W.norm1,
                          W.qkv8, W.qkv_s, W.gu8, W.gu_s, kc, vc, cos, sin, positions, mask)
        return h


def ar_mode_of(variant, nccl: bool) -> str:
    """How a variant's model code all-reduces here: (a)/(e_a) eager without NCCL becomes (a')."""
    if variant.ar == "c10d" and not variant.compiled and not nccl:
        return "gloo_copy"
    return variant.ar


def pass_check(runner: Runner) -> tuple[bool, str]:
    """Every graph the pass saw: all its all-reduces replaced, none rejected, the norm recognised
    as LlamaRMSNorm (before_weight), the expected number of FP8 tails fused."""
    problems, seen = [], []
    if not runner.passes:
        return True, "no pass"
    for key, p in runner.passes.items():
        if key not in runner.used:
            continue
        want_ar, want_q = runner.expected[key]
        if not p.history:
            problems.append(f"{key}: the pass never ran (a compile cache hit or no graph)")
        for i, st in enumerate(p.history):
            kinds = dict(st.kinds)
            quant = sum(n for k, n in kinds.items() if "+fp8_" in k)
            seen.append(f"{key}[{i}]: {st.replaced}/{st.all_reduces} replaced, kinds {kinds}")
            if st.all_reduces != want_ar or st.replaced != want_ar:
                problems.append(f"{key}[{i}]: {st.replaced} of {st.all_reduces} all-reduces replaced,"
                                f" expected {want_ar} of {want_ar}")
            if st.rejected:
                problems.append(f"{key}[{i}]: rejected {st.rejected}")
            if quant != want_q:
                problems.append(f"{key}[{i}]: {quant} FP8 tails fused, expected {want_q}")
            if any("/before_weight" not in k for k in kinds):
                problems.append(f"{key}[{i}]: a norm not matched as before_weight: {kinds}")
    return not problems, "; ".join(problems or seen)


def pass_summaries(runner: Runner) -> dict:
    return {key: [st.summary() for st in p.history] for key, p in runner.passes.items()}
