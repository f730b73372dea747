"""Hugging Face models (transformers from PyPI, their own modeling files), tensor-parallel-shaped
as their TP plans are applied (hf_models.py), compiled with the pass: what it fuses and leaves in
each, checked against the table in docs/compile_pass_models.md (so that the table cannot go stale),
and a few of them run on the CPU against the eager model."""

from __future__ import annotations

import os
import unittest

import torch

import cpu_kernels
import hf_models
from harness import PYTHON_DIR, PassTestCase, compile_cpu, graph, make_pass
from test_sandwich import sandwich_offered

try:
    import transformers  # noqa: F401
except ImportError:  # pragma: no cover - depends on the environment
    raise unittest.SkipTest("transformers is not installed")

REPO = os.path.abspath(os.path.join(PYTHON_DIR, ".."))


def trace(name):
    p = make_pass()
    graph(hf_models.forward_fn(hf_models.build(name)), [hf_models.token_ids()], p)
    return p.stats


class Models(PassTestCase):
    def test_table_matches_the_documented_one(self):
        """Every model's all-reduces, fused and left with their reasons, as documented (regenerate
        with `python3 python/tests/torch_cpu/hf_models.py --write` and review the change)."""
        got = hf_models.table(trace)
        self.assertEqual(got, hf_models.documented_table(REPO),
                         "the pass's outcome on the models differs from " + hf_models.DOC)

    def test_required_families_fuse(self):
        stats = {name: trace(name) for name in ("Llama", "Qwen3-MoE", "Gemma3", "OLMo2")}
        self.assertEqual(stats["Llama"].replaced, 5, stats["Llama"].summary())
        self.assertTrue(any("+view" in k for k in stats["Qwen3-MoE"].kinds),
                        stats["Qwen3-MoE"].summary())
        self.assertEqual(stats["Qwen3-MoE"].replaced, 5, stats["Qwen3-MoE"].summary())
        self.assertTrue(any("[sandwich]" in k for k in stats["Gemma3"].kinds))
        self.assertTrue(any("[post_norm]" in k for k in stats["OLMo2"].kinds))


class ModelRuns(PassTestCase):
    """The compiled model (the pass's fused ops running through cpu_kernels.py) against the eager
    one. Not bit for bit: Inductor's own kernels for the unfused parts (attention, matmuls, the
    means of norms it keeps) sum in other orders; within 5% of the largest logit, which a wiring
    fault exceeds (the negative control drops the residual from the fused op's sum)."""

    TOLERANCE = 0.05

    def _compare(self, name, mutant_check=False, **pass_options):
        model = hf_models.build(name)
        fn = hf_models.forward_fn(model)
        ids = hf_models.token_ids(seed=3)
        p = make_pass(**pass_options)
        compiled = compile_cpu(fn, p)
        with torch.no_grad():
            got = compiled(ids)
            want = fn(ids)
        scale = float(want.float().abs().max())
        err = float((got.float() - want.float()).abs().max()) / scale
        self.assertGreater(p.stats.replaced, 0, p.stats.summary())
        self.assertLessEqual(err, self.TOLERANCE, f"{name}: {err:.4f} of the largest logit")
        if mutant_check:  # the same compiled model, its fused ops' kernel faulty
            cpu_kernels.MUTANT = "drop_residual"
            try:
                with torch.no_grad():
                    bad = compiled(ids)
            finally:
                cpu_kernels.MUTANT = None
            bad_err = float((bad.float() - want.float()).abs().max()) / scale
            self.assertGreater(bad_err, self.TOLERANCE, f"{name}: the fault is not seen")
        return p.stats

    def test_llama(self):
        self._compare("Llama", mutant_check=True)

    def test_qwen3_moe(self):
        self._compare("Qwen3-MoE")

    def test_gemma3(self):
        self._compare("Gemma3")

    def test_gemma3_sandwich_calls(self):
        """post_norm="sandwich" with the library's opt-in: every sandwich of the model is one call
        (the first layer's input norm stays a first-layer call), and the model still agrees."""
        with sandwich_offered():
            stats = self._compare("Gemma3", mutant_check=True, post_norm="sandwich")
        sandwiches = sum(n for k, n in stats.kinds.items() if k.startswith("sandwich/"))
        marked = sum(n for k, n in trace("Gemma3").kinds.items() if "[sandwich]" in k)
        self.assertEqual((sandwiches, marked), (4, 4), stats.summary())
        self.assertFalse(any("[sandwich]" in k for k in stats.kinds), stats.summary())


if __name__ == "__main__":
    unittest.main()
