"""Nothing is missed silently: every op of a graph that is or may hide an all-reduce (torch's, the
engines' under their real namespaces and schemas, arfusion's own) is fused or counted with a reason,
and a graph without any says so."""

from __future__ import annotations

import logging
import unittest

import torch
import torch.distributed as dist
import torch.distributed._functional_collectives as funcol

import forms as fm
from harness import BF16, PassTestCase, comm, graph, make_pass, randn, run, targets

T, H = 16, 512
X = ((T, H), BF16)
W = ((H,), BF16)


def site(reduce):
    """x -> reduce -> + r -> LlamaRMSNorm, for an all-reduce written as `reduce(p)`."""
    def fn(x, r, w):
        s = reduce(x * 2) + r
        return fm.llama(s, w), s
    return fn


def _inplace(op, group="tp:0"):
    def reduce(p):
        op(p, group)
        return p
    return reduce


FUSED = {
    "dist.all_reduce": fm.ar,
    "funcol.all_reduce": lambda p: funcol.all_reduce(p, "sum", dist.group.WORLD),
    "symm_mem.one_shot_all_reduce": lambda p: torch.ops.symm_mem.one_shot_all_reduce(
        p, "sum", dist.group.WORLD.group_name),
    "vllm.all_reduce": lambda p: torch.ops.vllm.all_reduce(p, "tp:0"),
    "vllm.outplace_all_reduce": lambda p: torch.ops.vllm.outplace_all_reduce(p, "tp:0"),
    "vllm.all_reduce_symmetric_with_copy": lambda p: torch.ops.vllm.all_reduce_symmetric_with_copy(p),
    "vllm.inplace_all_reduce": _inplace(lambda p, g: torch.ops.vllm.inplace_all_reduce(p, g)),
    "sglang.outplace_all_reduce": lambda p: torch.ops.sglang.outplace_all_reduce(p, "tp:0", "pynccl"),
    "sglang.flashinfer_allreduce": lambda p: torch.ops.sglang.flashinfer_allreduce(p, "tp:0"),
    "sglang.inplace_all_reduce": _inplace(lambda p, g: torch.ops.sglang.inplace_all_reduce(p, g)),
    "arfusion.all_reduce": lambda p: torch.ops.arfusion.all_reduce(p, "tp"),
}

RUN_ON_CPU = ("vllm.all_reduce", "vllm.inplace_all_reduce", "sglang.inplace_all_reduce",
              "arfusion.all_reduce")


def _partial_inplace(p):
    torch.ops.vllm.inplace_all_reduce(p[: T // 2], "tp:0")
    return p


def _moe(p):
    return torch.ops.vllm.moe_forward(p, p, None, None, "model.layers.0.mlp.experts", 0)


def _coalesced(p):
    a, b = funcol.all_reduce_coalesced([p, p * 3], "sum", dist.group.WORLD)
    return a + b


def _unknown(p):
    return torch.ops.mylib.custom_allreduce(p)


LEFT = {
    "max instead of sum": (lambda p: funcol.all_reduce(p, "max", dist.group.WORLD), ["not sum"]),
    "in place on part of a tensor": (_partial_inplace, ["part of a tensor"]),
    "vLLM's opaque MoE op": (_moe, ["opaque MoE op", "reduce_results"]),
    "coalesced": (_coalesced, ["coalesced"]),
    "an unknown op named like an all-reduce": (_unknown, ["does not know"]),
}


def _define_unknown_op():
    if hasattr(torch.ops, "mylib") and hasattr(torch.ops.mylib, "custom_allreduce"):
        return
    lib = torch.library.Library("mylib", "FRAGMENT")
    lib.define("custom_allreduce(Tensor x) -> Tensor")
    lib.impl("custom_allreduce", lambda x: x.clone(), "CPU")
    torch.library.register_fake("mylib::custom_allreduce", lambda x: torch.empty_like(x), lib=lib)
    _define_unknown_op.lib = lib


class AllReduceOps(PassTestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        _define_unknown_op()

    def test_every_known_all_reduce_fuses(self):
        for name, reduce in FUSED.items():
            with self.subTest(name):
                p = make_pass()
                gm = graph(site(reduce), [X, X, W], p)
                self.assertEqual(p.stats.all_reduces, 1, p.stats.summary())
                self.assertReplaced(p, 1, "residual/")
                t = targets(gm)
                self.assertFalse([s for s in t if "all_reduce" in s or "allreduce" in s
                                  or "auto_functionalized" in s], t)
                self.assertEqual(p.stats.sites[0][2].split()[0], "fused", p.stats.sites)

    def test_engine_ops_run_on_cpu(self):
        for i, name in enumerate(RUN_ON_CPU):
            with self.subTest(name):
                fn = site(FUSED[name])
                inputs = [randn((T, H), 800 + 3 * i), randn((T, H), 801 + 3 * i),
                          randn((H,), 802 + 3 * i)]
                p = make_pass()
                got, want = run(fn, inputs, p), fn(*inputs)
                self.assertReplaced(p, 1)
                for a, b in zip(got, want):
                    self.assertBits(a, b, name)

    def test_left_ops_are_counted_with_their_reason(self):
        for name, (reduce, parts) in LEFT.items():
            with self.subTest(name):
                p = make_pass()
                graph(site(reduce), [X, X, W], p)
                self.assertGreaterEqual(p.stats.all_reduces, 1, p.stats.summary())
                self.assertReplaced(p, 0)
                self.assertLeft(p, *parts, count=p.stats.all_reduces)

    def test_engine_group_with_several_communicators(self):
        fn = site(FUSED["vllm.all_reduce"])
        two = [comm("tp"), comm("ep", ranks=None)]
        p = make_pass(two)
        graph(fn, [X, X, W], p)
        self.assertLeft(p, "several communicators", "group_map")
        p = make_pass(two, group_map={"tp:0": "tp"})
        gm = graph(fn, [X, X, W], p)
        self.assertReplaced(p, 1)
        fused = [n for n in gm.graph.nodes if "fused_add_rms_norm" in str(n.target)]
        self.assertEqual(fused[0].args[4], "tp")

    def test_already_fused_ops_are_counted(self):
        def fn(x, r, w):
            n, s = torch.ops.arfusion.fused_add_rms_norm_out(x * 2, r, w, fm.EPS, "tp")
            return n, s

        p = make_pass()
        graph(fn, [X, X, W], p)
        self.assertEqual((p.stats.all_reduces, p.stats.replaced), (1, 0), p.stats.summary())
        self.assertEqual(p.stats.prefused[0][1], "arfusion.fused_add_rms_norm_out")
        self.assertIn("already fused", p.stats.summary())

    def test_other_collectives_are_not_all_reduces(self):
        def fn(x):
            return torch.ops.vllm.reduce_scatter(x * 2, 0, 2, "tp:0")

        p = make_pass()
        graph(fn, [X], p)
        self.assertEqual(p.stats.all_reduces, 0, p.stats.summary())


class Silence(PassTestCase):
    def test_a_graph_without_all_reduce_says_so(self):
        def fn(x, w):
            return fm.llama(x * 2, w)

        p = make_pass()
        with self.assertLogs("arfusion.compile", logging.WARNING) as logs:
            graph(fn, [X, W], p)
        self.assertIn("without any all-reduce", "\n".join(logs.output))
        self.assertEqual(p.stats.graphs_without_all_reduce, 1)
        self.assertIn("1 graph(s) without any all-reduce", p.stats.summary())
        with self.assertLogs("arfusion.compile", logging.INFO) as logs:  # the second: INFO
            graph(fn, [X, W], p)
        self.assertEqual(p.stats.graphs_without_all_reduce, 2)
        self.assertTrue(all(r.levelno == logging.INFO for r in logs.records), logs.output)

    def test_an_unfused_all_reduce_is_a_warning(self):
        p = make_pass()
        with self.assertLogs("arfusion.compile", logging.WARNING) as logs:
            graph(site(_moe), [X, X, W], p)
        self.assertIn("opaque MoE op", "\n".join(logs.output))

    def test_no_live_communicator(self):
        c = comm()
        c.alive = False
        p = make_pass(c)
        graph(site(fm.ar), [X, X, W], p)
        self.assertLeft(p, "no live communicator")


if __name__ == "__main__":
    unittest.main()
