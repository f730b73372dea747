"""arfusion's SGLang drop-in against the installed SGLang (CPU): the function SGLang's RMSNorm calls
for its fused all-reduce + residual add + RMSNorm, its registration as SGLang registers
FlashInfer's, SGLang's call site and conventions, and the example patch. A drift of SGLang's
signatures, schema or call site fails here.

What needs a GPU and is not run here: the fused call itself (examples/sglang/run_example.sh runs
it against the unfused path on two ranks of one GPU).
"""

import ast
import inspect
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

try:
    import sglang
except ImportError:  # pragma: no cover - depends on the venv
    raise unittest.SkipTest("sglang is not installed")

import torch  # noqa: E402

import sglang.srt.layers.flashinfer_comm_fusion as fcf  # noqa: E402
import sglang.srt.layers.layernorm as sglang_layernorm  # noqa: E402

from arfusion.integrations import sglang as drop_in  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
PATCH = os.path.join(REPO, "examples", "sglang", f"sglang-{sglang.__version__}-arfusion.patch")
SITE = os.path.dirname(os.path.dirname(sglang.__file__))


def read(path: str) -> str:
    with open(path) as f:
        return f.read()


def parameters(fn):
    return [(p.name, p.kind, p.default) for p in inspect.signature(fn).parameters.values()]


class Recorder:
    """A communicator's stand-in for the drop-in's own decisions (the fused call needs a GPU):
    the facts the drop-in reads, and a fused_add_rms_norm_out that records its call."""

    name = "recorder"
    dtype = torch.bfloat16
    max_tokens = 64
    max_hidden = 1024

    def __init__(self):
        self.calls = []

    def fused_add_rms_norm_out(self, x, residual, weight, eps, **kw):
        self.calls.append((x, residual, weight, eps, kw))
        return torch.full_like(x, 1.0), torch.full_like(residual, 2.0)


def randn(shape, seed, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)


class Signatures(unittest.TestCase):
    def test_same_parameters_as_sglangs_fused_call(self):
        self.assertEqual(parameters(drop_in.allreduce_residual_rmsnorm),
                         parameters(fcf.flashinfer_allreduce_residual_rmsnorm))

    def test_fake_names_the_same_parameters(self):
        ours = [n for n, _, _ in parameters(drop_in.fake_allreduce_residual_rmsnorm)]
        theirs = [n for n, _, _ in parameters(fcf.fake_flashinfer_allreduce_residual_rmsnorm)]
        self.assertEqual(ours, theirs)
        x, r, w = randn((5, 64), 1), randn((5, 64), 2), randn((64,), 3)
        got = drop_in.fake_allreduce_residual_rmsnorm(x, r, w)
        want = fcf.fake_flashinfer_allreduce_residual_rmsnorm(x, r, w)
        self.assertEqual([(t.shape, t.dtype) for t in got], [(t.shape, t.dtype) for t in want])

    def test_registered_op_has_sglangs_schema(self):
        """As a torch op (SGLang's register_custom_op), the same schema as FlashInfer's but for
        the name and the mutation annotations (the drop-in mutates nothing)."""
        drop_in.register_op()
        ours = str(torch.ops.sglang.arfusion_allreduce_residual_rmsnorm.default._schema)
        theirs = str(torch.ops.sglang.flashinfer_allreduce_residual_rmsnorm.default._schema)
        strip = lambda s: s.split("(", 1)[1]  # noqa: E731
        import re

        self.assertEqual(strip(ours), re.sub(r"Tensor\(a\d+!\)", "Tensor", strip(theirs)))

    def test_sglangs_call_site(self):
        """SGLang's RMSNorm calls FlashInfer's function with keywords the drop-in takes, reads
        (norm_out, residual_out) and falls back when the first is None."""
        tree = ast.parse(inspect.getsource(sglang_layernorm._forward_with_allreduce_fusion))
        calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
                 and getattr(n.func, "id", None) == "flashinfer_allreduce_residual_rmsnorm"]
        self.assertEqual(len(calls), 1)
        names = {n for n, _, _ in parameters(drop_in.allreduce_residual_rmsnorm)}
        self.assertLessEqual({k.arg for k in calls[0].keywords}, names)
        source = inspect.getsource(sglang_layernorm._forward_with_allreduce_fusion)
        self.assertIn("if fused_result[0] is not None:", source)
        self.assertIn("return fused_result", source)


class Conventions(unittest.TestCase):
    def setUp(self):
        drop_in.disable()
        drop_in.reset_stats()

    tearDown = setUp

    def test_fuses_and_returns_the_communicators_tensors(self):
        comm = Recorder()
        drop_in.enable(comm, use_attn_tp_group=True, norm_rounding="before_weight")
        x, r, w = randn((8, 256), 1), randn((8, 256), 2), randn((256,), 3)
        x0, r0 = x.clone(), r.clone()
        norm, res = drop_in.allreduce_residual_rmsnorm(input_tensor=x, residual=r, weight=w,
                                                       eps=1e-5, max_token_num=2048,
                                                       use_attn_tp_group=True)
        self.assertEqual(len(comm.calls), 1)
        cx, cr, cw, ceps, ckw = comm.calls[0]
        self.assertTrue(cx is x and cr is r and cw is w)
        self.assertEqual((ceps, ckw), (1e-5, {"norm_rounding": "before_weight"}))
        self.assertTrue(torch.equal(norm, torch.full_like(x, 1.0)))
        self.assertTrue(torch.equal(res, torch.full_like(r, 2.0)))
        self.assertTrue(torch.equal(x, x0) and torch.equal(r, r0))
        self.assertEqual(drop_in.stats(), {"fused": 1})

    def test_declines_with_none_none_and_counts_why(self):
        comm = Recorder()
        x, r, w = randn((8, 256), 1), randn((8, 256), 2), randn((256,), 3)
        with self.assertLogs("sglang.arfusion", "WARNING"):
            self.assertEqual(drop_in.allreduce_residual_rmsnorm(x, r, w), (None, None))
        drop_in.enable(comm, use_attn_tp_group=True)
        # the other group has no communicator
        self.assertEqual(drop_in.allreduce_residual_rmsnorm(x, r, w, use_attn_tp_group=False),
                         (None, None))
        cases = [
            ((randn((65, 256), 4), randn((65, 256), 5), w), "exceed the communicator's max_tokens"),
            ((randn((8, 2048), 6), randn((8, 2048), 7), randn((2048,), 8)), "max_hidden"),
            ((x.float(), r.float(), w), "dtype"),
            ((randn((256, 8), 9).t(), r, w), "non-contiguous"),
            ((x, randn((4, 256), 10), w), "differ in shape"),
            ((x, r, randn((128,), 11)), "weight shape"),
        ]
        for args, why in cases:
            self.assertEqual(drop_in.allreduce_residual_rmsnorm(*args), (None, None), why)
            self.assertIn(why, drop_in.decline_reason(*args) or "", why)
        self.assertEqual(comm.calls, [])
        declined = {k: v for k, v in drop_in.stats().items() if k.startswith("declined")}
        self.assertEqual(sum(declined.values()), 2 + len(cases), declined)
        self.assertNotIn("fused", drop_in.stats())

    def test_applies_is_the_communicators_capacity(self):
        self.assertFalse(drop_in.applies(1))
        drop_in.enable(Recorder())
        self.assertEqual([drop_in.applies(n) for n in (0, 1, 64, 65)], [False, True, True, False])
        self.assertFalse(drop_in.applies(1, use_attn_tp_group=False))


class Groups:
    """An SGLang GroupCoordinator's attributes the setup reads."""

    def __init__(self, ranks, name):
        self.ranks, self.world_size, self.unique_name = ranks, len(ranks), name
        self.device_group = self.cpu_group = None


class Setup(unittest.TestCase):
    def tearDown(self):
        drop_in.disable()

    def test_one_communicator_per_set_of_ranks(self):
        import arfusion.torch as aft

        made = []

        def from_group(group, **kw):
            made.append(kw["name"])
            return Recorder()

        real = aft.Communicator.from_group
        aft.Communicator.from_group = staticmethod(from_group)
        try:
            same = drop_in.setup(64, 1024, torch.bfloat16,
                                 groups=[(True, Groups([0, 1], "attn_tp:0")),
                                         (False, Groups([0, 1], "moe_tp:0"))])
            self.assertIs(same[True], same[False])
            drop_in.disable()
            hybrid = drop_in.setup(64, 1024, torch.bfloat16,
                                   groups=[(True, Groups([0, 1], "attn_tp:0")),
                                           (False, Groups([0, 2], "moe_ep:0"))])
            self.assertIsNot(hybrid[True], hybrid[False])
            self.assertEqual(drop_in.setup(64, 1024, torch.bfloat16,
                                           groups=[(True, Groups([3], "attn_tp:3"))]), {})
        finally:
            aft.Communicator.from_group = real
        self.assertEqual(made, ["sglang:attn_tp:0", "sglang:attn_tp:0", "sglang:moe_ep:0"])


class ExamplePatch(unittest.TestCase):
    def test_applies_to_the_installed_sglang_and_compiles(self):
        self.assertTrue(os.path.isfile(PATCH), f"no example patch for SGLang {sglang.__version__}")
        if shutil.which("patch") is None:
            self.skipTest("the patch program is not installed")
        with tempfile.TemporaryDirectory() as tmp:
            files = []
            with open(PATCH) as f:
                for line in f:
                    if line.startswith("+++ b/"):
                        files.append(line[len("+++ b/"):].strip())
            self.assertTrue(files)
            for rel in files:
                os.makedirs(os.path.join(tmp, os.path.dirname(rel)), exist_ok=True)
                shutil.copy(os.path.join(SITE, rel), os.path.join(tmp, rel))
            with open(PATCH) as f:
                out = subprocess.run(["patch", "-p1", "--forward", "-d", tmp], stdin=f,
                                     capture_output=True, text=True)
            self.assertEqual(out.returncode, 0, out.stdout + out.stderr)
            self.assertNotIn("fuzz", out.stdout + out.stderr)
            self.assertNotIn("offset", out.stdout)
            for rel in files:
                compile(read(os.path.join(tmp, rel)), rel, "exec")
            patched = read(os.path.join(tmp, "sglang/srt/layers/layernorm.py"))
            tree = ast.parse(patched)
            fn = next(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef)
                      and n.name == "_forward_with_allreduce_fusion")
            calls = [n for n in ast.walk(fn) if isinstance(n, ast.Call)
                     and getattr(n.func, "attr", None) == "allreduce_residual_rmsnorm"]
            self.assertEqual(len(calls), 1)
            names = {n for n, _, _ in parameters(drop_in.allreduce_residual_rmsnorm)}
            self.assertLessEqual({k.arg for k in calls[0].keywords}, names)


if __name__ == "__main__":
    sys.exit(unittest.main())
