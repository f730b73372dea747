"""CommunicatorFacts plans as the communicator it stands for: every field of arfPlanFacts_t it is
given reaches arfPlanFromFacts, max_ctas (API version 6) included, so the pass's plans are the grids
the live communicator launches."""

from __future__ import annotations

import unittest

import arfusion as arf
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


if __name__ == "__main__":
    unittest.main()
