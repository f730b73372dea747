"""CPU tests of dev/measure/compare_world1_quant.py's target A with the noise allowance (synthetic JSON)."""
import os
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import compare_world1_quant as cq  # noqa: E402


def arf_doc(cells):
    """cells: (label, tokens, us, repeats) -> an --op quant JSON with the 1_kernel cell."""
    rows = []
    for label, tokens, us, repeats in cells:
        cell = {"column": "1_kernel", "time_us": us, "wrong": 0}
        if repeats:
            cell["repeats_us"] = repeats
        rows.append({"quant": label, "hidden": 8192, "tokens": tokens, "results": [cell],
                     "pct_copy_bandwidth": 90.0, "bytes_moved": 1000})
    return {"header": {"op": "quant", "quant_variants": sorted({c[0] for c in cells})}, "rows": rows}


def torch_doc(cells):
    return {"header": {"patterns": {}},
            "rows": [{"pattern": p, "hidden": 8192, "tokens": t, "time_us": us, "repeats_us": reps,
                      "bytes_moved": 1000} for p, t, us, reps in cells]}


class CompareWorld1Quant(unittest.TestCase):
    def test_within_noise_passes_and_beyond_misses(self):
        result = cq.compare(
            arf_doc([("fp8_token", 1, 3.40, [3.38, 3.40, 3.45]), ("fp8_token", 64, 3.9, [3.88, 3.9, 3.95])]),
            torch_doc([("fp8_token", 1, 3.39, [3.30, 3.39, 3.41]), ("fp8_token", 64, 3.5, [3.49, 3.5, 3.52])]))
        a = result["targets"]["vs_torch_compile"]
        self.assertEqual(a["miss"], [{"pattern": "fp8_token", "hidden": 8192, "tokens": [64]}])
        self.assertEqual(a["within_noise"], [{"pattern": "fp8_token", "hidden": 8192, "tokens": [1]}])
        speeds = [r["speed"] for r in result["tables"][0]["rows"]]
        self.assertEqual(speeds, ["within noise", "slower"])

    def test_faster_without_repeats_passes_slower_without_repeats_misses(self):
        result = cq.compare(arf_doc([("fp8_tensor", 1, 2.0, None), ("fp8_tensor", 2, 2.6, None)]),
                            torch_doc([("fp8_tensor", 1, 2.5, [2.4, 2.6]), ("fp8_tensor", 2, 2.5, [2.4, 2.7])]))
        self.assertEqual(result["targets"]["vs_torch_compile"]["miss"][0]["tokens"], [2])

    def test_other_layouts_are_not_compared(self):
        result = cq.compare(arf_doc([("fp8_group/mn/fp32", 1, 1.0, None), ("fp8_group/row/fp32", 1, 1.0, None)]),
                            torch_doc([("fp8_group", 1, 2.0, None)]))
        self.assertEqual(result["not_compared"], ["fp8_group/mn/fp32"])
        self.assertTrue(result["targets"]["vs_torch_compile"]["pass"])


if __name__ == "__main__":
    unittest.main()
