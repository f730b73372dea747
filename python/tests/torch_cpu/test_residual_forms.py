"""What stands between the all-reduce and the norm: views (fused), the fp32 residual add of engines'
native norms (fused on request), post-norm sites (fused as a first-layer call, noted), and the
forms the fused op cannot express (refused with the real cause), with a CPU proof of the rounding
that forbids them."""

from __future__ import annotations

import unittest

import torch
import torch.distributed as dist

import cpu_kernels
import forms as fm
from harness import BF16, PassTestCase, graph, make_pass, randn, run, targets

B, S, H = 2, 8, 512
T = B * S
X = ((T, H), BF16)
R3 = ((B, S, H), BF16)
R = ((T, H), BF16)
W = ((H,), BF16)


def moe_reshape(x, r, w):
    """Qwen-MoE / Mixtral blocks all-reduce the experts' [B*S, H] sum and reshape it to [B, S, H]
    before the decoder layer's residual add."""
    s = r + fm.ar(x).reshape(B, S, H)
    return fm.llama(s, w), s


def vllm_moe_view(routed, shared, r, w):
    """vLLM's Qwen2-MoE block: the routed experts' output plus the gated shared expert's, summed
    over ranks with vllm.all_reduce, then .view(orig_shape) (a no-op view here: vLLM flattens
    tokens). The experts' outputs are inputs here: the sum of two bf16 tensors rounds once, eagerly
    and compiled alike."""
    out = torch.ops.vllm.all_reduce(routed + shared, "tp:0").view(T, H)
    s = out + r
    return fm.llama(s, w), s


def hf_qwen2_moe(x, g, r, w):
    """Hugging Face's Qwen2-MoE under an all-reduce expert plan: the routed experts' sum is
    all-reduced, then the gated shared expert (computed after it) is added, then the reshape."""
    routed = fm.ar(x)
    shared = torch.sigmoid(g) * x
    s = r + (routed + shared).reshape(B, S, H)
    return fm.llama(s, w), s


def bias_then_residual(x, b, r, w):
    """A row-parallel layer with bias (transformers' RowwiseParallel: all_reduce, then + bias)."""
    s = r + (fm.ar(x) + b)
    return fm.llama(s, w), s


def bias_first_layer(x, b, w):
    s = fm.ar(x) + b
    return fm.llama(s, w), s


def vllm_native_implicit(x, r, w):
    """vLLM's RMSNorm.forward_static: x = x.to(float32); x = x + residual (promoted by the add);
    residual = x.to(orig_dtype); the norm reads the fp32 sum."""
    h = fm.ar(x).to(torch.float32)
    h = h + r
    res = h.to(BF16)
    h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + fm.EPS)
    return h.to(BF16) * w, res


def sglang_native_explicit(x, r, w):
    """SGLang's RMSNorm.forward_native: x.to(float32) + residual.to(float32)."""
    h = fm.ar(x).to(torch.float32)
    h = h + r.to(torch.float32)
    res = h.to(BF16)
    h = h * torch.rsqrt(h.pow(2).mean(dim=-1, keepdim=True) + fm.EPS)
    return h.to(BF16) * w, res


def residual_multiplier(x, r, w):
    """Granite: residual + hidden_states * residual_multiplier."""
    s = r + fm.ar(x) * 0.22
    return fm.llama(s, w), s


def fp32_residual_stream(x, r32, w):
    s = r32 + fm.ar(x)
    return fm.llama(s.to(BF16), w), s


def all_reduce_input_in_place(x, r, w):
    """dist.all_reduce on the graph's input: the sum is also copied back into it."""
    dist.all_reduce(x)
    s = x + r
    return fm.llama(s, w), s


def first_layer_input_in_place(x, w):
    dist.all_reduce(x)
    return fm.llama(x, w), x


def gemma_sandwich(x, r, w1, w2):
    """Gemma 2/3: post_attention_layernorm(attn) + residual, then pre_feedforward_layernorm."""
    h = fm.gemma(fm.ar(x), w1)
    s = r + h
    return h, s, fm.gemma(s, w2)


def olmo2_post_norm(x, r, w):
    """OLMo 2: post_attention_layernorm(attn) + residual, no norm before the MLP."""
    s = r + fm.olmo2(fm.ar(x), w)
    return s


class Views(PassTestCase):
    def test_moe_reshape_fuses(self):
        p = make_pass()
        gm = graph(moe_reshape, [X, R3, W], p)
        self.assertReplaced(p, 1, "residual/", "+view")
        self.assertIn("arfusion.fused_add_rms_norm_out.default", targets(gm))
        inputs = [randn((T, H), 1), randn((B, S, H), 2), randn((H,), 3)]
        p = make_pass()
        got, want = run(moe_reshape, inputs, p), moe_reshape(*inputs)
        self.assertReplaced(p, 1, "+view")
        for a, b in zip(got, want):
            self.assertBits(a, b, "moe reshape")

    def test_vllm_moe_sum_and_view_fuses(self):
        p = make_pass()
        graph(vllm_moe_view, [X, X, R, W], p)
        self.assertReplaced(p, 1, "residual/")
        inputs = [randn((T, H), 4), randn((T, H), 5), randn((T, H), 6), randn((H,), 7)]
        p = make_pass()
        got, want = run(vllm_moe_view, inputs, p), vllm_moe_view(*inputs)
        self.assertReplaced(p, 1, "residual/")
        for a, b in zip(got, want):
            self.assertBits(a, b, "vLLM MoE")

    def test_shared_expert_added_after_the_sum_is_refused(self):
        p = make_pass()
        graph(hf_qwen2_moe, [X, X, R3, W], p)
        self.assertReplaced(p, 0)
        self.assertLeft(p, "computed after the all-reduce", "shared expert")


class Bias(PassTestCase):
    def test_bias_before_the_residual_add_is_refused(self):
        cases = ((bias_then_residual, [X, W, R, W], "two roundings"),
                 (bias_first_layer, [X, W, W], "without a residual add"))
        for fn, specs, cause in cases:
            with self.subTest(fn.__name__):
                p = make_pass()
                graph(fn, specs, p)
                self.assertReplaced(p, 0)
                self.assertLeft(p, "bias", cause)

    def test_no_placement_of_the_bias_keeps_the_bits(self):
        """The reason of the refusal, on CPU tensors: the unfused graph's residual is
        round(round(S + b) + r); the fused op can make round(S' + r') only, and neither the bias in
        the residual (r' = round(r + b)) nor in one rank's input (S' = round(x0 + b) + x1 ...)
        gives the same bits."""
        x0, x1 = randn((T, H), 11), randn((T, H), 12)
        b, r = randn((H,), 13, scale=0.5), randn((T, H), 14)
        s = (x0.float() + x1.float()).to(BF16)
        unfused = ((s + b) + r)
        in_residual = (s.float() + (r + b).float()).to(BF16)
        in_input = (((x0 + b).float() + x1.float()).to(BF16).float() + r.float()).to(BF16)
        self.assertEqual(unfused.dtype, BF16)
        for name, alt in (("bias in the residual", in_residual), ("bias in rank 0's input", in_input)):
            n = int((alt.view(torch.int16) != unfused.view(torch.int16)).sum())
            self.assertGreater(n, 0, name)


class Fp32Residual(PassTestCase):
    def test_native_forms_refused_without_the_option(self):
        for fn in (vllm_native_implicit, sglang_native_explicit):
            with self.subTest(fn.__name__):
                p = make_pass()
                graph(fn, [X, R, W], p)
                self.assertReplaced(p, 0)
                self.assertLeft(p, "fp32_residual_add=True", "unrounded fp32 sum")

    def test_native_forms_fuse_with_the_option(self):
        for i, fn in enumerate((vllm_native_implicit, sglang_native_explicit)):
            with self.subTest(fn.__name__):
                p = make_pass(fp32_residual_add=True)
                graph(fn, [X, R, W], p)
                self.assertReplaced(p, 1, "fp32_residual/")
                inputs = [randn((T, H), 20 + i), randn((T, H), 30 + i), randn((H,), 40 + i)]
                p = make_pass(fp32_residual_add=True)
                got, want = run(fn, inputs, p), fn(*inputs)
                self.assertReplaced(p, 1, "fp32_residual/")
                self.assertBits(got[1], want[1], "the residual")
                # the norm reads the rounded residual: what the contract computes from it
                norm = cpu_kernels.rms_norm(want[1], inputs[2], fm.EPS, False, "before_weight")
                self.assertBits(got[0], norm, "the norm of the rounded residual")


class Refused(PassTestCase):
    def test_causes(self):
        cases = [
            (residual_multiplier, [X, R, W], ["residual multiplier"]),
            (fp32_residual_stream, [X, ((T, H), torch.float32), W], ["fp32 residual stream"]),
            (all_reduce_input_in_place, [X, R, W], ["copy_", "not the bare all-reduce"]),
        ]
        for fn, specs, parts in cases:
            with self.subTest(fn.__name__):
                p = make_pass()
                graph(fn, specs, p)
                self.assertReplaced(p, 0)
                self.assertLeft(p, *parts)

    def test_first_layer_on_an_input_fuses_and_copies_the_sum_back(self):
        p = make_pass()
        graph(first_layer_input_in_place, [X, W], p)
        self.assertReplaced(p, 1, "first_layer/")
        inputs = [randn((T, H), 50), randn((H,), 51)]
        eager_in = [t.clone() for t in inputs]
        p = make_pass()
        got = run(first_layer_input_in_place, inputs, p)
        want = first_layer_input_in_place(*eager_in)
        self.assertReplaced(p, 1)
        for a, b in zip(got, want):
            self.assertBits(a, b, "first layer in place")
        self.assertBits(inputs[0], eager_in[0], "the input holds the sum")


class PostNorm(PassTestCase):
    def test_sandwich_and_post_norm_fuse_as_first_layer_with_a_note(self):
        # outputs compared bit for bit: the fused norm and the residual sum after it (the second
        # norm of the sandwich stays Inductor's, whose fp32 mean may sum in another order)
        cases = [(gemma_sandwich, [X, R, W, W], "sandwich", 2),
                 (olmo2_post_norm, [X, R, W], "post_norm", 1)]
        for i, (fn, specs, which, n_exact) in enumerate(cases):
            with self.subTest(which):
                p = make_pass()
                graph(fn, specs, p)
                self.assertReplaced(p, 1, f"first_layer[{which}]")
                self.assertNote(p, f"a {which} site", "the residual add and the next norm stay")
                inputs = [randn(s, 60 + 10 * i + j, d) for j, (s, d) in enumerate(specs)]
                p = make_pass()
                got, want = run(fn, inputs, p), fn(*inputs)
                self.assertReplaced(p, 1)
                want = want if isinstance(want, tuple) else (want,)
                for a, b in zip(got[:n_exact], want[:n_exact]):
                    self.assertBits(a, b, which)

    def test_post_norm_off_leaves_them_alone(self):
        p = make_pass(post_norm="off")
        graph(gemma_sandwich, [X, R, W, W], p)
        self.assertReplaced(p, 0)
        self.assertLeft(p, "sandwich site", "post_norm='off'")


if __name__ == "__main__":
    unittest.main()
