"""CPU tests of dev/measure/compare_world1.py: the world-1 targets' verdicts from synthetic JSON (the
numbers are made up; what is tested is the rule, including the noise allowance)."""
import contextlib
import io
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import compare_world1 as cw  # noqa: E402


def arf_row(tokens, us, pct, repeats=None, wrong=0):
    row = {"tokens": tokens, "time_us": us, "pct_copy_bandwidth": pct, "algorithm": "oneshot_lamport",
           "wrong": wrong, "failed": False}
    if repeats:
        row["repeats_us"] = repeats
    return row


def torch_row(tokens, us, repeats=None):
    return {"tokens": tokens, "time_us": us, "pct_copy_bandwidth": 90.0, "repeats_us": repeats or [us]}


class CompareWorld1(unittest.TestCase):
    def run_compare(self, arf_rows, torch_rows):
        return cw.compare({"rows": arf_rows}, {"rows": torch_rows})

    def test_faster_and_copy_target(self):
        table, copy_misses, speed_misses, noise = self.run_compare(
            [arf_row(1, 2.0, 1.0), arf_row(2048, 30.0, 93.0), arf_row(4096, 60.0, 92.5)],
            [torch_row(1, 2.5), torch_row(2048, 31.0), torch_row(4096, 61.0)])
        self.assertEqual((copy_misses, speed_misses, noise), ([], [], []))
        self.assertEqual([r["speed"] for r in table], ["faster"] * 3)

    def test_copy_target_starts_at_2048_tokens(self):
        _, copy_misses, _, _ = self.run_compare(
            [arf_row(1024, 10.0, 50.0), arf_row(2048, 30.0, 91.9)],
            [torch_row(1024, 11.0), torch_row(2048, 31.0)])
        self.assertEqual(copy_misses, [2048])
        _, copy_misses, _, _ = self.run_compare([arf_row(1024, 10.0, 99.0)], [torch_row(1024, 11.0)])
        self.assertEqual(copy_misses, ["not measured"])

    def test_slower_within_noise_passes_and_is_listed(self):
        # arfusion's median is slower, but its fastest repeat beats torch's slowest: noise.
        table, _, speed_misses, noise = self.run_compare(
            [arf_row(64, 3.05, 10.0, repeats=[2.98, 3.05, 3.10])],
            [torch_row(64, 3.00, repeats=[2.95, 3.00, 3.01])])
        self.assertEqual(speed_misses, [])
        self.assertEqual(noise, [64])
        self.assertEqual(table[0]["speed"], "within noise")

    def test_slower_beyond_noise_misses(self):
        _, _, speed_misses, noise = self.run_compare(
            [arf_row(512, 9.7, 80.0, repeats=[9.6, 9.7, 9.8])],
            [torch_row(512, 8.4, repeats=[8.3, 8.4, 8.5])])
        self.assertEqual((speed_misses, noise), ([512], []))

    def test_without_repeats_only_faster_passes(self):
        _, _, speed_misses, noise = self.run_compare([arf_row(64, 3.01, 10.0)],
                                                     [torch_row(64, 3.00, repeats=[2.9, 3.0, 3.1])])
        self.assertEqual((speed_misses, noise), ([64], []))

    def test_wrong_elements_or_missing_rows_miss(self):
        _, copy_misses, speed_misses, _ = self.run_compare(
            [arf_row(4096, 50.0, 99.0, wrong=3), arf_row(8192, 100.0, 99.0)],
            [torch_row(4096, 60.0), torch_row(16384, 300.0)])
        self.assertEqual(speed_misses, [4096, 8192, 16384])
        self.assertEqual(copy_misses, [4096, 16384])

    def test_runs_of_different_shapes_are_refused(self):
        arf = {"header": {"hidden": 8192, "dtype": "bf16"}, "rows": [arf_row(1, 3.0, 1.0)]}
        same = {"header": {"hidden": 8192, "dtype": "bf16"}, "rows": [torch_row(1, 3.0)]}
        self.assertIsNone(cw.shape_mismatch(arf, same))
        for key, value in (("hidden", 16384), ("dtype", "fp16")):
            other = {"header": dict(same["header"], **{key: value}), "rows": same["rows"]}
            self.assertIn(key, cw.shape_mismatch(arf, other))
            with tempfile.TemporaryDirectory() as d:
                paths = [os.path.join(d, n) for n in ("a.json", "t.json")]
                for path, doc in zip(paths, (arf, other)):
                    with open(path, "w") as f:
                        json.dump(doc, f)
                sys.argv = ["compare_world1.py", *paths]
                with contextlib.redirect_stderr(io.StringIO()) as err:
                    self.assertEqual(cw.main(), 2)
                self.assertIn("different functions", err.getvalue())


if __name__ == "__main__":
    unittest.main()
