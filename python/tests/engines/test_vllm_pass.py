"""arfusion's pass in vLLM's own pass manager, against the installed vLLM (CPU, no GPU).

The graph is vLLM's: its RMSNorm layer (vllm.model_executor.layers.layernorm.RMSNorm, which emits
vLLM's IR op fused_add_rms_norm) after vLLM's all-reduce op (torch.ops.vllm.all_reduce, as
RowParallelLinear's reduction appears in a compiled vLLM model), compiled through the pass
manager vLLM's backend configures (VllmBackend.configure_post_pass).
"""

import logging
import unittest

import vllm_support as vs
from vllm.compilation.caching import compute_env_and_config_hashes
from vllm.compilation.passes.inductor_pass import CallableInductorPass
from vllm.config import CompilationMode, set_current_vllm_config
from vllm.config.utils import Range
from vllm.model_executor.layers.layernorm import RMSNorm

import arfusion.torch as aft
from arfusion.integrations import vllm as av

import torch  # noqa: E402  (after vllm_support, which skips without vLLM)
import vllm.distributed.parallel_state  # noqa: E402,F401  (registers torch.ops.vllm.all_reduce)

H = 4096
AR = "vllm.all_reduce.default"
IR = "vllm_ir.fused_add_rms_norm.default"
FUSED = "arfusion.fused_add_rms_norm_out.default"


def layer(cfg):
    """RowParallelLinear's reduction then the next RMSNorm with its residual, as in a vLLM decoder
    layer; vLLM's own RMSNorm module."""
    with set_current_vllm_config(cfg):
        norm = RMSNorm(H, eps=1e-6, dtype=vs.BF16)

    def fn(x, residual):
        return norm(torch.ops.vllm.all_reduce(x, vs.GROUP), residual)

    return fn, (vs.randn((8, H), 1), vs.randn((8, H), 2))


class PassInVllmPassManager(unittest.TestCase):
    def test_fuses_after_vllm_ir_is_lowered(self):
        cfg = vs.config(fuse_allreduce_rms=True)
        with self.assertLogs("vllm.arfusion", logging.INFO) as logs:
            p = av.install_pass(cfg, vs.facts(), group_name=vs.GROUP)
        self.assertFalse(cfg.compilation_config.pass_config.fuse_allreduce_rms)
        self.assertTrue(any("turning vLLM's all-reduce + RMSNorm fusion off" in m
                            for m in logs.output), logs.output)
        c = vs.Compiled(cfg, *layer(cfg))
        names = [type(q).__name__ for q in c.backend.pass_manager.passes]
        # vLLM put it in its list of passes (the slot's place: after its own fusions), and its own
        # all-reduce fusion is absent
        self.assertEqual(names[-1], "AfterIrLowering", names)
        self.assertNotIn("AllReduceFusionPass", names)
        # the pass manager was given vLLM's opaque IR op; after it, the fused op stands in the
        # place of the all-reduce and of the lowered norm
        self.assertIn(IR, c.targets_at_entry)
        self.assertIn(AR, c.targets_at_entry)
        self.assertIn(FUSED, c.targets, c.targets)
        self.assertNotIn(AR, c.targets)
        self.assertFalse([t for t in c.targets if t.startswith("vllm_ir.")], c.targets)
        s = p.arf_pass.stats
        self.assertEqual((s.all_reduces, s.replaced), (1, 1), s.summary())
        # vLLM's native fused_add_rms_norm: fp32 residual add, weight after the bf16 rounding
        self.assertTrue(any("fp32_residual" in k and "before_weight" in k for k in s.kinds),
                        s.summary())

    def test_negative_control_plain_custom_pass_meets_the_ir_op(self):
        """The recipe this integration replaces: arfusion's pass in the same slot without the
        lowering runs before vLLM lowers its IR, meets the opaque norm op and fuses nothing."""
        cfg = vs.config(fuse_allreduce_rms=False)
        facts = vs.facts()
        arf = aft.AllReduceFusionPass(facts, group_map={vs.GROUP: facts.name},
                                      assume_max_tokens=True, fp32_residual_add=True)
        cfg.compilation_config.inductor_compile_config["post_grad_custom_post_pass"] = \
            CallableInductorPass(arf, arf.uuid())
        c = vs.Compiled(cfg, *layer(cfg))
        self.assertEqual((arf.stats.all_reduces, arf.stats.replaced), (1, 0), arf.stats.summary())
        self.assertIn(AR, c.targets)
        self.assertNotIn(FUSED, c.targets)

    def test_range_past_max_tokens_is_compiled_unfused(self):
        cfg = vs.config()
        p = av.install_pass(cfg, vs.facts(max_tokens=1024), group_name=vs.GROUP)
        c = vs.Compiled(cfg, *layer(cfg), compile_range=Range(1025, 2048))
        self.assertEqual(p.arf_pass.stats.graphs, 0, p.arf_pass.stats.summary())
        self.assertIn(AR, c.targets)
        self.assertNotIn(FUSED, c.targets)
        self.assertFalse([t for t in c.targets if t.startswith("vllm_ir.")], c.targets)  # vLLM lowered
        self.assertTrue(p.is_applicable_for_range(Range(1, 1024)))

    def test_previous_slot_holder_runs_after(self):
        cfg = vs.config()
        seen = []

        def previous(graph):
            seen.append([str(n.target) for n in graph.nodes if n.op == "call_function"])

        cfg.compilation_config.inductor_compile_config["post_grad_custom_post_pass"] = \
            CallableInductorPass(previous, "previous-pass")
        av.install_pass(cfg, vs.facts(), group_name=vs.GROUP)
        vs.Compiled(cfg, *layer(cfg))
        self.assertEqual(len(seen), 1)
        self.assertIn(FUSED, seen[0])

    def test_vllm_compile_cache_key_names_the_pass(self):
        """vLLM keys its compile cache on the config's compile factors: with and without the pass
        differ (no artifact crosses), two installs of the same pass agree (the cache is reused)."""
        keys = []
        for with_pass in (True, True, False):
            cfg = vs.config(fuse_allreduce_rms=False)
            if with_pass:
                av.install_pass(cfg, vs.facts(), group_name=vs.GROUP)
            keys.append(compute_env_and_config_hashes(cfg)[1])
        self.assertEqual(keys[0], keys[1])
        self.assertNotEqual(keys[0], keys[2])
        cfg = vs.config()
        av.install_pass(cfg, vs.facts(max_tokens=1024), group_name=vs.GROUP)
        self.assertNotEqual(compute_env_and_config_hashes(cfg)[1], keys[0])

    def test_max_tokens_setting_splits_the_compile_ranges(self):
        import os
        from unittest import mock

        cfg = vs.config()
        budget = cfg.scheduler_config.max_num_batched_tokens
        with mock.patch.dict(os.environ, {av.MAX_TOKENS_ENV: "512"}):
            self.assertEqual(av._max_tokens(cfg), 512)
            av._split_compile_ranges(cfg, 512)
        self.assertIn(512, cfg.compilation_config.compile_ranges_endpoints)
        self.assertIn(Range(1, 512), cfg.compilation_config.get_compile_ranges())
        with mock.patch.dict(os.environ, {av.MAX_TOKENS_ENV: str(10 * budget)}):
            self.assertEqual(av._max_tokens(cfg), budget)
        for bad in ("many", "0"):
            with mock.patch.dict(os.environ, {av.MAX_TOKENS_ENV: bad}):
                with self.assertRaises(av.ArfusionVllmError):
                    av._max_tokens(cfg)

    def test_refuses_what_it_cannot_fuse(self):
        cfg = vs.config(mode=CompilationMode.NONE)
        with self.assertRaisesRegex(av.ArfusionVllmError, "VLLM_COMPILE"):
            av.install_pass(cfg, vs.facts(), group_name=vs.GROUP)
        cfg = vs.config()
        cfg.kernel_config.ir_op_priority.fused_add_rms_norm = ["vllm_c", "native"]
        with self.assertRaisesRegex(av.ArfusionVllmError, "fused_add_rms_norm starts with 'vllm_c'"):
            av.install_pass(cfg, vs.facts(), group_name=vs.GROUP)
        cfg = vs.config()
        av.install_pass(cfg, vs.facts(), group_name=vs.GROUP)
        with self.assertRaisesRegex(av.ArfusionVllmError, "already installed"):
            av.install_pass(cfg, vs.facts(), group_name=vs.GROUP)


if __name__ == "__main__":
    unittest.main()
