"""The sandwich call (post_norm="sandwich"): Gemma 2/3's all-reduce -> post-norm -> residual add ->
next norm (-> FP8 tail) as one fused op with post_weight, its rounding checked bit for bit against
the eager graph on the CPU, the conditions under which the pass keeps the first-layer call instead,
and the library's refusal while the sandwich kernels' GPU verification is pending (the pass then
notes why and fuses the first-layer call)."""

from __future__ import annotations

import contextlib
import os
import unittest

import cpu_kernels
import forms as fm
from harness import BF16, PassTestCase, bits_equal, graph, make_pass, randn, run, targets

T, H = 16, 512
X = ((T, H), BF16)
R = ((T, H), BF16)
W = ((H,), BF16)
SETTING = "ARF_EXPERIMENTAL_SANDWICH"


@contextlib.contextmanager
def sandwich_offered(value="1"):
    """The library's opt-in for sandwich calls (read by its validation at every plan), set for the
    block; None: unset."""
    old = os.environ.get(SETTING)
    if value is None:
        os.environ.pop(SETTING, None)
    else:
        os.environ[SETTING] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(SETTING, None)
        else:
            os.environ[SETTING] = old


def block(x, r, w1, w2):
    """A Gemma 3 decoder layer's end of attention: post_attention_layernorm(o_proj's sum) +
    residual, then pre_feedforward_layernorm."""
    s = r + fm.gemma(fm.ar(x), w1)
    return s, fm.gemma(s, w2)


def block_fp8(x, r, w1, w2):
    """The same with a per-token FP8 quantization of the next norm (an FP8 MLP's input)."""
    s = r + fm.gemma(fm.ar(x), w1)
    n = fm.gemma(s, w2)
    q, sc = fm.per_token(n)
    return s, n, q, sc


def block_post_norm_read(x, r, w1, w2):
    """The post-norm's output h is an output too: the sandwich call never writes h."""
    h = fm.gemma(fm.ar(x), w1)
    s = r + h
    return h, s, fm.gemma(s, w2)


def block_other_eps(x, r, w1, w2):
    s = r + fm.gemma(fm.ar(x), w1)
    y = s.float()
    y = y * (y.pow(2).mean(-1, keepdim=True) + 1e-5).rsqrt()
    return s, (y * (1.0 + w2.float())).type_as(s)


def block_other_norm(x, r, w1, w2):
    """A Gemma post-norm, then a Llama-style next norm (two roundings, no + 1)."""
    s = r + fm.gemma(fm.ar(x), w1)
    return s, fm.llama(s, w2)


def inputs(seed):
    return [randn((T, H), seed), randn((T, H), seed + 1), randn((H,), seed + 2, scale=0.1),
            randn((H,), seed + 3, scale=0.1)]


class SandwichCalls(PassTestCase):
    def test_fuses_the_whole_sandwich_bit_for_bit(self):
        with sandwich_offered():
            p = make_pass(post_norm="sandwich")
            gm = graph(block, [X, R, W, W], p)
            self.assertReplaced(p, 1, "sandwich/")
            self.assertFalse(any("[sandwich]" in k for k in p.stats.kinds), p.stats.summary())
            fused = [t for t in targets(gm) if t.startswith("arfusion.")]
            self.assertEqual(fused, ["arfusion.fused_add_rms_norm_out.default"])
            args = [n for n in gm.graph.nodes if str(n.target) == fused[0]][0].args
            self.assertEqual(len(args), 9, "post_weight is passed")  # ... algorithm, post_weight
            data = inputs(70)
            p = make_pass(post_norm="sandwich")
            got, want = run(block, data, p), block(*data)
            self.assertReplaced(p, 1, "sandwich/")
            for a, b, what in zip(got, want, ("residual_out", "norm_out")):
                self.assertBits(a, b, what)
            # negative control: the same compiled model with its fused op leaving out the residual
            cpu_kernels.MUTANT = "drop_residual"
            try:
                bad = run(block, data, make_pass(post_norm="sandwich"))
            finally:
                cpu_kernels.MUTANT = None
            self.assertFalse(all(bits_equal(a, b) for a, b in zip(bad, want)),
                             "a fused op without the residual gives the same bits")

    def test_fp8_tail_after_the_sandwich(self):
        with sandwich_offered():
            p = make_pass(post_norm="sandwich")
            graph(block_fp8, [X, R, W, W], p)
            self.assertReplaced(p, 1, "sandwich/", "+fp8_per_token")
            data = inputs(80)
            p = make_pass(post_norm="sandwich")
            got, want = run(block_fp8, data, p), block_fp8(*data)
            self.assertReplaced(p, 1, "sandwich/", "+fp8_per_token")
            self.assertBits(got[0], want[0], "residual_out")
            self.assertBits(got[1], want[1], "norm_out")
            # the codes and scales by the contract on the eager norm: the pass asks for torch's GPU
            # arithmetic of amax / 448 (times_reciprocal), which eager CPU code does not use
            q, sc = cpu_kernels.ref.fp8_per_token(want[1], "times_reciprocal")
            self.assertBits(got[2], q.reshape(got[2].shape), "q")
            self.assertBits(got[3], sc.reshape(got[3].shape), "scale")

    def test_not_offered_without_the_setting(self):
        for value in (None, "0"):
            with self.subTest(setting=value), sandwich_offered(value):
                p = make_pass(post_norm="sandwich")
                graph(block, [X, R, W, W], p)
                self.assertReplaced(p, 1, "first_layer[sandwich]")
                self.assertNote(p, "not fused as a sandwich call", "not offered yet")

    def test_default_keeps_the_first_layer_call(self):
        with sandwich_offered():
            p = make_pass()
            graph(block, [X, R, W, W], p)
            self.assertReplaced(p, 1, "first_layer[sandwich]")

    def test_forms_it_cannot_express_keep_the_first_layer_call(self):
        cases = [(block_post_norm_read, "the post-norm's output"),
                 (block_other_eps, "the two norms differ (eps"),
                 (block_other_norm, "the two norms differ")]
        with sandwich_offered():
            for fn, why in cases:
                with self.subTest(fn.__name__):
                    p = make_pass(post_norm="sandwich")
                    graph(fn, [X, R, W, W], p)
                    self.assertReplaced(p, 1, "first_layer[sandwich]")
                    self.assertNote(p, "not fused as a sandwich call", why)
                    data = inputs(90)
                    got, want = run(fn, data, make_pass(post_norm="sandwich")), fn(*data)
                    # the first-layer call's outputs and the residual sum after it are exact
                    self.assertBits(got[-2], want[-2], f"{fn.__name__}: residual sum")


if __name__ == "__main__":
    unittest.main()
