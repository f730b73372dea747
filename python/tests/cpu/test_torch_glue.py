"""CPU tests of the torch layer's parts that need no torch (no GPU; CI has no modern torch):
the translation of the C++ op kernels' exceptions (arfusion/torch/_errors.py) and the choice of op
kernels (arfusion/torch/_native.py) under ARFUSION_TORCH_OPS, against a stand-in torch module and
fake C++ op libraries compiled here (cc). The real kernels are tested on the GPU
(python/tests/run_gpu_tests.sh with ARFUSION_TORCH_OPS=cpp).
"""

import importlib.util
import os
import pathlib
import shutil
import subprocess
import sys
import tempfile
import types
import unittest
import warnings

HERE = pathlib.Path(__file__).resolve().parent
PYTHON_DIR = HERE.parent.parent
TORCH_PKG = PYTHON_DIR / "arfusion" / "torch"
if str(PYTHON_DIR) not in sys.path:
    sys.path.insert(0, str(PYTHON_DIR))

from arfusion import _lib  # noqa: E402
from arfusion import ArfError  # noqa: E402


def _load_file(name: str, path: pathlib.Path):
    """A module of arfusion/torch loaded by path: the package's __init__ imports torch."""
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


errors = _load_file("arfusion_torch_errors_under_test", TORCH_PKG / "_errors.py")



def _restore_env(saved):
    """Puts back environment variables saved as {name: value or None (unset)}."""
    for k, v in saved.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v

class TranslateError(unittest.TestCase):
    def test_library_failure_becomes_arf_error(self):
        e = errors.translate_error(RuntimeError(
            "arfusion error [arfTimeout] in arfFusedAllReduce (communicator 'tp0', first lost call "
            "3): timeout: rank 0 waited for peer 1 in phase lamport_poll\nException raised from "
            "fail at ops_stable.cc:62"))
        self.assertIsInstance(e, ArfError)
        self.assertEqual((e.status, e.function, e.first_lost_call), ("arfTimeout", "arfFusedAllReduce", 3))
        self.assertEqual(e.message, "timeout: rank 0 waited for peer 1 in phase lamport_poll")

    def test_refusal_without_lost_call(self):
        e = errors.translate_error(RuntimeError(
            "arfusion error [arfInvalidArgument] in arfAllReduce (communicator 'c'): dtype mismatch: "
            "call fp16, communicator bf16"))
        self.assertIsInstance(e, ArfError)
        self.assertEqual((e.status, e.first_lost_call), ("arfInvalidArgument", None))
        self.assertIn("dtype mismatch", e.message)

    def test_argument_check_becomes_value_error(self):
        e = errors.translate_error(RuntimeError(
            "arfusion.all_reduce: input dtype torch.float32: the activation dtype is torch.bfloat16 "
            "or torch.float16"))
        self.assertIsInstance(e, ValueError)
        self.assertTrue(str(e).startswith("arfusion.all_reduce: input dtype torch.float32"))

    def test_everything_else_unchanged(self):
        for exc in (RuntimeError("CUDA error: out of memory"), KeyError("x"),
                    ArfError(5, "already an ArfError"),
                    RuntimeError("arfusion error [arfNoSuchStatus] in f (communicator 'c'): m")):
            self.assertIs(errors.translate_error(exc), exc)


FAKE_OPS = r"""
const char* arfusion_torch_native_ops(void) { return "fused_add_rms_norm,all_reduce"; }
unsigned arfusion_torch_native_api_version(void) { return %d; }
int arfusion_torch_register(const char* name, void* comm, int device) { return name[0] == 'x'; }
void arfusion_torch_unregister(const char* name) { (void)name; }
"""


@unittest.skipUnless(shutil.which("cc"), "no C compiler (cc) to build a fake op library")
class NativeChoice(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.libs = {}
        for version in (_lib.ARF_API_VERSION, _lib.ARF_API_VERSION - 1):
            src = pathlib.Path(cls.tmp.name) / f"fake_{version}.c"
            src.write_text(FAKE_OPS % version)
            out = pathlib.Path(cls.tmp.name) / f"fake_{version}.so"
            subprocess.run(["cc", "-shared", "-fPIC", str(src), "-o", str(out)], check=True)
            cls.libs[version] = out

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def _native(self, torch_version="2.11.0+cu130", **env):
        """_native.py loaded against a stand-in torch, with ARFUSION_TORCH_OPS* from env."""
        loaded = []
        fake = types.ModuleType("torch")
        fake.__version__ = torch_version
        fake.ops = types.SimpleNamespace(load_library=loaded.append)
        saved_env = {k: os.environ.get(k) for k in ("ARFUSION_TORCH_OPS", "ARFUSION_TORCH_OPS_LIBRARY")}
        saved_torch = sys.modules.get("torch")
        sys.modules["torch"] = fake
        try:
            for k in saved_env:
                os.environ.pop(k, None)
            os.environ.update(env)
            mod = _load_file("arfusion_torch_native_under_test", TORCH_PKG / "_native.py")
            return mod, loaded
        finally:
            _restore_env(saved_env)
            if saved_torch is None:
                sys.modules.pop("torch", None)
            else:
                sys.modules["torch"] = saved_torch

    def _stamped(self, mod, version, stamp=None):
        """The fake library of `version` with a build stamp (default: the one load() expects)."""
        path = self.libs[version]
        (path.parent / (path.name + ".stamp")).write_text(
            (mod.source_stamp("") if stamp is None else stamp) + "\n")
        return str(path)

    def _with_env(self, mod, schemas="", **env):
        old = {k: os.environ.get(k) for k in env}
        os.environ.update(env)
        try:
            mod.load(schemas)
        finally:
            _restore_env(old)

    def test_python_mode_loads_nothing(self):
        mod, loaded = self._native()
        self._with_env(mod, ARFUSION_TORCH_OPS="python",
                       ARFUSION_TORCH_OPS_LIBRARY=str(self.libs[_lib.ARF_API_VERSION]))
        self.assertEqual((mod.backend()["backend"], loaded), ("python", []))
        self.assertEqual(mod.native_ops(), frozenset())

    def test_auto_without_a_build_says_so(self):
        mod, loaded = self._native()
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # an unbuilt library is the default: no warning
            self._with_env(mod, ARFUSION_TORCH_OPS_LIBRARY=str(pathlib.Path(self.tmp.name) / "none.so"))
        b = mod.backend()
        self.assertEqual(b["backend"], "python")
        self.assertIn("is not built", b["reason"])
        self.assertEqual(loaded, [])

    def test_cpp_without_a_build_is_an_import_error(self):
        mod, _ = self._native()
        with self.assertRaisesRegex(ImportError, "ARFUSION_TORCH_OPS=cpp.*not built"):
            self._with_env(mod, ARFUSION_TORCH_OPS="cpp",
                           ARFUSION_TORCH_OPS_LIBRARY=str(pathlib.Path(self.tmp.name) / "none.so"))

    def test_a_built_library_is_loaded_and_names_its_ops(self):
        mod, loaded = self._native()
        path = self._stamped(mod, _lib.ARF_API_VERSION)
        self._with_env(mod, ARFUSION_TORCH_OPS="cpp", ARFUSION_TORCH_OPS_LIBRARY=path)
        b = mod.backend()
        self.assertEqual((b["backend"], b["library"], loaded), ("cpp", path, [path]))
        self.assertEqual(mod.native_ops(), frozenset({"fused_add_rms_norm", "all_reduce"}))
        mod.register_comm("tp", 0x1234, 0)
        with self.assertRaisesRegex(RuntimeError, "already exists"):
            mod.register_comm("x_taken", 0x1234, 0)  # the fake refuses names starting with x
        mod.unregister_comm("tp")

    def test_an_older_build_is_refused_loudly(self):
        mod, _ = self._native()
        path = self._stamped(mod, _lib.ARF_API_VERSION - 1)
        with self.assertWarnsRegex(RuntimeWarning, "not used: .*API version"):
            self._with_env(mod, ARFUSION_TORCH_OPS_LIBRARY=path)
        self.assertEqual(mod.backend()["backend"], "python")
        self.assertEqual(mod.native_ops(), frozenset())
        with self.assertRaisesRegex(ImportError, "rebuild"):
            self._with_env(mod, ARFUSION_TORCH_OPS="cpp", ARFUSION_TORCH_OPS_LIBRARY=path)

    def test_a_build_from_other_sources_is_not_loaded(self):
        for stamp in ("0" * 64, ""):  # another build's stamp; none (e.g. a library copied alone)
            mod, loaded = self._native()
            path = self._stamped(mod, _lib.ARF_API_VERSION, stamp=stamp)
            with self.assertWarnsRegex(RuntimeWarning, "other sources or schemas"):
                self._with_env(mod, ARFUSION_TORCH_OPS_LIBRARY=path)
            self.assertEqual((mod.backend()["backend"], loaded), ("python", []))  # never dlopen'd
            with self.assertRaisesRegex(ImportError, "rebuild it"):
                self._with_env(mod, ARFUSION_TORCH_OPS="cpp", ARFUSION_TORCH_OPS_LIBRARY=path)
        mod, _ = self._native()
        path = self._stamped(mod, _lib.ARF_API_VERSION)
        with self.assertWarnsRegex(RuntimeWarning, "other sources or schemas"):  # same sources,
            self._with_env(mod, "schemas of another ops.py", ARFUSION_TORCH_OPS_LIBRARY=path)  # other schemas
        self.assertIn("other sources or schemas", mod.backend()["reason"])

    def test_torch_before_2_10_runs_the_python_kernels(self):
        mod, loaded = self._native(torch_version="2.9.1")
        self._with_env(mod, ARFUSION_TORCH_OPS_LIBRARY=str(self.libs[_lib.ARF_API_VERSION]))
        self.assertEqual((mod.backend()["backend"], loaded), ("python", []))
        self.assertIn("2.10", mod.backend()["reason"])

    def test_unknown_mode_is_refused(self):
        mod, _ = self._native()
        with self.assertRaisesRegex(ImportError, "auto, cpp or python"):
            self._with_env(mod, ARFUSION_TORCH_OPS="fast")


if __name__ == "__main__":
    unittest.main()
