"""The installed op library on a CPU-only machine (torch >= 2.10, no GPU needed): the schemas and
CUDA kernels it registers, the fake implementations (quant_out / scale_out shaped by the library's
arfQuantOutputLayout, symbolic token counts included), the communicator-name registry, the check
that it calls the libarfusion.so the package loaded, and the ImportErrors that name why
arfusion.torch cannot load.

    python -m unittest discover -s python/tests/torch_cpu      (against the installed package)
"""

import ctypes
import json
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import make_fx

import arfusion
import arfusion.torch as aft
from arfusion import _opargs
from arfusion.torch import _oplib

PACKAGE = pathlib.Path(arfusion.__file__).resolve().parent
QUANTS = ("fp8_per_tensor", "fp8_per_token", "fp8_per_group", "nvfp4", "mxfp4")


def _run(code: str, env=None):
    e = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    e.update(env or {})
    return subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True,
                          timeout=300, cwd=tempfile.gettempdir())


class Registration(unittest.TestCase):
    def test_the_loaded_library_is_the_installed_one(self):
        self.assertEqual(pathlib.Path(aft.ops.library_path()).parent, PACKAGE / "torch")
        self.assertTrue((PACKAGE / "torch" / "libarfusion_torch_ops.so").is_file())

    def test_schemas(self):
        want = {
            "fused_add_rms_norm": ["input", "residual", "weight", "eps", "comm", "gamma_plus_one",
                                   "norm_rounding", "algorithm"],
            "fused_add_rms_norm_out": ["input", "residual", "weight", "eps", "comm",
                                       "gamma_plus_one", "norm_rounding", "algorithm",
                                       "post_weight"],
            "fused_add_rms_norm_quant": ["input", "residual", "weight", "scale", "eps", "comm",
                                         "quant", "scale_layout", "scale_format", "with_norm",
                                         "gamma_plus_one", "norm_rounding", "algorithm",
                                         "fallback", "scale_rule", "post_weight"],
            "all_reduce": ["input", "comm"],
            "all_reduce_": ["input", "comm"],
        }
        self.assertEqual(sorted(want), sorted(aft.ops.OPS))
        for name, args in want.items():
            schema = aft.ops.op(name)._schema
            self.assertEqual([a.name for a in schema.arguments], args, name)
        mutated = {name: [a.name for a in aft.ops.op(name)._schema.arguments
                          if a.alias_info is not None and a.alias_info.is_write] for name in want}
        self.assertEqual(mutated, {"fused_add_rms_norm": ["input", "residual"],
                                   "fused_add_rms_norm_out": [], "fused_add_rms_norm_quant": [],
                                   "all_reduce": [], "all_reduce_": ["input"]})

    def test_every_op_has_its_cuda_kernel(self):
        # (CPU kernels are the compile-pass tests' own, cpu_kernels.py, registered in the process
        # where those tests run)
        for name in aft.ops.OPS:
            self.assertTrue(torch._C._dispatch_has_kernel_for_dispatch_key(f"arfusion::{name}", "CUDA"),
                            name)


class Fakes(unittest.TestCase):
    """The fake implementations against the library's layout, concrete and symbolic."""

    def test_quant_outputs_follow_the_library_layout(self):
        checked = 0
        for quant in QUANTS:
            for layout in _opargs.SCALE_LAYOUTS:
                for fmt in _opargs.SCALE_FORMATS:
                    for t, h in ((1, 1024), (5, 1024), (129, 2048), (300, 7168)):
                        pattern = _opargs.quant_pattern(quant)
                        try:
                            lay = arfusion.quant_output_layout(
                                pattern, _opargs.SCALE_LAYOUTS[layout], _opargs.SCALE_FORMATS[fmt], t, h)
                        except arfusion.ArfError:
                            with self.assertRaisesRegex(ValueError, "fused_add_rms_norm_quant"):
                                self._fake_quant(quant, layout, fmt, (t, h))
                            continue
                        for lead in ((t,), (1, t)):
                            q, s, res, norm = self._fake_quant(quant, layout, fmt, lead + (h,))
                            self.assertEqual(tuple(q.shape), lead + lay.quant_out.shape[1:])
                            self.assertEqual(q.dtype, getattr(torch, lay.quant_out.element))
                            self.assertEqual(tuple(s.shape), lay.scale_out.shape)
                            self.assertEqual(s.dtype, getattr(torch, lay.scale_out.element))
                            self.assertEqual(s.numel() * s.element_size(),
                                             arfusion.scale_buffer_bytes(
                                                 pattern, _opargs.SCALE_LAYOUTS[layout],
                                                 _opargs.SCALE_FORMATS[fmt], t, h))
                            self.assertEqual(tuple(res.shape), lead + (h,))
                            self.assertEqual(tuple(norm.shape), (0,))
                        checked += 1
        self.assertGreater(checked, 40)

    def _fake_quant(self, quant, layout, fmt, shape):
        with FakeTensorMode():
            x = torch.empty(shape, dtype=torch.bfloat16)
            w = torch.empty(shape[-1], dtype=torch.bfloat16)
            scale = torch.empty(1) if quant in ("fp8_per_tensor", "nvfp4") else None
            return torch.ops.arfusion.fused_add_rms_norm_quant(x, x, w, scale, 1e-6, "c", quant,
                                                               layout, fmt)

    def test_symbolic_token_counts(self):
        """Traced with a symbolic token count, the scale buffer's shape is the library's formula:
        evaluated at every count it equals the library's concrete answer (MN-major rounds the
        tokens up to 4, the swizzled layout to 128)."""
        import sympy

        cases = [("fp8_per_token", "row_major", "fp32", 1024),
                 ("fp8_per_group", "mn_major", "fp32", 1024),
                 ("fp8_per_group", "mn_major", "ue8m0_packed", 1152),
                 ("nvfp4", "swizzled_128x4", "fp32", 2880),
                 ("mxfp4", "swizzled_128x4", "fp32", 2880)]
        for quant, layout, fmt, h in cases:
            x, w = torch.ones(7, h, dtype=torch.bfloat16), torch.ones(h, dtype=torch.bfloat16)
            if quant == "nvfp4":  # the static global scale is an input
                g = make_fx(self._quant_call(quant, layout, fmt, with_scale=True),
                            tracing_mode="symbolic")(x, w, torch.ones(1))
            else:
                g = make_fx(self._quant_call(quant, layout, fmt), tracing_mode="symbolic")(x, w)
            node = next(n for n in g.graph.nodes if n.op == "call_function"
                        and "fused_add_rms_norm_quant" in str(n.target))
            q_val, s_val = node.meta["val"][0], node.meta["val"][1]
            exprs = [sympy.sympify(getattr(d, "node", None).expr if isinstance(d, torch.SymInt) else d)
                     for d in s_val.shape]
            symbols = set().union(*(e.free_symbols for e in exprs))
            self.assertTrue(symbols, f"{quant} {layout}: the scale shape does not depend on T")
            (tokens,) = symbols
            pattern = _opargs.quant_pattern(quant)
            for t in (2, 3, 4, 5, 127, 128, 129, 1000):
                want = arfusion.quant_output_layout(pattern, _opargs.SCALE_LAYOUTS[layout],
                                                    _opargs.SCALE_FORMATS[fmt], t, h)
                got = tuple(int(e.subs(tokens, t)) for e in exprs)
                self.assertEqual(got, want.scale_out.shape, (quant, layout, fmt, t))
            self.assertIsInstance(q_val.shape[0], torch.SymInt)

    @staticmethod
    def _quant_call(quant, layout, fmt, with_scale=False):
        def call(x, w, scale=None):
            return torch.ops.arfusion.fused_add_rms_norm_quant(x, None, w, scale, 1e-6, "c", quant,
                                                               layout, fmt)

        if with_scale:
            return lambda x, w, scale: call(x, w, scale)
        return lambda x, w: call(x, w)

    def test_other_fakes(self):
        with FakeTensorMode():
            x = torch.empty(3, 4, 256, dtype=torch.float16)
            w = torch.empty(256, dtype=torch.float16)
            norm, res = torch.ops.arfusion.fused_add_rms_norm_out(x, None, w, 1e-6, "c")
            self.assertEqual((tuple(norm.shape), tuple(res.shape)), ((3, 4, 256), (3, 4, 256)))
            self.assertEqual((norm.dtype, res.dtype), (torch.float16, torch.float16))
            self.assertIsNone(torch.ops.arfusion.fused_add_rms_norm(x, x, w, 1e-6, "c"))
            y = torch.ops.arfusion.all_reduce(x, "c")
            self.assertEqual((tuple(y.shape), y.dtype), ((3, 4, 256), torch.float16))
            self.assertIsNone(torch.ops.arfusion.all_reduce_(x, "c"))


class CommunicatorNames(unittest.TestCase):
    def test_a_name_is_registered_once(self):
        name = "test_op_library:names"
        _oplib.register_comm(name, 0x1234, 0)  # never dereferenced: no kernel runs here
        try:
            with self.assertRaisesRegex(RuntimeError, "already exists"):
                _oplib.register_comm(name, 0x5678, 0)
        finally:
            _oplib.unregister_comm(name)
        _oplib.register_comm(name, 0x5678, 0)
        _oplib.unregister_comm(name)


class SameLibrary(unittest.TestCase):
    def test_the_op_library_calls_the_loaded_libarfusion(self):
        _oplib.check_same_library(_oplib._CDLL, arfusion._lib.library().lib)

    def test_another_copy_is_refused(self):
        """Negative control: a second copy of libarfusion.so (another file, so the loader maps it
        again) is not the op library's."""
        with tempfile.TemporaryDirectory() as tmp:
            copy = pathlib.Path(tmp) / "libarfusion_copy.so"
            shutil.copy(arfusion.library_path, copy)
            other = ctypes.CDLL(str(copy))
            with self.assertRaisesRegex(ImportError, "another libarfusion.so"):
                _oplib.check_same_library(_oplib._CDLL, other)

    def test_arfusion_library_override_is_followed(self):
        """ARFUSION_LIBRARY names a copy elsewhere: the op library binds to that copy (the loader
        matches its soname), so both sides share one library."""
        with tempfile.TemporaryDirectory() as tmp:
            copy = pathlib.Path(tmp) / "libarfusion.so"
            shutil.copy(arfusion.library_path, copy)
            r = _run("import arfusion, arfusion.torch; print(arfusion.library_path)",
                     {"ARFUSION_LIBRARY": str(copy)})
            self.assertEqual(r.returncode, 0, r.stderr)
            self.assertEqual(r.stdout.strip(), str(copy))


class ImportErrors(unittest.TestCase):
    """arfusion.torch says why it cannot load."""

    def _copy_without_ops(self, tmp, build_info):
        shutil.copytree(PACKAGE, pathlib.Path(tmp) / "arfusion",
                        ignore=shutil.ignore_patterns("__pycache__"))
        (pathlib.Path(tmp) / "arfusion" / "torch" / "libarfusion_torch_ops.so").unlink()
        info = pathlib.Path(tmp) / "arfusion" / "torch" / "ops_build.json"
        if build_info is None:
            info.unlink()
        else:
            info.write_text(json.dumps(build_info))

    def test_missing_op_library_names_the_recorded_reason(self):
        with tempfile.TemporaryDirectory() as tmp:
            reason = "torch 2.9.1 (at /x) is older than 2.10"
            self._copy_without_ops(tmp, {"library": None, "torch": None, "reason": reason})
            r = _run("import arfusion.torch", {"PYTHONPATH": tmp})
            self.assertNotEqual(r.returncode, 0)
            self.assertIn("ImportError", r.stderr)
            self.assertIn(reason, r.stderr)
            self.assertIn("pip install --no-build-isolation", r.stderr)

    def test_a_source_copy_without_the_build_says_so(self):
        with tempfile.TemporaryDirectory() as tmp:
            self._copy_without_ops(tmp, None)
            r = _run("import arfusion.torch", {"PYTHONPATH": tmp})
            self.assertIn("not installed by its build", r.stderr)

    def test_old_torch_is_refused(self):
        r = _run("import torch; torch.__version__ = '2.9.1'; import arfusion.torch")
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("requires PyTorch >= 2.10", r.stderr)
        self.assertIn("2.9.1", r.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=2)
