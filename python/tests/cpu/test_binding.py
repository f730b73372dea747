"""CPU tests of the ctypes layer against the installed package (no GPU, no torch needed):

    python3 -m unittest discover -s python/tests/cpu -v        (the package installed)
    PYTHONPATH=python ARFUSION_LIBRARY=build/libarfusion.so python3 -m unittest discover -s python/tests/cpu

ctest runs them in venvs the package is installed into (python_cpu, python_torch_cpu_*; label
cpu; cmake/python.cmake).
"""

import ctypes
import json
import os
import pathlib
import re
import subprocess
import sys
import tempfile
import unittest

import arfusion
from arfusion import ArfError, Pattern, ScaleFormat, ScaleLayout, Status, _lib, _opargs

REPO = pathlib.Path(__file__).resolve().parents[3]

HEADER = REPO / "include" / "arfusion" / "arfusion.h"
C = _lib.library().lib


def _header_enums():
    """{constant: value} of every enum in arfusion.h."""
    text = re.sub(r"/\*.*?\*/", "", HEADER.read_text(), flags=re.S)
    out = {}
    for body in re.findall(r"typedef enum \w+ \{(.*?)\}", text, flags=re.S):
        for name, value in re.findall(r"(arf\w+)\s*=\s*(\d+)", body):
            out[name] = int(value)
    return out


class AbiTest(unittest.TestCase):
    def test_mirrors_match_the_library(self):
        self.assertEqual(_lib.abi_mismatches(C), [])

    def test_every_struct_field_the_library_names_is_mirrored(self):
        names = arfusion.abi_names()
        self.assertTrue(names, "arfAbiNames returned nothing")
        mirrored = {s.__name__: {f for f, *_ in s._fields_} for s in _lib.STRUCTS}
        for name in names:
            if "." in name:
                struct, field = name.split(".", 1)
                self.assertIn(struct, mirrored, f"library struct {struct} is not mirrored")
                self.assertIn(field, mirrored[struct], f"{name} is not mirrored")
        for struct, fields in mirrored.items():
            self.assertIn(struct, names)
            for f in fields:
                self.assertIn(f"{struct}.{f}", names)

    def test_every_header_enum_constant_is_mirrored_and_answered(self):
        enums = _header_enums()
        self.assertGreater(len(enums), 30)
        mirror = {_lib.enum_c_name(m): int(m) for e in _lib.ENUMS for m in e}
        self.assertEqual(mirror, enums)
        for name, value in enums.items():
            self.assertEqual(arfusion.abi_query(name), value, name)

    def test_api_version(self):
        self.assertEqual(arfusion.abi_query("ARF_API_VERSION"), arfusion.ARF_API_VERSION)
        m = re.search(r"#define ARF_API_VERSION (\d+)", HEADER.read_text())
        self.assertEqual(int(m.group(1)), arfusion.ARF_API_VERSION)

    def test_unknown_name_is_refused(self):
        with self.assertRaises(ArfError) as cm:
            arfusion.abi_query("arfFusedArgs_t.no_such_field")
        self.assertEqual(cm.exception.status, "arfInvalidArgument")

    def test_a_wrong_mirror_is_reported_by_field(self):
        # The check must be able to fail: swap two fields of arfPlan_t and look for their names.
        class arfPlan_t(ctypes.Structure):
            _fields_ = [(n, t) for n, t in reversed(_lib.arfPlan_t._fields_)]

        saved = _lib.STRUCTS
        try:
            _lib.STRUCTS = tuple(arfPlan_t if s is _lib.arfPlan_t else s for s in saved)
            problems = _lib.abi_mismatches(C)
        finally:
            _lib.STRUCTS = saved
        self.assertTrue(any(p.startswith("arfPlan_t.algorithm:") for p in problems), problems)
        self.assertTrue(any(p.startswith("arfPlan_t.fallback_level:") for p in problems), problems)

    def test_a_wrong_enum_value_is_reported(self):
        saved = _lib.CONSTANTS
        try:
            _lib.CONSTANTS = dict(saved, ARF_API_VERSION=saved["ARF_API_VERSION"] + 1)
            problems = _lib.abi_mismatches(C)
        finally:
            _lib.CONSTANTS = saved
        self.assertTrue(any(p.startswith("ARF_API_VERSION:") for p in problems), problems)

    def _init_writes_exactly(self, struct, init):
        size = ctypes.sizeof(struct)
        buf = (ctypes.c_ubyte * (size + 64))(*([0xA5] * (size + 64)))
        init(ctypes.cast(buf, ctypes.POINTER(struct)))
        self.assertEqual(list(buf[size:]), [0xA5] * 64, f"{struct.__name__} init wrote past sizeof")
        s = struct.from_buffer(buf)
        self.assertEqual(s.struct_size, size)
        self.assertEqual(s.version, arfusion.ARF_API_VERSION)
        return s

    def test_init_functions_fill_exactly_the_mirrored_size(self):
        cfg = self._init_writes_exactly(_lib.arfCommConfig_t, C.arfCommConfigInit)
        self.assertEqual((cfg.rank, cfg.world_size, cfg.max_tokens, cfg.max_hidden), (0, 1, 1024, 8192))
        self.assertEqual(cfg.dtype, arfusion.DataType.BFloat16)
        self.assertEqual((cfg.programmatic_launch, cfg.verify_calls), (0, 0))
        args = self._init_writes_exactly(_lib.arfFusedArgs_t, C.arfFusedArgsInit)
        self.assertEqual(args.pattern, Pattern.ResidualRmsNorm)
        self.assertEqual(args.algorithm, arfusion.Algorithm.Auto)
        self.assertAlmostEqual(args.eps, 1e-6, places=12)
        self.assertEqual(args.norm_rounding, arfusion.NormRounding.RoundOnce)
        self.assertEqual(args.scale_rule, arfusion.Fp8ScaleRule.Divide)
        self.assertIsNone(args.input)
        facts = self._init_writes_exactly(_lib.arfPlanFacts_t, C.arfPlanFactsInit)
        self.assertEqual((facts.world_size, facts.max_tokens, facts.max_hidden, facts.sm_count,
                          facts.ranks_per_device), (1, 1024, 8192, 132, 1))


class IdAndNamesTest(unittest.TestCase):
    def test_id_round_trip(self):
        text = arfusion.new_unique_id_string()
        self.assertRegex(text, r"^[0-9a-f]{32}$")
        uid = arfusion.unique_id_from_string(text)
        self.assertEqual(arfusion.unique_id_to_string(uid), text)
        raw = ctypes.string_at(ctypes.addressof(uid), ctypes.sizeof(uid))
        self.assertEqual(raw[16:], bytes(48), "bytes past the first 16 are zero")
        self.assertEqual(raw[:16].hex(), text)
        self.assertNotEqual(arfusion.new_unique_id_string(), text)

    def test_bad_id_strings(self):
        for bad in ("", "0" * 31, "0" * 33, "g" + "0" * 31, "0123456789ABCDEF" * 2 + "x"):
            with self.assertRaises(ArfError, msg=bad) as cm:
                arfusion.unique_id_from_string(bad)
            self.assertEqual(cm.exception.status, "arfInvalidArgument")
            self.assertTrue(cm.exception.message, "the library says why")
            self.assertIn("arfUniqueIdFromString", str(cm.exception))

    def test_status_strings_and_names(self):
        seen = set()
        for s in Status:
            text = arfusion.status_string(s)
            self.assertTrue(text and text != "unknown status", s)
            seen.add(text)
            self.assertEqual(_lib.status_name(int(s)), "arf" + s.name)
        self.assertEqual(len(seen), len(Status))
        self.assertEqual(arfusion.status_string(Status.Timeout), "timeout")
        self.assertEqual(_lib.status_name(99), "arfStatus(99)")

    def test_error_object(self):
        e = ArfError(Status.Timeout, "rank 1 never arrived", "arfFusedAllReduce", 7, "tp")
        self.assertEqual((e.status, e.code, e.message, e.first_lost_call, e.comm_name),
                         ("arfTimeout", 5, "rank 1 never arrived", 7, "tp"))
        for part in ("arfFusedAllReduce", "arfTimeout", "rank 1 never arrived", "first lost call: 7", "'tp'"):
            self.assertIn(part, str(e))

    def test_algorithm_names_round_trip(self):
        names = [arfusion.algorithm_name(a) for a in arfusion.Algorithm]
        self.assertEqual(names, ["auto", "oneshot_lamport", "oneshot_pull", "twoshot", "unfused", "nccl"])
        for a in arfusion.Algorithm:
            self.assertEqual(arfusion.algorithm_from_name(arfusion.algorithm_name(a)), a)
        with self.assertRaises(ArfError) as cm:
            arfusion.algorithm_from_name("fastest")
        self.assertEqual(cm.exception.status, "arfInvalidArgument")

    def test_pattern_names(self):
        names = {arfusion.pattern_name(p) for p in Pattern}
        self.assertEqual(len(names), len(Pattern))
        self.assertEqual(arfusion.pattern_name(Pattern.ResidualRmsNormFp8PerGroup),
                         "residual_rmsnorm_fp8_per_group")


def _expected_scale_bytes(pattern, layout, fmt, t, h):
    """arfScaleBufferBytes from the header's words (arfusion.h, quant_layout.h's layouts)."""
    rup = lambda x, m: (x + m - 1) // m * m  # noqa: E731
    if pattern == Pattern.ResidualRmsNormFp8PerToken:
        return t * 4 if layout == ScaleLayout.RowMajor and fmt == ScaleFormat.Fp32 else 0
    if pattern == Pattern.ResidualRmsNormFp8PerGroup:
        if h % 128 or layout == ScaleLayout.Swizzled128x4:
            return 0
        cols = h // 128
        if fmt == ScaleFormat.Ue8m0Packed:
            return t * cols if layout == ScaleLayout.RowMajor else (cols + 3) // 4 * rup(t, 4) * 4
        return t * cols * 4 if layout == ScaleLayout.RowMajor else cols * rup(t, 4) * 4
    if pattern in (Pattern.ResidualRmsNormNvfp4, Pattern.ResidualRmsNormMxfp4):
        block = 16 if pattern == Pattern.ResidualRmsNormNvfp4 else 32
        if h % block or fmt != ScaleFormat.Fp32 or layout == ScaleLayout.MnMajor:
            return 0
        cols = h // block
        return t * cols if layout == ScaleLayout.RowMajor else rup(t, 128) * rup(cols, 4)
    return 0


class ScaleBufferTest(unittest.TestCase):
    def test_known_values(self):
        P, L, F = Pattern, ScaleLayout, ScaleFormat
        known = [
            (P.ResidualRmsNormFp8PerToken, L.RowMajor, F.Fp32, 5, 1024, 20),
            (P.ResidualRmsNormFp8PerGroup, L.RowMajor, F.Fp32, 5, 1024, 160),
            (P.ResidualRmsNormFp8PerGroup, L.MnMajor, F.Fp32, 5, 1024, 256),
            (P.ResidualRmsNormFp8PerGroup, L.MnMajor, F.Ue8m0AsFp32, 5, 1024, 256),
            (P.ResidualRmsNormFp8PerGroup, L.RowMajor, F.Ue8m0Packed, 5, 1024, 40),
            (P.ResidualRmsNormFp8PerGroup, L.MnMajor, F.Ue8m0Packed, 5, 1024, 64),
            (P.ResidualRmsNormFp8PerGroup, L.MnMajor, F.Ue8m0Packed, 1, 7168, 14 * 4 * 4),  # 56 cols
            (P.ResidualRmsNormNvfp4, L.RowMajor, F.Fp32, 5, 1024, 320),
            (P.ResidualRmsNormNvfp4, L.Swizzled128x4, F.Fp32, 5, 1024, 128 * 64),
            (P.ResidualRmsNormMxfp4, L.RowMajor, F.Fp32, 5, 1024, 160),
            (P.ResidualRmsNormMxfp4, L.Swizzled128x4, F.Fp32, 129, 1024, 256 * 32),
            (P.ResidualRmsNormFp8PerTensor, L.RowMajor, F.Fp32, 5, 1024, 0),
            (P.ResidualRmsNorm, L.RowMajor, F.Fp32, 5, 1024, 0),
            (P.AllReduce, L.RowMajor, F.Fp32, 5, 1024, 0),
            (P.ResidualRmsNormFp8PerGroup, L.RowMajor, F.Fp32, 5, 1000, 0),       # H % 128
            (P.ResidualRmsNormFp8PerGroup, L.Swizzled128x4, F.Fp32, 5, 1024, 0),  # wrong layout
            (P.ResidualRmsNormNvfp4, L.MnMajor, F.Fp32, 5, 1024, 0),
            (P.ResidualRmsNormNvfp4, L.RowMajor, F.Ue8m0Packed, 5, 1024, 0),      # format per-group only
        ]
        for pattern, layout, fmt, t, h, want in known:
            with self.subTest(pattern=pattern.name, layout=layout.name, fmt=fmt.name, t=t, h=h):
                self.assertEqual(arfusion.scale_buffer_bytes(pattern, layout, fmt, t, h), want)

    def test_sweep_against_the_header_formula(self):
        for pattern in Pattern:
            for layout in ScaleLayout:
                for fmt in ScaleFormat:
                    for t in (1, 3, 4, 5, 127, 128, 129, 1000):
                        for h in (128, 1024, 7168, 8192, 16):
                            got = arfusion.scale_buffer_bytes(pattern, layout, fmt, t, h)
                            self.assertEqual(got, _expected_scale_bytes(pattern, layout, fmt, t, h),
                                             (pattern.name, layout.name, fmt.name, t, h))

    def test_scale_rule_vocabulary_is_the_enum(self):
        """The ops' scale_rule strings name arfFp8ScaleRule_t's values; others are refused."""
        self.assertEqual(_opargs.scale_rule_value("divide"), arfusion.Fp8ScaleRule.Divide)
        self.assertEqual(_opargs.scale_rule_value("times_reciprocal"),
                         arfusion.Fp8ScaleRule.TimesReciprocal)
        self.assertEqual(sorted(_opargs.SCALE_RULES.values()), [int(m) for m in arfusion.Fp8ScaleRule])
        with self.assertRaises(ValueError):
            _opargs.scale_rule_value("reciprocal")

    def test_op_output_shapes_are_the_library_layout(self):
        """The torch ops' fakes shape quant_out / scale_out through _opargs.quant_output_spec:
        the library's layout, the input's leading dimensions standing for the tokens; a
        combination the library refuses is a ValueError naming its reason."""
        checked = 0
        for quant in ("fp8_per_tensor", "fp8_per_token", "fp8_per_group", "nvfp4", "mxfp4"):
            for layout in _opargs.SCALE_LAYOUTS:
                for fmt in _opargs.SCALE_FORMATS:
                    for t, h in ((1, 128), (5, 1024), (129, 7168), (4, 16)):
                        pattern = _opargs.quant_pattern(quant)
                        args = (pattern, _opargs.SCALE_LAYOUTS[layout], _opargs.SCALE_FORMATS[fmt], t, h)
                        try:
                            lay = arfusion.quant_output_layout(*args)
                        except ArfError as e:
                            with self.assertRaises(ValueError) as cm:
                                _opargs.quant_output_spec(quant, layout, fmt, t, h)
                            self.assertIn(e.message, str(cm.exception))
                            continue
                        q, q_el, s_, s_el = _opargs.quant_output_spec(quant, layout, fmt, t, h, (2, t))
                        self.assertEqual(q, (2, t) + lay.quant_out.shape[1:])
                        self.assertEqual((q_el, s_, s_el), (lay.quant_out.element, lay.scale_out.shape,
                                                            lay.scale_out.element))
                        checked += 1
        self.assertEqual(checked, 4 + 4 + 3 * 6 + 4 * 2 + 3 * 2)  # the legal combinations
        with self.assertRaises(ValueError):
            _opargs.quant_output_spec("none", "row_major", "fp32", 4, 1024)


class QuantOutputLayoutTest(unittest.TestCase):
    """arfQuantOutputLayout through the binding: the layout the torch ops allocate from."""

    def test_sweep_against_the_buffer_size_and_the_formula(self):
        legal = 0
        for pattern in Pattern:
            for layout in ScaleLayout:
                for fmt in ScaleFormat:
                    for h in (16, 128, 1024, 1152, 2880, 7168):
                        try:
                            at0 = arfusion.quant_output_layout(pattern, layout, fmt, 0, h)
                        except ArfError as e:
                            self.assertEqual(e.status, "arfInvalidArgument")
                            self.assertTrue(e.message)
                            self.assertEqual(arfusion.scale_buffer_bytes(pattern, layout, fmt, 7, h), 0)
                            continue
                        legal += 1
                        for t in (1, 3, 4, 5, 127, 128, 129, 1000):
                            lay = arfusion.quant_output_layout(pattern, layout, fmt, t, h)
                            what = (pattern.name, layout.name, fmt.name, t, h)
                            self.assertEqual(lay.scale_out.bytes,
                                             _expected_scale_bytes(pattern, layout, fmt, t, h), what)
                            self.assertEqual(lay.scale_out.bytes,
                                             arfusion.scale_buffer_bytes(pattern, layout, fmt, t, h), what)
                            fp4 = pattern in (Pattern.ResidualRmsNormNvfp4, Pattern.ResidualRmsNormMxfp4)
                            self.assertEqual(lay.quant_out.shape, (t, h // 2 if fp4 else h), what)
                            self.assertEqual(lay.quant_out.element, "uint8" if fp4 else "float8_e4m3fn")
                            for buf, buf0 in ((lay.quant_out, at0.quant_out), (lay.scale_out, at0.scale_out)):
                                self.assertEqual(buf0.shape_for(t), buf.shape, what)
                                n = buf.element_bytes
                                for d in buf.shape:
                                    n *= d
                                self.assertEqual(buf.bytes, n, what)
        self.assertEqual(legal, 6 + 6 + 4 * 2 * 3 + 6 * 2 + 5 * 2)

    def test_elements(self):
        P, L, F = Pattern, ScaleLayout, ScaleFormat
        cases = [(P.ResidualRmsNormFp8PerTensor, L.RowMajor, F.Fp32, "float32", (0,)),
                 (P.ResidualRmsNormFp8PerToken, L.RowMajor, F.Fp32, "float32", (5, 1)),
                 (P.ResidualRmsNormFp8PerGroup, L.MnMajor, F.Ue8m0Packed, "uint8", (2, 32)),
                 (P.ResidualRmsNormFp8PerGroup, L.MnMajor, F.Ue8m0AsFp32, "float32", (8, 8)),
                 (P.ResidualRmsNormNvfp4, L.Swizzled128x4, F.Fp32, "float8_e4m3fn", (128, 64)),
                 (P.ResidualRmsNormMxfp4, L.RowMajor, F.Fp32, "uint8", (5, 32))]
        for pattern, layout, fmt, element, shape in cases:
            lay = arfusion.quant_output_layout(pattern, layout, fmt, 5, 1024)
            self.assertEqual((lay.scale_out.element, lay.scale_out.shape), (element, shape), pattern.name)

    def test_refusals_name_the_reason(self):
        for args, reason in (((Pattern.ResidualRmsNorm, 0, 0, 4, 1024), "does not quantize"),
                             ((Pattern.ResidualRmsNormFp8PerGroup, 0, 0, 4, 2880), "hidden % 128"),
                             ((Pattern.ResidualRmsNormNvfp4, 1, 0, 4, 1024), "MN-major")):
            with self.assertRaises(ArfError) as cm:
                arfusion.quant_output_layout(*args)
            self.assertEqual(cm.exception.function, "arfQuantOutputLayout")
            self.assertIn(reason, cm.exception.message)


class PlannerTest(unittest.TestCase):
    """arfPlanFromFacts: the planner without a GPU (docs/architecture.md, "Policy")."""

    def plan(self, facts=None, **args):
        f = arfusion.plan_facts(**(facts or {}))
        a = arfusion.fused_args(**args)
        return arfusion.plan_from_facts(f, a)

    def test_world_1_is_the_epilogue(self):
        p = self.plan(num_tokens=1, hidden=8192)
        self.assertEqual(p.algorithm, "oneshot_lamport")
        self.assertEqual((p.num_kernels, p.forced, p.fallback_level), (1, False, 1))
        self.assertTrue(p.reason)

    def test_world_2_small_is_lamport_and_large_is_pull(self):
        facts = dict(world_size=2, max_tokens=4096)
        small = self.plan(facts, num_tokens=1, hidden=8192)
        self.assertEqual(small.algorithm, "oneshot_lamport")
        self.assertEqual(small.block, 512)           # min(512, round_up(8192 / 8, 32))
        self.assertGreater(small.grid, 0)
        large = self.plan(facts, num_tokens=4096, hidden=8192)   # 64 MiB / rank > 8 MiB
        self.assertEqual(large.algorithm, "oneshot_pull")
        self.assertTrue(large.fused)

    def test_shared_device_follows_the_one_gpu_rule(self):
        # Every rank on one GPU (policy.cc, choose_shared_device): 4 ranks take oneshot_lamport up
        # to 512 KiB per rank, then two-shot for a fused call to 4 MiB (oneshot_pull above); 8
        # ranks take two-shot at any size.
        four = dict(world_size=4, ranks_per_device=4)
        small = self.plan(four, num_tokens=16, hidden=4096)      # 128 KiB
        large = self.plan(four, num_tokens=128, hidden=4096)     # 1 MiB
        eight = self.plan(dict(world_size=8, ranks_per_device=8), num_tokens=1, hidden=4096)
        self.assertEqual((small.algorithm, large.algorithm, eight.algorithm),
                         ("oneshot_lamport", "twoshot", "twoshot"))
        for p in (small, large, eight):
            self.assertIn("share a device", p.reason)

    def test_block_size_follows_hidden(self):
        p = self.plan(dict(world_size=2), num_tokens=1, hidden=1024)
        self.assertEqual(p.block, 128)                # round_up(1024 / 8, 32)

    def test_forced_algorithm(self):
        p = self.plan(dict(world_size=2), num_tokens=4, hidden=4096,
                      algorithm=arfusion.Algorithm.Twoshot)
        self.assertEqual((p.algorithm, p.forced), ("twoshot", True))

    def test_quantized_fallback_levels(self):
        base = dict(num_tokens=8, hidden=4096, pattern=Pattern.ResidualRmsNormFp8PerGroup)
        auto = self.plan(dict(world_size=2), **base)
        self.assertEqual((auto.fallback_level, auto.num_kernels), (1, 1))
        three = self.plan(dict(world_size=2), fallback=arfusion.FallbackLevel.ThreeKernels, **base)
        self.assertEqual((three.algorithm, three.fallback_level), ("unfused", 3))
        self.assertEqual(three.inner_allreduce, auto.algorithm)

    def test_refusals(self):
        cases = [
            (dict(world_size=2), dict(num_tokens=1, hidden=1001)),                       # hidden % 8
            (dict(world_size=2), dict(num_tokens=1, hidden=16384 + 8)),                  # > max_hidden
            (dict(world_size=2, max_tokens=64), dict(num_tokens=65, hidden=1024)),       # > capacity, no nccl
            (dict(world_size=2), dict(num_tokens=1, hidden=1008,
                                      pattern=Pattern.ResidualRmsNormFp8PerGroup)),      # H % 128
            (dict(world_size=2), dict(num_tokens=1, hidden=1024, dtype=arfusion.DataType.Float16)),  # dtype != facts
            (dict(world_size=2), dict(num_tokens=1, hidden=1024, pattern=Pattern.ResidualRmsNorm,
                                      fallback=arfusion.FallbackLevel.TwoKernels)),      # auto only
            (dict(world_size=2), dict(num_tokens=1, hidden=1024,
                                      pattern=Pattern.ResidualRmsNormFp8PerTensor,
                                      scale_rule=arfusion.Fp8ScaleRule.TimesReciprocal)),  # no dynamic scale
            (dict(world_size=2), dict(num_tokens=1, hidden=1024,
                                      pattern=Pattern.ResidualRmsNormFp8PerToken, scale_rule=2)),  # not an enum value
        ]
        for facts, args in cases:
            with self.subTest(facts=facts, args=args):
                with self.assertRaises(ArfError) as cm:
                    self.plan(facts, **args)
                self.assertEqual(cm.exception.status, "arfInvalidArgument")
                self.assertTrue(cm.exception.message)

    def test_scale_rule_is_accepted_for_the_dynamic_fp8_patterns(self):
        for pattern, hidden in ((Pattern.ResidualRmsNormFp8PerToken, 4096),
                                (Pattern.ResidualRmsNormFp8PerGroup, 4096)):
            with self.subTest(pattern=pattern):
                p = self.plan(dict(world_size=2), num_tokens=8, hidden=hidden, pattern=pattern,
                              scale_rule=arfusion.Fp8ScaleRule.TimesReciprocal)
                self.assertEqual(p, self.plan(dict(world_size=2), num_tokens=8, hidden=hidden,
                                              pattern=pattern))  # the rule does not change plans

    def test_sandwich_calls_are_offered_only_on_request(self):
        # post_gamma (any non-NULL value: plans read only whether it is set) asks for a sandwich
        # call, which the library refuses until ARF_EXPERIMENTAL_SANDWICH=1 (its GPU verification
        # is pending); then every algorithm plans it and says so
        args = dict(num_tokens=8, hidden=4096, post_gamma=1)
        old = os.environ.pop("ARF_EXPERIMENTAL_SANDWICH", None)
        try:
            with self.assertRaises(ArfError) as cm:
                self.plan(dict(world_size=2), **args)
            self.assertEqual(cm.exception.status, "arfUnsupported")
            self.assertIn("ARF_EXPERIMENTAL_SANDWICH", cm.exception.message)
            os.environ["ARF_EXPERIMENTAL_SANDWICH"] = "1"
            p = self.plan(dict(world_size=2), **args)
            self.assertIn("sandwich", p.reason)
            self.assertEqual(p.algorithm, self.plan(dict(world_size=2), num_tokens=8,
                                                    hidden=4096).algorithm)
            with self.assertRaises(ArfError) as cm:
                self.plan(dict(world_size=2), pattern=Pattern.AllReduce, **args)
            self.assertEqual(cm.exception.status, "arfInvalidArgument")
        finally:
            os.environ.pop("ARF_EXPERIMENTAL_SANDWICH", None)
            if old is not None:
                os.environ["ARF_EXPERIMENTAL_SANDWICH"] = old

    def test_same_facts_same_plan(self):
        for t in (1, 7, 64, 513, 1024):
            a = self.plan(dict(world_size=8), num_tokens=t, hidden=8192)
            b = self.plan(dict(world_size=8), num_tokens=t, hidden=8192)
            self.assertEqual(a, b)


class WorkspaceBytesTest(unittest.TestCase):
    def test_grows_with_capacity_and_refuses_bad_configs(self):
        def ws(**kw):
            return arfusion.workspace_bytes(arfusion.comm_config(**kw))

        small = ws(world_size=2, max_tokens=64, max_hidden=4096)
        self.assertGreater(small, 0)
        self.assertGreater(ws(world_size=2, max_tokens=1024, max_hidden=4096), small)
        self.assertGreater(ws(world_size=2, max_tokens=64, max_hidden=8192), small)
        self.assertGreater(ws(world_size=8, max_tokens=64, max_hidden=4096), small)
        with self.assertRaises(ArfError) as cm:
            ws(world_size=2, max_tokens=64, max_hidden=4100)     # not a multiple of 8
        self.assertEqual(cm.exception.status, "arfInvalidArgument")
        with self.assertRaises(ArfError):
            ws(world_size=3, max_tokens=64, max_hidden=4096)


class PackageTest(unittest.TestCase):
    def run_python(self, code, env=None):
        e = dict(os.environ)
        e.update(env or {})
        return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                              timeout=120, cwd=tempfile.gettempdir())

    def test_import_never_imports_torch(self):
        r = self.run_python("import sys, arfusion; print('torch' in sys.modules)")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), "False")

    def test_missing_library_is_an_import_error_naming_it(self):
        r = self.run_python("import arfusion", env={"ARFUSION_LIBRARY": "/nonexistent/libarfusion.so"})
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("ImportError", r.stderr)
        self.assertIn("/nonexistent/libarfusion.so", r.stderr)

    def test_library_path_is_the_one_asked_for(self):
        want = os.environ.get("ARFUSION_LIBRARY")
        if not want:
            self.skipTest("ARFUSION_LIBRARY not set")
        self.assertEqual(os.path.realpath(arfusion.library_path), os.path.realpath(want))

    def test_import_arfusion_exports_only_its_api(self):
        r = self.run_python("import arfusion, json; print(json.dumps([sorted(n for n in dir(arfusion) "
                            "if not n.startswith('_')), sorted(arfusion.__all__)]))")
        self.assertEqual(r.returncode, 0, r.stderr)
        public, declared = json.loads(r.stdout)
        self.assertEqual(public, declared)
        for leaked in ("ctypes", "dataclasses", "annotations"):
            self.assertNotIn(leaked, public)

    def test_torch_layer_refuses_without_torch(self):
        probe = self.run_python("import importlib.util as u; print(u.find_spec('torch') is not None)")
        if probe.stdout.strip() == "True":
            self.skipTest("torch is installed here (the GPU tests cover arfusion.torch)")
        r = self.run_python("import arfusion.torch")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("requires PyTorch >= 2.10 (torch is not installed)", r.stderr)

    def test_the_installed_package_is_the_one_tested(self):
        """Under ARFUSION_EXPECT_INSTALLED=1 (the venv runs): arfusion comes from the interpreter's
        site-packages, not the source tree, and loads the library installed next to it."""
        if os.environ.get("ARFUSION_EXPECT_INSTALLED") != "1":
            self.skipTest("not a run against an installed package")
        package = pathlib.Path(arfusion.__file__).resolve().parent
        self.assertNotEqual(package, REPO / "python" / "arfusion")
        self.assertTrue(str(package).startswith(os.path.realpath(sys.prefix)), package)
        self.assertEqual(pathlib.Path(arfusion.library_path).resolve(), package / "libarfusion.so")
        self.assertTrue((package / "torch" / "ops_build.json").is_file())


if __name__ == "__main__":
    unittest.main(verbosity=2)
