"""FP8 tails after the norm: the forms the pass fuses (as models, engines and torchao write them),
their q and scales against the contract with the pass's scale rule, and the forms it leaves unfused
with the step that differs, shown on CPU tensors to change bits."""

from __future__ import annotations

import unittest

import torch

import cpu_kernels
import forms as fm
from harness import BF16, TORCH_VERSION, PassTestCase, graph, make_pass, randn, run

ref = cpu_kernels.ref
T, H = 16, 512
X = ((T, H), BF16)
W = ((H,), BF16)
SCALE = ((1,), torch.float32)


def with_tail(tail, norm=fm.llama, return_norm=True):
    def fn(x, r, w):
        s = fm.ar(x) + r
        n = norm(s, w)
        return ((n,) if return_norm else ()) + tuple(tail(n)) + (s,)
    fn.__name__ = f"{norm.__name__}+{tail.__name__}"
    return fn


def static_tail(x, r, w, scale):
    s = fm.ar(x) + r
    n = fm.llama(s, w)
    return n, fm.static(n, scale), s


class FusedTails(PassTestCase):
    # (tail, kind, contract quantizer of the rounded norm)
    CASES = [
        (fm.per_token, "fp8_per_token", lambda n: ref.fp8_per_token(n, "times_reciprocal")),
        (fm.per_token_bf16_amax, "fp8_per_token", lambda n: ref.fp8_per_token(n, "times_reciprocal")),
        (fm.per_token_times_reciprocal, "fp8_per_token",
         lambda n: ref.fp8_per_token(n, "times_reciprocal")),
        (fm.per_group, "fp8_per_group", lambda n: ref.fp8_per_group(n, "fp32", "times_reciprocal")[:2]),
        (fm.per_group_minus_one, "fp8_per_group",
         lambda n: ref.fp8_per_group(n, "fp32", "times_reciprocal")[:2]),
        (fm.vllm_group_native, "fp8_per_group",
         lambda n: ref.fp8_per_group(n, "fp32", "times_reciprocal")[:2]),
    ]

    def test_fused_with_the_norm(self):
        for i, (tail, kind, contract) in enumerate(self.CASES):
            fn = with_tail(tail)
            with self.subTest(fn.__name__):
                p = make_pass()
                graph(fn, [X, X, W], p)
                self.assertReplaced(p, 1, f"+{kind}")
                inputs = [randn((T, H), 300 + 3 * i), randn((T, H), 301 + 3 * i),
                          randn((H,), 302 + 3 * i)]
                p = make_pass()
                got, want = run(fn, inputs, p), fn(*inputs)
                self.assertReplaced(p, 1, f"+{kind}")
                self.assertBits(got[0], want[0], "norm")
                self.assertBits(got[-1], want[-1], "residual")
                q, s = contract(want[0])
                self.assertBits(got[1], q.reshape(got[1].shape), "q")
                self.assertBits(got[2], s.reshape(got[2].shape), "scales")

    def test_static_per_tensor(self):
        specs = [X, X, W, SCALE]
        p = make_pass()
        graph(static_tail, specs, p)
        self.assertReplaced(p, 1, "+fp8_per_tensor")
        inputs = [randn((T, H), 400), randn((T, H), 401), randn((H,), 402),
                  torch.tensor([0.05], dtype=torch.float32)]
        p = make_pass()
        got, want = run(static_tail, inputs, p), static_tail(*inputs)
        self.assertReplaced(p, 1, "+fp8_per_tensor")
        for a, b, what in zip(got, want, ("norm", "q", "residual")):
            self.assertBits(a, b, what)

    def test_quant_only_reader_of_a_once_rounded_norm(self):
        """Gemma's norm (one rounding) read by the FP8 tail alone: torch 2.15's Inductor keeps the
        round trip through bf16 and the tail fuses; torch 2.10's folds it, so the tail reads the
        unrounded fp32 norm, and the pass fuses the all-reduce and the residual add only."""
        fn = with_tail(fm.per_token, norm=fm.gemma, return_norm=False)
        p = make_pass()
        graph(fn, [X, X, W], p)
        if TORCH_VERSION < (2, 11):
            self.assertReplaced(p, 1, "+add_only")
            self.assertNote(p, "read unrounded in fp32", "only the all-reduce and the residual add")
        else:
            self.assertReplaced(p, 1, "+fp8_per_token")
        inputs = [randn((T, H), 500), randn((T, H), 501), randn((H,), 502)]
        p = make_pass()
        got, want = run(fn, inputs, p), fn(*inputs)
        self.assertEqual(p.stats.replaced, 1, p.stats.summary())
        self.assertBits(got[-1], want[-1], "residual")


class UnfusedTails(PassTestCase):
    CASES = [
        (fm.vllm_native_per_token, "scale.reciprocal()"),
        (fm.torchao_rowwise, "inverse scale"),
        (fm.sglang_native_per_token, "rounds its values to torch.bfloat16"),
        (fm.floor_on_amax, "floor is applied to the amax before the division"),
        (fm.sglang_native_per_tensor, "whole tensor"),
        (fm.per_token_other_floor, "scale floor 1e-12"),
        (fm.per_group_64, "groups of 64"),
        (fm.per_group_ue8m0_exp2, "exp2(ceil(log2"),
    ]

    def test_the_norm_fuses_the_tail_stays_with_its_cause(self):
        for tail, cause in self.CASES:
            fn = with_tail(tail)
            with self.subTest(fn.__name__):
                p = make_pass()
                graph(fn, [X, X, W], p)
                self.assertReplaced(p, 1, "residual/")
                self.assertFalse(any("fp8" in k for k in p.stats.kinds), p.stats.summary())
                self.assertNote(p, "an FP8 tail follows the norm but stays unfused", cause)

    def test_opaque_quant_op_is_noted(self):
        def fn(x, r, w):
            s = fm.ar(x) + r
            n = fm.llama(s, w)
            q = torch.empty(n.shape, dtype=torch.float8_e4m3fn, device=n.device)
            sc = torch.empty((n.shape[0], 1), dtype=torch.float32, device=n.device)
            torch.ops._C.dynamic_per_token_scaled_fp8_quant(q, n, sc, None)
            return q, sc, s

        p = make_pass()
        graph(fn, [X, X, W], p)
        self.assertReplaced(p, 1, "residual/")
        self.assertNote(p, "_C.dynamic_per_token_scaled_fp8_quant", "opaque quantization op")

    def test_the_refused_arithmetic_changes_bits(self):
        """Why each refused step cannot be fused, on CPU tensors: for every bf16 x up to amax (all
        of them), the refused arithmetic and arfusion's (scale = max(amax * RN(1/448), 2^-9/448),
        q = e4m3(x / scale)) give different q or scales for some amax."""
        every = torch.arange(0x0080, 0x7F80, dtype=torch.int32).to(torch.int16).view(BF16).float()
        amaxes = every[::97]
        diffs = {"x * scale.reciprocal()": 0, "448 / amax": 0, "floor on amax": 0}
        for amax in amaxes.tolist():
            x = every[every <= amax]
            a = torch.tensor([amax], dtype=torch.float32)
            s = torch.maximum(a * ref.F8_MAX_RECIPROCAL, ref.MIN_FP8_SCALE)
            q = ref.e4m3(x / s).view(torch.uint8)
            diffs["x * scale.reciprocal()"] += int((ref.e4m3(x * s.reciprocal()).view(torch.uint8)
                                                    != q).sum())
            inverse = (448.0 / torch.clamp(a.double(), min=1e-12)).float()
            diffs["448 / amax"] += int((ref.e4m3(x * inverse).view(torch.uint8) != q).sum())
            floored = torch.clamp(a, min=1e-12) * ref.F8_MAX_RECIPROCAL
            diffs["floor on amax"] += int((floored != s).sum())
        for what, n in diffs.items():
            self.assertGreater(n, 0, what)

    def test_bf16_amax_is_the_fp32_amax(self):
        """The bf16 amax then converted (a fused form) is the fp32 amax, bit for bit: |x| and max
        are exact."""
        n = randn((256, H), 700)
        a16 = n.abs().max(dim=-1)[0].unsqueeze(-1).float()
        a32 = n.float().abs().amax(dim=-1, keepdim=True)
        self.assertBits(a16, a32, "amax")


if __name__ == "__main__":
    unittest.main()
