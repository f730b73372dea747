"""CPU tests of dev/measure/soak_tally.py: which soak runs count toward the soak target and how they
pool (synthetic JSON; the library identity is injected instead of asking git)."""
import json
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import soak_tally as st  # noqa: E402


def soak_doc(world=2, commit="aaaaaaa", calls=100, wrong=0, failure="none", processes=False, rank=-1,
              variant="release", command="arfusion-stress --nranks 2", exit_code=0, replay="",
              patterns=st.PATTERNS, hiddens=(128, 8192, 16384), full_capacity=5, tiny_after_large=3,
              mix=None, co_resident=None):
    doc = {"tool": "arfusion-stress", "format": 2, "git_commit": commit, "world": world, "processes": processes,
            "rank": rank, "library_variant": variant, "command_line": command, "exit_code": exit_code,
            "replay": replay, "setup_error": "",
            "repeats": [{"seconds": 10.0, "per_plan_algorithm": {a: calls for a in st.ALGORITHMS},
                         "per_pattern": {p: 10 for p in patterns}, "per_hidden": {str(h): 10 for h in hiddens},
                         "full_capacity_calls": full_capacity, "tiny_after_large_transitions": tiny_after_large,
                         "ranks": [{"wrong_elements": wrong, "failure": failure}] * world,
                         "cross_rank": {"error": "", "mismatched_calls": 0}}]}
    if mix is not None:
        doc["token_mix"] = mix
    if co_resident is not None:
        doc["co_resident"] = co_resident
    return doc


class SoakTally(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()

    def tearDown(self):
        self.dir.cleanup()

    def write(self, name, doc):
        path = os.path.join(self.dir.name, name)
        with open(path, "w") as f:
            json.dump(doc, f)
        return path

    def run_tally(self, docs, identity=lambda c: {"aaaaaaa": "L1", "bbbbbbb": "L1", "ccccccc": "L2"}.get(c)):
        files = [self.write(f"stress_{i}.json", d) for i, d in enumerate(docs)]
        return st.tally(files, identity=identity)

    def test_same_library_pools_across_commits(self):
        groups = self.run_tally([soak_doc(commit="aaaaaaa"), soak_doc(commit="bbbbbbb", calls=50),
                                 soak_doc(commit="ccccccc")])
        self.assertEqual(len(groups), 2)
        l1 = next(g for g in groups if g["library"] == "L1")
        self.assertEqual(l1["calls"]["twoshot"], 150)
        self.assertEqual(sorted(l1["commits"]), ["aaaaaaa", "bbbbbbb"])

    def test_token_mixes_pool_with_the_calls_of_each_shown(self):
        groups = self.run_tally([soak_doc(), soak_doc(mix="engine", calls=20), soak_doc(mix="volume", calls=50)])
        self.assertEqual(len(groups), 1)
        self.assertEqual(groups[0]["calls"]["twoshot"], 170)
        per_algo = len(st.ALGORITHMS)
        self.assertEqual(groups[0]["calls_per_mix"], {"engine": 120 * per_algo, "volume": 50 * per_algo})

    def test_seconds_left_at_the_pooled_rate(self):
        # two clean 10 s runs of 100 calls per algorithm: 10 calls/s each; one algorithm slower
        slow = soak_doc()
        slow["repeats"][0]["per_plan_algorithm"]["twoshot"] = 50
        g = self.run_tally([soak_doc(), slow])[0]
        self.assertAlmostEqual(g["seconds_left_at_pooled_rate"], (1_000_000 - 150) * 20 / 150)
        done = soak_doc(calls=1_000_000)
        self.assertIsNone(self.run_tally([done])[0]["seconds_left_at_pooled_rate"])
        partial = soak_doc(patterns=st.PATTERNS[:3])
        self.assertIsNone(self.run_tally([partial])[0]["seconds_left_at_pooled_rate"])
        never = soak_doc()
        never["repeats"][0]["per_plan_algorithm"]["unfused"] = 0
        self.assertIsNone(self.run_tally([never])[0]["seconds_left_at_pooled_rate"])

    def test_co_resident_mode_pools_apart_with_the_threads_target(self):
        groups = self.run_tally([soak_doc(), soak_doc(co_resident=False, calls=20),
                                 soak_doc(co_resident=True, calls=7, command="arfusion-stress --co-resident")])
        self.assertEqual(len(groups), 2)
        normal = next(g for g in groups if g["transport"] == "threads")
        mode = next(g for g in groups if g["transport"] == "threads, co-resident test mode")
        self.assertEqual(normal["calls"]["twoshot"], 120)  # files before the field are the normal mode
        self.assertEqual(mode["calls"]["twoshot"], 7)
        self.assertEqual(mode["target_per_algorithm"], st.TARGET_THREADS)
        done = self.run_tally([soak_doc(co_resident=True, calls=st.TARGET_THREADS)])
        self.assertTrue(done[0]["met"])

    def test_reports_of_format_2_count_under_either_name_and_other_files_do_not(self):
        renamed = soak_doc(calls=5)  # the same report under the tool's earlier name
        del renamed["format"]
        renamed["tool"] = "arfusion-stress churn"
        other = soak_doc(calls=1000)  # "arfusion-stress" without "format": another report
        del other["format"]
        files = [self.write("stress_new.json", soak_doc(calls=30)), self.write("churn_old.json", renamed),
                 self.write("stress_soak.json", other)]
        groups = st.tally(files, identity=lambda c: "L1")
        self.assertEqual(len(groups), 1)
        self.assertEqual(groups[0]["calls"]["twoshot"], 35)
        self.assertEqual(groups[0]["runs"], 2)
        found = sorted(os.path.basename(f) for f in st.find_files([self.dir.name]))
        self.assertEqual(found, ["churn_old.json", "stress_new.json", "stress_soak.json"])

    def test_unclean_runs_add_nothing(self):
        groups = self.run_tally([soak_doc(), soak_doc(wrong=3), soak_doc(failure="timeout"),
                                 soak_doc(exit_code=1)])
        self.assertEqual(groups[0]["calls"]["unfused"], 100)
        self.assertEqual(groups[0]["unclean_runs"], 3)
        self.assertFalse(groups[0]["met"])

    def test_negative_controls_replays_and_other_ranks_are_left_out(self):
        groups = self.run_tally([soak_doc(variant="no_shared_device_gate"),
                                 soak_doc(variant="", command="arfusion-stress --expect-failure"),
                                 soak_doc(replay="tests/data/x.csv"),
                                 soak_doc(processes=True, rank=1), soak_doc(processes=True, rank=0)])
        self.assertEqual(len(groups), 1)
        self.assertEqual(groups[0]["transport"], "ipc processes")
        self.assertEqual(groups[0]["calls"]["oneshot_lamport"], 100)

    def test_processes_under_mps_pool_apart(self):
        mps = soak_doc(processes=True, rank=0)
        mps["mps"] = True
        threads_mps = soak_doc()
        threads_mps["mps"] = True  # one process: one context either way
        groups = self.run_tally([mps, soak_doc(processes=True, rank=0), threads_mps])
        self.assertEqual(sorted(g["transport"] for g in groups),
                         ["ipc processes", "ipc processes (MPS)", "threads"])
        self.assertEqual(next(g for g in groups if g["transport"] == "ipc processes (MPS)")["target_per_algorithm"],
                         st.TARGET_PROCESSES)

    def test_target_per_transport(self):
        groups = self.run_tally([soak_doc(calls=1_000_000), soak_doc(processes=True, rank=0, calls=100_000)])
        self.assertTrue(all(g["met"] for g in groups))
        groups = self.run_tally([soak_doc(calls=999_999)])
        self.assertFalse(groups[0]["met"])

    def test_runs_without_the_coverage_pool_apart_and_never_meet_the_target(self):
        five = ("allreduce", "flat", "residual_rmsnorm", "fp8_token", "fp8_group")
        groups = self.run_tally([soak_doc(calls=1_000_000),
                                 soak_doc(calls=1_000_000, patterns=five, hiddens=(128, 8192)),
                                 soak_doc(calls=1_000_000, full_capacity=0),
                                 soak_doc(calls=1_000_000, tiny_after_large=0)])
        self.assertEqual(len(groups), 4)
        full = [g for g in groups if g["coverage"] == "full coverage"]
        self.assertEqual(len(full), 1)
        self.assertTrue(full[0]["met"])
        self.assertEqual(full[0]["full_capacity_calls"], 5)
        partial = {g["coverage"] for g in groups if g is not full[0]}
        self.assertIn("partial coverage: patterns fp8_tensor, nvfp4, mxfp4; no hidden above 8192", partial)
        self.assertIn("partial coverage: no full-capacity call", partial)
        self.assertIn("partial coverage: no tiny-after-large transition", partial)
        self.assertFalse(any(g["met"] for g in groups if g is not full[0]))

    def test_unknown_commit_pools_under_its_name(self):
        groups = self.run_tally([soak_doc(commit="ddddddd")])
        self.assertEqual(groups[0]["library"], "commit ddddddd")


if __name__ == "__main__":
    unittest.main()
