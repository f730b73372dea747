"""CPU tests of bench/e2e's pure-Python parts (no torch, no GPU): command line and plan,
numerics (bf16 ulp, cosine, agreement, percentiles), timing aggregation, the JSON document, the
text table, the plot (where matplotlib is installed), and the driver's exits that need no torch.

    python3 -m unittest discover -s bench/e2e/tests -v        (ctest: e2e_cpu, label cpu)
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import py_compile
import struct
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
E2E = os.path.abspath(os.path.join(HERE, ".."))
sys.path.insert(0, E2E)

import config  # noqa: E402
import numerics  # noqa: E402
import report  # noqa: E402


def _f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


class TestNumerics(unittest.TestCase):
    def test_bf16_rounding(self):
        self.assertEqual(numerics.float_to_bf16_bits(1.0), 0x3F80)
        self.assertEqual(numerics.float_to_bf16_bits(-2.0), 0xC000)
        # ties to even: 1 + 2^-8 lies halfway between 1 (even) and 1 + 2^-7
        self.assertEqual(numerics.float_to_bf16_bits(1.0 + 2 ** -8), 0x3F80)
        # 1 + 3 * 2^-8 lies halfway between 1 + 2^-7 (odd) and 1 + 2^-6 (even)
        self.assertEqual(numerics.float_to_bf16_bits(1.0 + 3 * 2 ** -8), 0x3F82)
        self.assertEqual(numerics.float_to_bf16_bits(1.0 + 2 ** -8 + 2 ** -20), 0x3F81)
        self.assertEqual(numerics.float_to_bf16_bits(float("nan")), 0x7FC0)
        self.assertEqual(numerics.float_to_bf16_bits(float("inf")), 0x7F80)
        self.assertEqual(numerics.float_to_bf16_bits(-0.0), 0x8000)
        for bits in (0x3F80, 0x0001, 0x7F7F, 0xC049):
            self.assertEqual(numerics.float_to_bf16_bits(numerics.bf16_bits_to_float(bits)), bits)

    def test_ulp_distance(self):
        u = numerics.ulp_distance
        self.assertEqual(u(0x3F80, 0x3F80), 0)
        self.assertEqual(u(0x3F80, 0x3F81), 1)
        self.assertEqual(u(0x3F81, 0x3F80), 1)
        self.assertEqual(u(0x0000, 0x8000), 0, "+0 and -0 are the same value")
        self.assertEqual(u(0x0001, 0x8001), 2, "across zero: the values in between count")
        self.assertEqual(u(0x3F80, 0xBF80), 2 * 0x3F80)
        self.assertEqual(u(0x7F7F, 0x7F80), 1, "largest finite to inf")
        self.assertEqual(u(0x007F, 0x0080), 1, "largest subnormal to smallest normal")
        self.assertIsNone(u(0x7FC0, 0x3F80))
        self.assertIsNone(u(0x3F80, 0xFFC1))
        self.assertEqual(u(0x7F80, 0x7F80), 0, "inf is a value, not NaN")

    def test_ulp_summary(self):
        s = numerics.ulp_summary([0, 0, 1, 2, 5, None])
        self.assertEqual(s["max_ulp"], 5)
        self.assertEqual(s["hist"], {"0": 2, "1": 1, "2": 1, ">2": 1})
        self.assertEqual(s["nan_pairs"], 1)
        self.assertAlmostEqual(s["fraction_equal"], 2 / 6)

    def test_probe_set_covers_cases(self):
        pairs = numerics.probe_pairs()
        self.assertEqual(len(pairs), len(numerics.PROBE_PATTERNS) ** 2)
        d = [numerics.ulp_distance(a, b) for a, b in pairs]
        self.assertIn(0, d)
        self.assertIn(1, d)
        self.assertIn(2, d)
        self.assertTrue(all(x is not None for x in d), "the probe set has no NaN: every distance is defined")

    def test_cosine(self):
        self.assertAlmostEqual(numerics.cosine([1, 0], [1, 0]), 1.0)
        self.assertAlmostEqual(numerics.cosine([1, 0], [0, 1]), 0.0)
        self.assertAlmostEqual(numerics.cosine([1, 2, 3], [-1, -2, -3]), -1.0)
        self.assertIsNone(numerics.cosine([0, 0], [1, 2]))
        with self.assertRaises(ValueError):
            numerics.cosine([1, 2], [1])

    def test_agreement(self):
        a = numerics.agreement([1, 2, 3, 4], [1, 2, 9, 4])
        self.assertEqual(a, {"predictions": 4, "agree": 3, "fraction": 0.75, "first_disagreement": 2})
        self.assertIsNone(numerics.agreement([5], [5])["first_disagreement"])
        with self.assertRaises(ValueError):
            numerics.agreement([1], [1, 2])

    def test_percentile(self):
        p = numerics.percentile
        self.assertEqual(p([1, 2, 3, 4], 50), 2.5)
        self.assertAlmostEqual(p([1, 2, 3, 4], 90), 3.7)
        self.assertEqual(p([4, 1, 3, 2], 0), 1)
        self.assertEqual(p([4, 1, 3, 2], 100), 4)
        self.assertEqual(p([7], 90), 7)
        with self.assertRaises(ValueError):
            p([], 50)
        with self.assertRaises(ValueError):
            p([1], 101)


class TestConfig(unittest.TestCase):
    def test_presets(self):
        full = config.parse_args([])
        self.assertEqual(full.preset, "full")
        self.assertEqual(full.tp, [1, 2, 4, 8])
        self.assertEqual(full.layers, 80)
        self.assertEqual(full.decode_batches, [1, 8, 32, 64, 128, 256])
        self.assertEqual(full.prefill_tokens, [512, 2048, 8192])
        self.assertGreaterEqual(full.replays, 200)
        self.assertGreaterEqual(full.prefill_replays, 200)
        self.assertEqual(full.gate_steps, 128)
        self.assertTrue(full.for_the_record)
        quick = config.parse_args(["--quick"])
        self.assertEqual(quick.preset, "quick")
        self.assertFalse(quick.for_the_record)
        # a smoke that fits one device call; the gates at full size are the full preset's
        self.assertEqual((quick.layers, quick.gate_steps), (8, 32))
        ct = config.parse_args(["--ctest"])
        self.assertEqual((ct.layers, ct.tp, ct.gates_only), (2, [2], True))

    def test_overrides(self):
        o = config.parse_args(["--quick", "--tp", "4,8", "--layers", "3", "--decode-batches", "2,4"])
        self.assertEqual((o.tp, o.layers, o.decode_batches), ([4, 8], 3, [2, 4]))

    def test_gate_order_always_has_a_reference_first(self):
        # (a), else (c), else their FP8 forms lead; the rest keep the order given
        self.assertEqual(config.gate_order(["b", "c", "a", "d"]), ["a", "c", "b", "d"])
        self.assertEqual(config.gate_order(["e_c", "e_d", "e_a"]), ["e_a", "e_c", "e_d"])
        self.assertEqual(config.gate_order(["a", "e_a", "e_c"]), ["a", "e_a", "e_c"])
        # a chunk holding none of the preferred ones: its first variant is the reference
        self.assertEqual(config.gate_order(["d", "c_compiled"]), ["d", "c_compiled"])
        self.assertEqual(config.gate_order([]), [])
        # the quick preset's TP 8 FP8 chunk as planned: its reference is e_a
        o = config.parse_args(["--quick", "--tp", "8", "--gates-only", "--variants", "e_c,e_d,e_a"])
        plan = config.plan_tp(o, 8, num_gpus=1)
        self.assertEqual(config.gate_order(plan.gate_variants)[0], "e_a")

    def test_rejections(self):
        bad = [
            ["--tp", "3"],                              # 64 heads / 8 KV heads over 3
            ["--tp", "16"],                             # 8 KV heads over 16
            ["--tp", "2,2"],
            ["--replays", "50"],                        # not for the record without --allow-short
            ["--context", "100"],                       # not a multiple of 16
            ["--quick", "--context", "64", "--prompt-tokens", "32", "--gate-steps", "64"],
            ["--variants", "a,zz"],
            ["--gate-algorithms", "fastest"],
            ["--quick", "--decode-batches", "", "--prefill-tokens", ""],
        ]
        for argv in bad:
            with self.assertRaises(config.UsageError, msg=argv):
                config.parse_args(argv)
        with self.assertRaises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
            config.parse_args(["--decode-batches", "0"])
        o = config.parse_args(["--replays", "50", "--allow-short"])
        self.assertFalse(o.for_the_record)

    def test_variants(self):
        for name in config.DEFAULT_ORDER:
            self.assertEqual(config.variant(name).name, name)
        v = config.variant("c@unfused")
        self.assertEqual((v.ar, v.algorithm, v.timed), ("fused", "unfused", True))
        v = config.variant("c@twoshot")
        self.assertEqual((v.algorithm, v.timed), ("twoshot", False))
        self.assertTrue(config.variant("d0").needs_nccl_everywhere)
        self.assertFalse(config.variant("d").needs_nccl_everywhere)
        self.assertTrue(config.variant("e_d").fp8 and config.variant("e_d").fusion_pass)
        with self.assertRaises(ValueError):
            config.variant("c@fast")

    def test_plan_one_gpu_per_rank(self):
        o = config.parse_args([])
        p = config.plan_tp(o, 8, num_gpus=8)
        self.assertFalse(p.shared_gpu)
        self.assertEqual((p.gpus_used, p.ranks_per_gpu, p.baseline_allreduce), (8, 1, "nccl"))
        self.assertIsNone(p.timing_skipped)
        self.assertEqual(p.timed_variants, ["a", "b", "c", "d0", "d", "e_a", "e_c", "e_d0", "e_d",
                                            "c@unfused"])
        self.assertIn("c@unfused", p.gate_variants)
        for n in ("c_compiled", "e_c_compiled", "c@oneshot_lamport", "c@twoshot"):
            self.assertIn(n, p.gate_variants)
            self.assertNotIn(n, p.timed_variants)
        self.assertEqual(p.max_tokens, 8192)
        self.assertEqual(p.skipped, {})

    def test_plan_shared_gpu(self):
        o = config.parse_args([])
        p = config.plan_tp(o, 4, num_gpus=1)
        self.assertTrue(p.shared_gpu)
        self.assertEqual((p.ranks_per_gpu, p.baseline_allreduce), (4, "gloo_cpu_copy"))
        self.assertIn("time-sliced", p.timing_skipped)
        self.assertEqual(p.timed_variants, [])
        self.assertEqual((p.decode_batches, p.prefill_tokens), ([], []))
        self.assertEqual(p.max_tokens, o.prompt_tokens, "without timing the communicator is sized "
                         "for the gates")
        self.assertIn("a", p.gate_variants, "(a') runs in the gates")
        self.assertNotIn("d0", p.gate_variants)
        self.assertIn("NCCL", p.skipped["d0"])
        # --time-shared: timed but flagged; (a) cannot be captured there
        q = config.plan_tp(config.parse_args(["--quick"]), 2, num_gpus=1)
        self.assertTrue(q.time_sliced)
        self.assertIsNone(q.timing_skipped)
        self.assertNotIn("a", q.timed_variants)
        self.assertIn("a", q.skipped)
        self.assertIn("d", q.timed_variants)
        # TP 1 on one GPU: a real measurement
        one = config.plan_tp(o, 1, num_gpus=1)
        self.assertFalse(one.shared_gpu)
        self.assertFalse(one.time_sliced)
        self.assertIn("a", one.timed_variants)

    def test_plan_names_how_ranks_share(self):
        o = config.parse_args([])
        self.assertEqual(config.plan_tp(o, 2, num_gpus=1).sharing, "time-sliced")
        mps = config.plan_tp(o, 2, num_gpus=1, mps=True)
        self.assertEqual(mps.sharing, "MPS")
        self.assertIn("under MPS", mps.timing_skipped)
        self.assertEqual(config.plan_tp(o, 2, num_gpus=2, mps=True).sharing, "")
        with tempfile.TemporaryDirectory() as d:
            self.assertFalse(config.mps_daemon_present({"CUDA_MPS_PIPE_DIRECTORY": d}))
            open(os.path.join(d, "control"), "w").close()
            self.assertTrue(config.mps_daemon_present({"CUDA_MPS_PIPE_DIRECTORY": d}))

    def test_plan_nccl_on_a_shared_gpu(self):
        p = config.plan_tp(config.parse_args(["--nccl-shared-gpu"]), 2, num_gpus=1)
        self.assertTrue(p.shared_gpu)
        self.assertTrue(p.nccl_over_loopback)
        self.assertEqual(p.baseline_allreduce, "nccl")
        self.assertIn("d0", p.gate_variants, "compiled graphs keeping c10d's all-reduce run on NCCL")
        self.assertNotIn("d0", p.skipped)
        one = config.plan_tp(config.parse_args(["--nccl-shared-gpu"]), 2, num_gpus=2)
        self.assertFalse(one.nccl_over_loopback, "one GPU per rank: plain NCCL")
        self.assertFalse(config.plan_tp(config.parse_args([]), 2, num_gpus=1).nccl_over_loopback)

    def test_plan_two_gpus_tp4(self):
        p = config.plan_tp(config.parse_args([]), 4, num_gpus=2)
        self.assertTrue(p.shared_gpu)
        self.assertEqual((p.gpus_used, p.ranks_per_gpu), (2, 2))

    def test_gate_algorithms_need_c(self):
        o = config.parse_args(["--variants", "a,b", "--gate-algorithms", "unfused"])
        p = config.plan_tp(o, 2, num_gpus=2)
        self.assertNotIn("c@unfused", p.gate_variants)
        o = config.parse_args(["--variants", "c,c@unfused", "--gate-algorithms", "unfused,twoshot"])
        p = config.plan_tp(o, 2, num_gpus=2)
        self.assertEqual(p.gate_variants, ["c", "c@unfused", "c@twoshot"])
        self.assertEqual(p.timed_variants, ["c", "c@unfused"])

    def test_options_round_trip(self):
        o = config.parse_args(["--quick", "--tp", "2,4"])
        j = json.loads(json.dumps(config.options_to_json(o)))
        self.assertEqual(config.options_from_json(j), o)
        p = config.plan_tp(o, 4, 2)
        self.assertEqual(config.TPPlan(**json.loads(json.dumps(p.to_json()))), p)


def _doc(gate_ok=True, replay_ok=True, rows=None, status="ok"):
    o = config.parse_args(["--quick"])
    plan = config.plan_tp(o, 2, num_gpus=2)
    if rows is None:
        rows = [report.timing_row("a", "decode", 1, [[100.0, 110.0, 120.0], [105.0, 100.0, 130.0]],
                                  replay_matches_eager=True),
                report.timing_row("c", "decode", 1, [[90.0, 95.0, 99.0], [91.0, 96.0, 97.0]],
                                  replay_matches_eager=replay_ok),
                report.timing_row("c", "prefill", 512, [[5000.0], [5100.0]], replay_matches_eager=True),
                report.timing_row("a", "prefill", 512, [[5200.0], [5300.0]], replay_matches_eager=True)]
        for r in rows:
            r["replay_check"] = "demanded" if r["variant"] != "a" else "reported"
    run = {"tp": 2, "plan": plan.to_json(), "status": status, "errors": [],
           "fp8": {"mode": "per_group", "detail": "probe"}, "comm": {"workspace_bytes": 1},
           "gates": {"passed": gate_ok,
                     "demanded": [{"name": "site embed: all-reduce", "ok": True, "detail": ""},
                                  {"name": "d == c_compiled", "ok": gate_ok, "detail": "x"}],
                     "reported": {"comparisons": [
                         {"variant": "b", "against": "c", "bitwise": False,
                          "hidden_ulp": {"max_ulp": 3, "fraction_equal": 0.99},
                          "logits_cosine": {"min": 0.9999, "mean": 0.99995},
                          "agreement": {"agree": 128, "predictions": 129, "first_disagreement": 7}}],
                         "sites": [{"site": "embed", "baseline_ar_max_ulp": 0,
                                    "baseline_ar_fraction_differing": 0.0, "norm_max_ulp": 1,
                                    "norm_fraction_equal": 0.999}]}},
           "timing": {"skipped": None, "time_sliced": False, "rows": rows,
                      "deltas": report.compute_deltas(rows, 80)},
           "pass_stats": {}}
    return report.make_document(date="2026-12-01T00:00:00+00:00", git_commit="abc1234",
                                command_line=["--quick"], options=config.options_to_json(o),
                                environment={"torch": "2.11", "gpu_count": 2, "gpu_name": "H200"},
                                model={"layers": 80, "description": "test"},
                                variants={"a": "x", "c": "y"}, runs=[run])


class TestReport(unittest.TestCase):
    def test_aggregate_max_over_ranks(self):
        a = report.aggregate_replays([[1.0, 5.0, 3.0], [2.0, 4.0, 6.0]])
        self.assertEqual(a["replays"], 3)
        self.assertEqual((a["min_us"], a["p50_us"], a["max_us"]), (2.0, 5.0, 6.0))
        self.assertAlmostEqual(a["mean_us"], 13.0 / 3)
        self.assertAlmostEqual(a["p90_us"], 5.8)
        self.assertEqual(a["per_rank_p50_us"], [3.0, 4.0])
        with self.assertRaises(ValueError):
            report.aggregate_replays([[1.0, 2.0], [1.0]])
        with self.assertRaises(ValueError):
            report.aggregate_replays([[1.0, float("nan")]])
        with self.assertRaises(ValueError):
            report.aggregate_replays([])

    def test_timing_row(self):
        r = report.timing_row("c", "decode", 32, [[1000.0, 1000.0]])
        self.assertEqual((r["batch"], r["tokens"]), (32, 32))
        self.assertAlmostEqual(r["tokens_per_s"], 32000.0)
        p = report.timing_row("c", "prefill", 2048, [[2e6]])
        self.assertEqual((p["batch"], p["tokens"]), (1, 2048))
        self.assertAlmostEqual(p["tokens_per_s"], 1024.0)
        e = report.timing_row("c", "decode", 8, None, error="boom")
        self.assertIsNone(e["p50_us"])
        with self.assertRaises(ValueError):
            report.timing_row("c", "train", 8, [[1.0]])

    def test_deltas(self):
        rows = [report.timing_row("a", "decode", 1, [[200.0]]),
                report.timing_row("c", "decode", 1, [[120.0]]),
                report.timing_row("c", "decode", 8, [[130.0]]),   # no (a) at 8: no delta
                report.timing_row("b", "decode", 1, [[150.0]]),
                report.timing_row("c@unfused", "prefill", 64, [[150.0]])]   # no (c) prefill
        d = report.compute_deltas(rows, layers=80)
        pairs = {(x["variant"], x["baseline"], x["size"]): x for x in d}
        self.assertEqual(set(pairs), {("b", "a", 1), ("c", "a", 1), ("c", "b", 1)})
        self.assertAlmostEqual(pairs[("c", "a", 1)]["delta_step_us"], -80.0)
        self.assertAlmostEqual(pairs[("c", "a", 1)]["delta_per_layer_us"], -1.0)
        self.assertAlmostEqual(pairs[("c", "a", 1)]["relative"], -0.4)

    def test_document_valid_and_verdict(self):
        doc = report.sanitize(_doc())
        self.assertEqual(report.validate_document(doc), [])
        self.assertTrue(doc["verdict"]["passed"], doc["verdict"])
        json.dumps(doc, allow_nan=False)

    def test_verdict_failures(self):
        self.assertFalse(_doc(gate_ok=False)["verdict"]["passed"])
        v = _doc(replay_ok=False)["verdict"]
        self.assertFalse(v["passed"])
        self.assertTrue(any("replay" in f for f in v["failures"]))
        self.assertFalse(_doc(status="crashed")["verdict"]["passed"])
        err = [report.timing_row("c", "decode", 1, None, error="OOM")]
        self.assertFalse(_doc(rows=err)["verdict"]["passed"])
        # a reported (not demanded) replay mismatch does not fail the run
        rows = [report.timing_row("a", "decode", 1, [[1.0]], replay_matches_eager=False)]
        rows[0]["replay_check"] = "reported"
        self.assertTrue(_doc(rows=rows)["verdict"]["passed"])
        empty = report.make_document(date="d", git_commit=None, command_line=[], options={},
                                     environment={}, model={}, variants={}, runs=[])
        self.assertFalse(empty["verdict"]["passed"])

    def test_validate_catches_problems(self):
        doc = report.sanitize(_doc())
        del doc["runs"][0]["gates"]
        self.assertTrue(any("gates" in p for p in report.validate_document(doc)))
        doc = report.sanitize(_doc())
        doc["runs"][0]["status"] = "fine"
        self.assertTrue(report.validate_document(doc))
        doc = report.sanitize(_doc())
        doc["runs"][0]["timing"]["rows"][0]["p50_us"] = "fast"
        self.assertTrue(report.validate_document(doc))
        doc = _doc()
        doc["runs"][0]["timing"]["rows"][0]["p50_us"] = float("nan")
        self.assertTrue(any("JSON" in p or "number" in p for p in report.validate_document(doc)))
        self.assertIsNone(report.sanitize({"x": float("inf")})["x"])

    def test_text(self):
        text = report.format_text(report.sanitize(_doc()))
        self.assertIn("== TP 2", text)
        self.assertIn("decode step time", text)
        self.assertIn("prefill step time", text)
        self.assertIn("us/layer", text)
        self.assertIn("VERDICT: PASSED", text)
        self.assertIn("not for the record", text)
        self.assertIn("b vs c", " ".join(text.split()))
        bad = report.format_text(report.sanitize(_doc(gate_ok=False)))
        self.assertIn("VERDICT: FAILED", bad)
        self.assertIn("[FAIL] d == c_compiled", bad)

    def test_text_shared_gpu_labels(self):
        doc = report.sanitize(_doc())
        doc["runs"][0]["plan"]["baseline_allreduce"] = "gloo_cpu_copy"
        doc["runs"][0]["plan"]["time_sliced"] = True
        text = report.format_text(doc)
        self.assertIn("a'", text)
        self.assertIn("(time-sliced): the times below are MEANINGLESS", text)
        doc["runs"][0]["plan"]["sharing"] = "MPS"
        self.assertIn("run at once under MPS", report.format_text(doc))

    def test_plot(self):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("matplotlib not installed here (the GPU machine has it)")
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "p.png")
            self.assertIsNone(report.plot(report.sanitize(_doc()), path))
            with open(path, "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")

    def test_plot_without_rows(self):
        doc = report.sanitize(_doc(rows=[]))
        self.assertEqual(report.plot(doc, "/nonexistent/p.png"), "no timing rows")


class TestDriver(unittest.TestCase):
    """The entry points run without torch as far as they should."""

    def _run(self, argv, env_extra=None):
        env = dict(os.environ)
        env.update(env_extra or {})
        return subprocess.run([sys.executable, os.path.join(E2E, "tp_decoder.py")] + argv,
                              capture_output=True, text=True, env=env, timeout=60)

    def test_help(self):
        p = self._run(["--help"])
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("--quick", p.stdout)

    def test_usage_error_exits_2(self):
        p = self._run(["--tp", "3"])
        self.assertEqual(p.returncode, 2)
        self.assertIn("TP 3", p.stderr)

    def test_no_torch_skips_77(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "torch"))
            with open(os.path.join(d, "torch", "__init__.py"), "w") as f:
                f.write("raise ImportError('torch hidden by the test')\n")
            p = self._run(["--ctest"], {"PYTHONPATH": d})
        self.assertEqual(p.returncode, 77, p.stdout + p.stderr)
        self.assertIn("SKIPPED", p.stdout)

    def test_torch_modules_compile(self):
        for name in ("model.py", "gates.py", "timing.py", "rank.py", "tp_decoder.py"):
            py_compile.compile(os.path.join(E2E, name), doraise=True,
                               cfile=os.path.join(tempfile.gettempdir(), f"e2e_{name}c"))

    def test_pure_modules_do_not_import_torch(self):
        code = ("import sys; sys.path.insert(0, %r); import config, numerics, report; "
                "print('torch' in sys.modules)" % E2E)
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
        self.assertEqual(p.stdout.strip(), "False", p.stderr)

    def test_run_sh_help(self):
        p = subprocess.run(["bash", os.path.join(E2E, "run.sh"), "--help"], capture_output=True,
                           text=True, timeout=60)
        self.assertEqual(p.returncode, 0, p.stderr)
        self.assertIn("--ctest", p.stdout)


if __name__ == "__main__":
    unittest.main()
