"""The build backend's diagnoses (python/_build_backend/arfusion_build.py, loaded from the source
tree by path; no build runs here): a missing tool stops the build naming it, and a torch the op
library cannot be built against is a recorded reason, not a failure."""

import importlib.util
import json
import os
import pathlib
import stat
import tempfile
import unittest
import zipfile
from unittest import mock

REPO = pathlib.Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location(
    "arfusion_build_under_test", REPO / "python" / "_build_backend" / "arfusion_build.py")
backend = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(backend)


class Tools(unittest.TestCase):
    def test_missing_cmake_is_named(self):
        with mock.patch.object(backend.shutil, "which", return_value=None):
            with self.assertRaises(SystemExit) as cm:
                backend._cmake()
        self.assertIn("cmake >= 3.25 is not on PATH", str(cm.exception))

    def test_missing_nvcc_is_named(self):
        with mock.patch.object(backend.shutil, "which", return_value=None), \
                mock.patch.object(backend.os, "access", return_value=False), \
                mock.patch.dict(os.environ, {"CUDA_HOME": "/nonexistent"}):
            with self.assertRaises(SystemExit) as cm:
                backend._nvcc()
        self.assertIn("nvcc (the CUDA toolkit 12.8+) is not on PATH", str(cm.exception))


class TorchProbe(unittest.TestCase):
    """_torch() runs the installing interpreter; a stand-in interpreter answers as each torch
    would."""

    def _probe_with(self, answer: dict):
        with tempfile.TemporaryDirectory() as tmp:
            fake = pathlib.Path(tmp) / "python"
            fake.write_text("#!/bin/sh\necho '" + json.dumps(answer) + "'\n")
            fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
            with mock.patch.object(backend.sys, "executable", str(fake)):
                return backend._torch()

    def test_no_torch(self):
        info, why = self._probe_with({"error": "ModuleNotFoundError: No module named 'torch'"})
        self.assertIsNone(info)
        self.assertIn("torch is not importable", why)
        self.assertIn("No module named", why)

    def test_too_old(self):
        info, why = self._probe_with({"version": "2.9.1+cu128", "dir": "/t", "cxx11_abi": 1,
                                      "cuda": "12.8", "has_cuda_lib": True})
        self.assertIsNone(info)
        self.assertIn("torch 2.9.1+cu128 (at /t) is older than 2.10", why)

    def test_cpu_only(self):
        info, why = self._probe_with({"version": "2.15.0+cpu", "dir": "/t", "cxx11_abi": 1,
                                      "cuda": None, "has_cuda_lib": False})
        self.assertIsNone(info)
        self.assertIn("CPU-only build", why)

    def test_usable(self):
        answer = {"version": "2.10.0+cu128", "dir": "/t", "cxx11_abi": 1, "cuda": "12.8",
                  "has_cuda_lib": True}
        info, why = self._probe_with(answer)
        self.assertIsNone(why)
        self.assertEqual(info, answer)


class EntryPoints(unittest.TestCase):
    """pyproject.toml's [tool.arfusion.entry-points."GROUP"] tables become the wheel's
    entry_points.txt (vLLM finds arfusion's plugin through it)."""

    def test_the_wheel_declares_the_vllm_plugin(self):
        with tempfile.TemporaryDirectory() as tmp:
            name = backend._write_wheel(tmp, "0", [])
            with zipfile.ZipFile(os.path.join(tmp, name)) as z:
                text = z.read("arfusion-0.dist-info/entry_points.txt").decode()
                record = z.read("arfusion-0.dist-info/RECORD").decode()
        self.assertIn("[vllm.general_plugins]\n"
                      "arfusion = arfusion.integrations.vllm_plugin:register\n", text)
        self.assertIn("arfusion-0.dist-info/entry_points.txt,sha256=", record)

    def test_an_unreadable_entry_point_stops_the_build(self):
        with tempfile.TemporaryDirectory() as tmp:
            (pathlib.Path(tmp) / "pyproject.toml").write_text(
                '[tool.arfusion.entry-points."g"]\nname = module:function\n')
            with mock.patch.object(backend, "PYTHON_DIR", pathlib.Path(tmp)):
                with self.assertRaises(SystemExit) as cm:
                    backend._entry_points()
        self.assertIn("cannot read entry point 'name = module:function'", str(cm.exception))


if __name__ == "__main__":
    unittest.main(verbosity=2)
