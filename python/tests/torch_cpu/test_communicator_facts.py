"""CommunicatorFacts plans as the communicator it stands for: every field of arfPlanFacts_t it is
given reaches arfPlanFromFacts, max_ctas (API version 6) included, so the pass's plans are the grids
the live communicator launches. And max_ctas at creation: Communicator.from_group / from_nccl put
it into the config they build (refusing what the library would refuse, as ValueError), and a live
communicator's plan_facts() reports it for CommunicatorFacts.of."""

from __future__ import annotations

import unittest

import torch

import arfusion as arf
import arfusion.torch as aft
from harness import comm

T, H = 512, 4096


def args(**kw):
    return arf.fused_args(pattern=arf.Pattern.ResidualRmsNorm, num_tokens=T, hidden=H, **kw)


class MaxCtas(unittest.TestCase):
    def test_the_bound_reaches_the_planner(self):
        unbounded = comm().plan_shape(args())
        # Negative control: without the bound this shape plans a grid above 8 CTAs per rank, so
        # the bounded plan below could not pass by accident.
        self.assertGreater(unbounded.grid, 8, unbounded.reason)
        self.assertNotIn("max_ctas", unbounded.reason)
        bounded = comm(max_ctas=16, ranks_per_device=2).plan_shape(args())
        self.assertEqual(bounded.grid, 8, bounded.reason)  # 16 CTAs split between 2 ranks
        # The reason names the bound and the grid it leaves, whole: arfPlan_t.reason keeps 127
        # characters, and the planner cuts the auto choice's account before it instead.
        self.assertTrue(bounded.reason.endswith("; max_ctas 16 caps the grid at 8"), bounded.reason)
        self.assertLessEqual(len(bounded.reason), 127)

    def test_plan_facts_carries_it(self):
        self.assertEqual(comm(max_ctas=24).plan_facts()["max_ctas"], 24)
        self.assertEqual(comm().plan_facts()["max_ctas"], 0)

    def test_a_bound_leaving_no_cta_is_refused_with_the_reason(self):
        with self.assertRaises(arf.ArfError) as caught:
            comm(max_ctas=1, ranks_per_device=2).plan_shape(args())
        self.assertIn("max_ctas 1", str(caught.exception))


def config(**kw):
    """Communicator._config as from_group calls it for rank 0 of 2 (max_ctas as given)."""
    return aft.Communicator._config(rank=0, world_size=2, device_index=0, dtype=torch.bfloat16,
                                    max_tokens=2048, max_hidden=8192, timeout_s=None,
                                    init_timeout_s=None, oneshot_max_tokens=0,
                                    programmatic_launch=False, verify_calls=False, **kw)


class _LiveComm:
    """What Communicator.plan_facts reads of arfusion.Comm: arfCommGetPlanFacts's struct."""

    def __init__(self, facts):
        self._facts = facts

    def plan_facts(self):
        return self._facts


class MaxCtasAtCreation(unittest.TestCase):
    def test_the_config_carries_the_bound(self):
        cfg = config(max_ctas=48)
        self.assertEqual(cfg.max_ctas, 48)
        self.assertEqual(config().max_ctas, 0)  # the default: no bound
        # The library takes the config as built (arfCommWorkspaceBytes validates it first).
        self.assertGreater(arf.workspace_bytes(cfg), 0)

    def test_a_negative_bound_is_refused_as_the_library_refuses_it(self):
        with self.assertRaises(ValueError) as caught:
            config(max_ctas=-1)
        self.assertIn("max_ctas -1 must be >= 0 (0: no bound)", str(caught.exception))
        # The same config past the Python check: the library's refusal, in the same words.
        raw = config()
        raw.max_ctas = -1
        with self.assertRaises(arf.ArfError) as lib:
            arf.workspace_bytes(raw)
        self.assertEqual(lib.exception.status, "arfInvalidArgument")
        self.assertIn("max_ctas -1 must be >= 0 (0: no bound)", lib.exception.message)

    def test_what_is_not_an_int_or_does_not_fit_is_refused(self):
        for bad in (True, 1.5, "8", None, 2**31):
            with self.subTest(max_ctas=bad), self.assertRaises(ValueError) as caught:
                config(max_ctas=bad)
            self.assertIn("max_ctas", str(caught.exception))
        self.assertEqual(config(max_ctas=2**31 - 1).max_ctas, 2**31 - 1)

    def test_the_constructors_refuse_it_before_anything_else(self):
        # No process group, no GPU and no NCCL communicator are needed to be refused: the check
        # comes first, so no rank enters a collective with an argument it cannot use.
        with self.assertRaisesRegex(ValueError, "max_ctas -3 must be >= 0"):
            aft.Communicator.from_group(max_tokens=64, max_hidden=1024, max_ctas=-3)
        with self.assertRaisesRegex(ValueError, "max_ctas -3 must be >= 0"):
            aft.Communicator.from_nccl(0x1000, max_tokens=64, max_hidden=1024, max_ctas=-3)

    def test_plan_facts_of_a_communicator_reports_it_for_the_pass(self):
        live = aft.Communicator.__new__(aft.Communicator)  # no GPU: its arfusion.Comm stood in
        live._comm = _LiveComm(arf.plan_facts(world_size=2, max_tokens=2048, max_hidden=16384,
                                              max_ctas=24))
        live.name, live.dtype, live.ranks = "tp", torch.bfloat16, [0, 1]
        self.assertEqual(live.plan_facts()["max_ctas"], 24)
        facts = aft.CommunicatorFacts.of(live)
        self.assertEqual(facts.plan_facts()["max_ctas"], 24)
        self.assertEqual(facts.plan_shape(args()).grid, 24, "the copied bound caps the plan")


if __name__ == "__main__":
    unittest.main()
