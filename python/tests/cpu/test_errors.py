"""The translation of the op kernels' exceptions (arfusion/torch/_errors.py) into ArfError and
ValueError, without torch: the module is loaded from the installed package by its path (the
package arfusion.torch imports torch). The kernels that raise them run on a GPU
(python/tests/run_gpu_tests.sh).
"""

import importlib.util
import pathlib
import unittest

import arfusion
from arfusion import ArfError

_path = pathlib.Path(arfusion.__file__).resolve().parent / "torch" / "_errors.py"
_spec = importlib.util.spec_from_file_location("arfusion_torch_errors_under_test", _path)
errors = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(errors)


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


if __name__ == "__main__":
    unittest.main(verbosity=2)
