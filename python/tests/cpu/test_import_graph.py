"""The package's module structure (no torch, no GPU): no import cycle among arfusion's modules
(scripts/check_python_imports.py, run on the source tree and shown to fail on planted cycles)."""

import pathlib
import shutil
import subprocess
import sys
import tempfile
import unittest

REPO = pathlib.Path(__file__).resolve().parents[3]
CHECKER = REPO / "scripts" / "check_python_imports.py"
SOURCE = REPO / "python" / "arfusion"


def _check(package_dir):
    return subprocess.run([sys.executable, str(CHECKER), str(package_dir)], capture_output=True,
                          text=True, timeout=60)


class ImportCycles(unittest.TestCase):
    def test_the_package_has_none(self):
        r = _check(SOURCE)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("no cycle", r.stdout)

    def _planted(self, module: str, line: str):
        tmp = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, tmp)
        pkg = pathlib.Path(tmp) / "arfusion"
        shutil.copytree(SOURCE, pkg, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
        path = pkg / module
        path.write_text(path.read_text() + "\n\n" + line + "\n")
        return _check(pkg)

    def test_a_cycle_hidden_in_a_function_is_found(self):
        r = self._planted("_lib.py", "def _planted():\n    from . import _core  # noqa")
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("arfusion._core", r.stdout)
        self.assertIn("arfusion._lib", r.stdout)

    def test_a_cycle_through_the_torch_layer_is_found(self):
        r = self._planted("torch/ops.py", "def _planted():\n    from ._comm import Communicator  # noqa")
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("arfusion.torch._comm -> arfusion.torch.ops -> arfusion.torch._comm", r.stdout)

    def test_importing_the_own_package_init_is_a_cycle(self):
        r = self._planted("_core.py", "import arfusion  # noqa")
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("arfusion -> arfusion._core -> arfusion", r.stdout)


if __name__ == "__main__":
    unittest.main(verbosity=2)
