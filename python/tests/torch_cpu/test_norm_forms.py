"""The norm and residual forms the pass fuses, traced as for a GPU (fake CUDA tensors: the graph
after the pass) and run on the CPU (the compiled model against the eager one, bit for bit: the
fused op's CPU kernel keeps every rounding step of the contract)."""

from __future__ import annotations

import unittest

import torch

import cpu_kernels
import forms as fm
from harness import (BF16, PassTestCase, bits_equal, compile_cpu, graph, make_pass, randn, run,
                     targets)

T, H = 16, 512


def _specs(n_act, extra=()):
    return [((T, H), BF16)] * n_act + list(extra)


W = ((H,), BF16)
W32 = ((H,), torch.float32)


class NormForms(PassTestCase):
    """(name, fn, input specs, expected replacements, substrings of the kind)."""

    CASES = [
        ("F.rms_norm", lambda x, r, w: (lambda s: (fm.f_rms(s, w), s))(fm.ar(x) + r),
         _specs(2, [W]), 1, ["residual/", "/once"]),
        ("F.rms_norm without weight",
         lambda x, r: (lambda s: (torch.nn.functional.rms_norm(s, (H,), None, fm.EPS), s))(fm.ar(x) + r),
         _specs(2), 1, ["/once"]),
        ("LlamaRMSNorm", lambda x, r, w: (lambda s: (fm.llama(s, w), s))(fm.ar(x) + r),
         _specs(2, [W]), 1, ["/before_weight"]),
        ("LlamaRMSNorm with pow(-0.5)",
         lambda x, r, w: (lambda s: (fm.llama_pow(s, w), s))(fm.ar(x) + r),
         _specs(2, [W]), 1, ["/before_weight"]),
        ("Gemma (1 + w)", lambda x, r, w: (lambda s: (fm.gemma(s, w), s))(fm.ar(x) + r),
         _specs(2, [W]), 1, ["(1 + w)"]),
        ("fp32 weight", lambda x, r, w: (lambda s: (fm.fp32_weight(s, w), s))(fm.ar(x) + r),
         _specs(2, [W32]), 1, ["fp32 weight"]),
        ("OLMo 2 (w * x) in fp32", lambda x, r, w: (lambda s: (fm.olmo2(s, w), s))(fm.ar(x) + r),
         _specs(2, [W]), 1, ["x * w in fp32", "/once"]),
        ("residual + all-reduce order", lambda x, r, w: (lambda s: (fm.llama(s, w), s))(r + fm.ar(x)),
         _specs(2, [W]), 1, ["residual/"]),
        ("first layer F.rms_norm", lambda x, w: (lambda s: (fm.f_rms(s, w), s))(fm.ar(x)),
         _specs(1, [W]), 1, ["first_layer/"]),
        ("first layer LlamaRMSNorm", lambda x, w: (lambda s: (fm.llama(s, w), s))(fm.ar(x)),
         _specs(1, [W]), 1, ["first_layer/"]),
        ("two layers", lambda x, r, w: (lambda s1: (lambda s2: (fm.llama(s2, w), s2))(
            fm.ar(fm.llama(s1, w)) + s1))(fm.ar(x) + r), _specs(2, [W]), 2, ["residual/"]),
    ]

    def test_graphs_as_for_a_gpu(self):
        for name, fn, specs, n, kinds in self.CASES:
            with self.subTest(name):
                p = make_pass()
                gm = graph(fn, specs, p)
                self.assertReplaced(p, n, *kinds)
                t = targets(gm)
                self.assertEqual(sum("all_reduce" in s and "fused" not in s for s in t), 0, t)
                self.assertEqual(sum("arfusion.fused_add_rms_norm_out" in s for s in t), n, t)

    def test_cpu_run_equals_eager(self):
        for i, (name, fn, specs, n, kinds) in enumerate(self.CASES):
            with self.subTest(name):
                inputs = [randn(s, 100 + 10 * i + j, d) for j, (s, d) in enumerate(specs)]
                p = make_pass()
                got = run(fn, inputs, p)
                want = fn(*inputs)
                self.assertReplaced(p, n, *kinds)
                for k, (a, b) in enumerate(zip(got, want)):
                    self.assertBits(a, b, f"{name}: output {k}")

    def test_a_rounding_fault_is_seen(self):
        """Negative control: the same comparison with the fused op's CPU kernel rounding the
        Llama norm once (not before the weight) finds different bits."""
        name, fn, specs, n, kinds = self.CASES[2]
        self.assertEqual(name, "LlamaRMSNorm")
        inputs = [randn(s, 90 + j, d) for j, (s, d) in enumerate(specs)]
        compiled = compile_cpu(fn, make_pass())
        cpu_kernels.MUTANT = "round_once"
        try:
            with torch.no_grad():
                got = compiled(*inputs)
        finally:
            cpu_kernels.MUTANT = None
        self.assertFalse(bits_equal(got[0], fn(*inputs)[0]), "the rounding fault is not seen")


if __name__ == "__main__":
    unittest.main()
