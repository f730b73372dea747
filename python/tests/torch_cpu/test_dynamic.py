"""Dynamic token counts (as engines compile): fused within a known bound, with the views and FP8
scales the fused op needs in symbolic shapes, and left with the reason without a bound."""

from __future__ import annotations

import unittest

import torch

import cpu_kernels
import forms as fm
from harness import PassTestCase, compile_cpu, make_pass, randn

ref = cpu_kernels.ref
H = 512


def llama_site(x, r, w):
    s = fm.ar(x) + r
    return fm.llama(s, w), s


def moe_view_site(x, r, w):
    """The experts' [B*S, H] sum viewed as the residual's [B, S, H] (B symbolic)."""
    s = r + fm.ar(x).view(r.shape)
    return fm.llama(s, w), s


def per_group_site(x, r, w):
    s = fm.ar(x) + r
    n = fm.llama(s, w)
    return (n,) + tuple(fm.per_group_minus_one(n)) + (s,)


def _inputs(shape_x, shape_r, seed, bound, related=False):
    """x, r, w with the leading dims dynamic (bounded by `bound`, unless None). related: x's rows
    are a multiple of r's leading dim (maybe_mark_dynamic: Dynamo relates the two symbols)."""
    x, r, w = randn(shape_x, seed), randn(shape_r, seed + 1), randn((H,), seed + 2)
    for t in (x, r):
        if related:
            torch._dynamo.maybe_mark_dynamic(t, 0)
        elif bound is None:
            torch._dynamo.mark_dynamic(t, 0)
        else:
            torch._dynamo.mark_dynamic(t, 0, min=2, max=bound)
    return [x, r, w]


class DynamicTokens(PassTestCase):
    def _check(self, fn, shapes, kinds, extra=None, related=False):
        p = make_pass(assume_max_tokens=related)
        compiled = compile_cpu(fn, p, dynamic=None)
        for i, (sx, sr) in enumerate(shapes):
            inputs = _inputs(sx, sr, 900 + 10 * i, 64, related)
            with torch.no_grad():
                got, want = compiled(*inputs), fn(*inputs)
            for k, (a, b) in enumerate(zip(got, want)):
                if extra is not None and k in extra:
                    extra[k](self, a, got, want)
                else:
                    self.assertBits(a, b, f"{fn.__name__} {sx}: output {k}")
        self.assertGreaterEqual(p.stats.graphs, 1, p.stats.summary())
        self.assertEqual(p.stats.replaced, p.stats.graphs, p.stats.summary())
        self.assertReplaced(p, p.stats.graphs, *kinds)

    def test_bounded_token_count_fuses(self):
        self._check(llama_site, [((16, H), (16, H)), ((40, H), (40, H))], ["residual/"])

    def test_symbolic_view_of_the_sum(self):
        self._check(moe_view_site, [((16, H), (2, 8, H)), ((40, H), (5, 8, H))], ["+view"],
                    related=True)

    def test_per_group_scales_in_symbolic_shapes(self):
        def q_ok(case, q, got, want):
            qr, _, _ = ref.fp8_per_group(want[0], "fp32", "times_reciprocal")
            case.assertBits(q, qr.reshape(q.shape), "q")

        def s_ok(case, s, got, want):
            _, sr, _ = ref.fp8_per_group(want[0], "fp32", "times_reciprocal")
            case.assertBits(s, sr.reshape(s.shape), "scales")

        self._check(per_group_site, [((16, H), (16, H)), ((40, H), (40, H))], ["+fp8_per_group"],
                    extra={1: q_ok, 2: s_ok})

    def test_unbounded_token_count_is_left_with_the_reason(self):
        p = make_pass()
        compiled = compile_cpu(llama_site, p, dynamic=None)
        with torch.no_grad():
            compiled(*_inputs((16, H), (16, H), 950, None))
        self.assertReplaced(p, 0)
        self.assertLeft(p, "upper bound", count=p.stats.all_reduces)

    def test_unbounded_with_assume_max_tokens_fuses(self):
        p = make_pass(assume_max_tokens=True)
        compiled = compile_cpu(llama_site, p, dynamic=None)
        inputs = _inputs((16, H), (16, H), 960, None)
        with torch.no_grad():
            got, want = compiled(*inputs), llama_site(*inputs)
        self.assertReplaced(p, 1)
        for a, b in zip(got, want):
            self.assertBits(a, b, "assume_max_tokens")


if __name__ == "__main__":
    unittest.main()
