"""The end-to-end decoder's own layer functions (bench/e2e/model.py, variant d: torch.distributed
all-reduces under torch.compile with the pass), traced on CPU tensors at small shapes: the pass must
replace every all-reduce site with the FP8 tails the benchmark's gate expects, so a change of the
pass that would fail that GPU gate fails here first."""

from __future__ import annotations

import os
import sys
import unittest

import torch

from harness import PYTHON_DIR, PassTestCase, graph, make_pass

E2E = os.path.abspath(os.path.join(PYTHON_DIR, "..", "bench", "e2e"))
if E2E not in sys.path:
    sys.path.insert(0, E2E)
import config as e2e_config  # noqa: E402
import model as e2e_model  # noqa: E402

DIMS = e2e_config.ModelDims(hidden=1024, heads=8, kv_heads=2, head_dim=128, ffn=2048, vocab=512,
                            layers=2)
TP, BATCH, CTX = 2, 8, 16


class E2EDecoder(PassTestCase):
    def _static(self, fp8):
        return e2e_model.make_static(DIMS, TP, 0, comm_name="tp", ar="c10d", algorithm="auto",
                                     fp8=fp8, phase="decode", inplace=True)

    def _layer_inputs(self, W, fp8):
        g = torch.Generator().manual_seed(5)
        h = torch.randn(BATCH, DIMS.hidden, generator=g).to(torch.bfloat16)
        r = torch.randn(BATCH, DIMS.hidden, generator=g).to(torch.bfloat16)
        nkv = DIMS.kv_heads // TP
        kc = torch.zeros(BATCH, nkv, CTX, DIMS.head_dim, dtype=torch.bfloat16)
        vc = torch.zeros_like(kc)
        cos, sin = e2e_model.rope_tables(DIMS, CTX, "cpu")
        positions = torch.tensor([3])
        mask = (torch.arange(CTX) <= 3).view(1, 1, 1, CTX)
        if fp8:
            qkv8, qkv_s = e2e_model.quant_weight(W.qkv, fp8)
            gu8, gu_s = e2e_model.quant_weight(W.gu, fp8)
            h, hs = e2e_model.torch_quant(h, fp8)
        else:
            qkv8 = qkv_s = gu8 = gu_s = hs = None
        return [h, hs, r, W.qkv, W.o, W.gu, W.down, W.norm2, W.norm1, qkv8, qkv_s, gu8, gu_s,
                kc, vc, cos[3], sin[3], positions, mask]

    def test_every_site_of_every_function_is_replaced(self):
        W = e2e_model.make_weights(DIMS, TP, 0, 1, "cpu")
        for fp8 in (None, "per_token", "per_group"):
            S = self._static(fp8)
            # (function, its inputs, all-reduce sites, FP8 tails): the gate's expectation
            functions = {
                "embed": (e2e_model._bind_embed(S),
                          [torch.randint(0, DIMS.vocab, (BATCH,)), W.emb, W.norm1],
                          1, 1 if fp8 else 0),
                "mid": (e2e_model._bind_layer(S, quant_next=fp8 is not None),
                        self._layer_inputs(W, fp8), 2, 2 if fp8 else 0),
            }
            if fp8:
                functions["last"] = (e2e_model._bind_layer(S, quant_next=False),
                                     self._layer_inputs(W, fp8), 2, 1)
            for name, (fn, inputs, sites, tails) in functions.items():
                with self.subTest(fp8=fp8, function=name):
                    p = make_pass()
                    graph(fn, inputs, p)
                    self.assertEqual(p.stats.all_reduces, sites, p.stats.summary())
                    self.assertReplaced(p, sites)
                    n_tails = sum(n for k, n in p.stats.kinds.items() if "+fp8" in k)
                    self.assertEqual(n_tails, tails, p.stats.summary())


if __name__ == "__main__":
    unittest.main()
