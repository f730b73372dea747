"""CPU tests of dev/measure/ab_summary.py: which candidate cells count as slower or faster than the base
once the A/A copy's difference and the repeats' ranges are taken into account (synthetic JSON)."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import ab_summary  # noqa: E402


def bench_doc(cells):
    """cells: {(tokens, column): (time_us, [repeats])}"""
    rows = {}
    for (tokens, column), (us, reps) in cells.items():
        rows.setdefault(tokens, []).append({"column": column, "time_us": us, "repeats_us": reps})
    return {"header": {"op": "fused"}, "rows": [{"tokens": t, "results": r} for t, r in sorted(rows.items())]}


def quant_doc(cells):
    """cells: {(pattern, tokens, column): time_us}: an --op quant JSON, one row per pattern and count."""
    rows = {}
    for (pattern, tokens, column), us in cells.items():
        rows.setdefault((pattern, tokens), []).append({"column": column, "time_us": us, "repeats_us": [us]})
    return {"header": {"op": "quant"},
            "rows": [{"quant": p, "tokens": t, "results": r} for (p, t), r in sorted(rows.items())]}


class AbSummary(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, lib, rnd, cells, op="fused", world=4):
        with open(os.path.join(self.dir.name, f"ab_{op}_{world}_{lib}.{rnd}.json"), "w") as f:
            json.dump(bench_doc(cells), f)

    def two_rounds(self, lib, us_by_cell, spread=0.05):
        for rnd in (1, 2):
            self.write(lib, rnd, {k: (v, [v - spread, v, v + spread]) for k, v in us_by_cell.items()})

    def rows(self):
        return {(r["tokens"], r["column"]): r for r in ab_summary.summarize(ab_summary.load(self.dir.name))[1]}

    def test_quant_patterns_and_hidden_sizes_are_cells_of_their_own(self):
        # Two patterns at the same token count and column, at two hidden sizes: four cells, none
        # merged; the library names parse without their _h<hidden> suffix.
        for lib, us in (("base", 10.0), ("cand", 12.0)):
            for hidden in (8192, 16384):
                for rnd in (1, 2):
                    doc = quant_doc({("fp8_group", 64, "1_kernel"): us + hidden / 8192,
                                     ("fp8_token", 64, "1_kernel"): us})
                    with open(os.path.join(self.dir.name, f"ab_quant_1_{lib}_h{hidden}.{rnd}.json"), "w") as f:
                        json.dump(doc, f)
        cands, rows = ab_summary.summarize(ab_summary.load(self.dir.name))
        self.assertEqual(cands, ["cand"])
        cells = {(r["op"], r["column"]): r for r in rows}
        self.assertEqual(sorted(cells), [("quant h16384", "fp8_group/1_kernel"), ("quant h16384", "fp8_token/1_kernel"),
                                         ("quant h8192", "fp8_group/1_kernel"), ("quant h8192", "fp8_token/1_kernel")])
        self.assertEqual(cells[("quant h8192", "fp8_group/1_kernel")]["base_us"], 11.0)
        self.assertEqual(cells[("quant h16384", "fp8_group/1_kernel")]["base_us"], 12.0)
        self.assertEqual(cells[("quant h8192", "fp8_token/1_kernel")]["cand"]["verdict"], "slower")

    def test_difference_beyond_aa_and_ranges_counts(self):
        self.two_rounds("base", {(1, "auto"): 10.0, (8, "auto"): 10.0})
        self.two_rounds("base_copy", {(1, "auto"): 10.05, (8, "auto"): 10.0})
        self.two_rounds("cand", {(1, "auto"): 10.5, (8, "auto"): 9.5})
        rows = self.rows()
        self.assertEqual(rows[(1, "auto")]["cand"]["verdict"], "slower")
        self.assertEqual(rows[(8, "auto")]["cand"]["verdict"], "faster")
        self.assertAlmostEqual(rows[(1, "auto")]["aa_relative"], 0.005)

    def test_difference_inside_aa_is_within(self):
        # the A/A copy itself moved 5%: a 4% slower candidate says nothing
        self.two_rounds("base", {(1, "auto"): 10.0})
        self.two_rounds("base_copy", {(1, "auto"): 10.5})
        self.two_rounds("cand", {(1, "auto"): 10.4})
        self.assertEqual(self.rows()[(1, "auto")]["cand"]["verdict"], "within A/A")

    def test_overlapping_repeats_are_within(self):
        self.two_rounds("base", {(1, "auto"): 10.0}, spread=1.0)
        self.two_rounds("cand", {(1, "auto"): 10.5}, spread=1.0)
        self.assertEqual(self.rows()[(1, "auto")]["cand"]["verdict"], "within A/A")

    def test_median_over_rounds(self):
        for rnd, us in ((1, 10.0), (2, 12.0), (3, 11.0)):
            self.write("base", rnd, {(1, "twoshot"): (us, [us])})
        self.assertAlmostEqual(self.rows()[(1, "twoshot")]["base_us"], 11.0)

    def test_failed_and_skipped_cells_are_left_out(self):
        doc = {"rows": [{"tokens": 1, "results": [{"column": "a", "time_us": 5.0, "failed": True},
                                                  {"column": "b", "time_us": None, "skipped": True},
                                                  {"column": "c", "time_us": 5.0}]}]}
        with open(os.path.join(self.dir.name, "ab_fused_2_base.1.json"), "w") as f:
            json.dump(doc, f)
        self.assertEqual(sorted(self.rows()), [(1, "c")])

    def test_missing_base_is_an_error(self):
        self.two_rounds("cand", {(1, "auto"): 10.0})
        with self.assertRaises(SystemExit):
            ab_summary.summarize(ab_summary.load(self.dir.name))


if __name__ == "__main__":
    unittest.main()
