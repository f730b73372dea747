"""Shared setup of the compile pass's CPU tests (torch from PyPI, no GPU).

A fake process group of world size 2 (torch.testing._internal.distributed.fake_pg: collectives
return at once, an all-reduce leaves its input as it is) lets Dynamo and Inductor produce the graphs
of a real tensor-parallel job, and the pass plans with a CommunicatorFacts (arfPlanFromFacts: no GPU,
no communicator). Two ways to compile:

  graph(fn, specs, p, device="cuda")  the post-grad graph as for a GPU: fake tensors on the given
      device (CUDA needs no driver for fake tensors), Inductor's passes and ours, then compilation
      stops before code generation; returns the graph module after the pass
  run(fn, inputs, p)  the whole compile on CPU tensors and a run of the compiled model (the fused ops
      execute through cpu_kernels.py; Inductor emulates eager's bf16 roundings in the rest);
      returns the outputs

The environment: torch >= 2.10 (else every test is skipped) and the arfusion package installed
into that interpreter (pip install --no-build-isolation ./python: the op library is part of it).
"""

from __future__ import annotations

import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON_DIR = os.path.abspath(os.path.join(HERE, "..", ".."))  # python/ of the source tree (paths
# of files beside the tests; the package itself is the installed one)
if HERE not in sys.path:
    sys.path.insert(0, HERE)

TORCH_MIN = (2, 10)
try:
    import torch
except ImportError:  # pragma: no cover - depends on the machine
    raise unittest.SkipTest("torch is not installed")
TORCH_VERSION = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
if TORCH_VERSION < TORCH_MIN:
    raise unittest.SkipTest(f"torch {torch.__version__} < 2.10")

import torch._inductor.config as inductor_config  # noqa: E402
import torch.distributed as dist  # noqa: E402

import arfusion.torch as aft  # noqa: E402
import cpu_kernels  # noqa: E402
import engine_ops  # noqa: E402

WORLD = 2
BF16 = torch.bfloat16


class _Stop(Exception):
    """Raised after the pass to end a compile before code generation."""


def setup() -> None:
    """Once per process: the fake process group, no compile caches (a cache hit skips the pass),
    the engines' stand-in ops and the CPU kernels of arfusion's ops."""
    if dist.is_initialized():
        return
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=WORLD)
    inductor_config.fx_graph_cache = False
    try:
        import torch._functorch.config as functorch_config

        functorch_config.enable_autograd_cache = False
    except (ImportError, AttributeError):
        pass
    engine_ops.register()
    cpu_kernels.register()


def comm(name: str = "tp", **kw) -> aft.CommunicatorFacts:
    """The world group's communicator as the pass sees it (ranks [0, 1]; bf16 unless given)."""
    kw.setdefault("world_size", WORLD)
    kw.setdefault("ranks", list(range(WORLD)))
    kw.setdefault("max_tokens", 2048)
    kw.setdefault("max_hidden", 16384)
    return aft.CommunicatorFacts(name, **kw)


def make_pass(c=None, **kw) -> aft.AllReduceFusionPass:
    return aft.AllReduceFusionPass(c if c is not None else comm(), **kw)


def _refaking_backend(post_pass):
    """Inductor with `post_pass` as the post-grad custom pass, given Dynamo's own fake tensors:
    torch 2.10's Dynamo hands a backend the caller's fake tensors, which belong to another fake
    mode than the tracing context's."""
    from torch._inductor.compile_fx import compile_fx

    def backend(gm, example_inputs):
        fm = torch._guards.TracingContext.get().fake_mode

        def refake(x):
            if not isinstance(x, torch.Tensor):
                return x
            meta = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
            return fm.fake_tensor_converter.from_meta_and_device(fm, meta, x.device)

        with inductor_config.patch({"post_grad_custom_post_pass": post_pass}):
            return compile_fx(gm, [refake(x) for x in example_inputs])

    return backend


def fake_inputs(specs, device="cuda"):
    """Fake tensors for specs: (shape, dtype) tuples (random data has no meaning here)."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    mode = FakeTensorMode()
    with mode:
        return [torch.empty(s, dtype=d, device=device) for s, d in specs]


def graph(fn, specs, p, device: str = "cuda"):
    """The post-grad graph module of fn after the pass p, compiled for inputs of `specs` (fake
    tensors on `device`) or for the given inputs (tensors and other arguments, as they are);
    compilation stops there, before code generation."""
    setup()
    is_spec = [isinstance(t, tuple) and len(t) == 2 and isinstance(t[1], torch.dtype) for t in specs]
    inputs = fake_inputs(specs, device) if specs and all(is_spec) else list(specs)
    seen = []

    def capture(g):
        seen.append(g.owning_module)  # compilation stops here: nothing changes it afterwards
        raise _Stop()

    p.then = capture
    torch._dynamo.reset()
    compiled = torch.compile(fn, fullgraph=True, dynamic=False, backend=_refaking_backend(p))
    try:
        with torch.no_grad():
            compiled(*inputs)
    except Exception as e:  # noqa: BLE001 - _Stop arrives wrapped by Dynamo / Inductor
        if not seen:
            raise
        if "_Stop" not in repr(e) and not isinstance(e, _Stop):
            raise
    finally:
        p.then = None
    return seen[0]


def compile_cpu(fn, p, dynamic=None):
    """fn compiled with the pass for CPU tensors (compiled at its first call)."""
    setup()
    torch._dynamo.reset()
    # emulate_precision_casts: the unfused parts of the compiled model round every bf16 result
    # as eager torch does, so the whole model compares bit for bit with the eager one
    options = {"post_grad_custom_post_pass": p, "emulate_precision_casts": True}
    if TORCH_VERSION < (2, 11):
        # torch 2.10's vectorized CPU code generation fails under emulate_precision_casts
        # (CppVecOverrides.to_dtype lacks use_compute_types): scalar code instead
        options["cpp.simdlen"] = 1
    return torch.compile(fn, fullgraph=True, dynamic=dynamic, options=options)


def run(fn, inputs, p, dynamic=None):
    """fn compiled with the pass on CPU tensors and run: its outputs (a tuple)."""
    compiled = compile_cpu(fn, p, dynamic)
    with torch.no_grad():
        out = compiled(*inputs)
    return out if isinstance(out, tuple) else (out,)


def targets(gm) -> list[str]:
    """The call_function targets of a graph module, as strings, in order."""
    return [str(n.target) for n in gm.graph.nodes if n.op == "call_function"]


def bits_equal(a, b) -> bool:
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    return a.numel() == 0 or torch.equal(a.contiguous().view(torch.uint8),
                                         b.contiguous().view(torch.uint8))


def randn(shape, seed, dtype=BF16, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return (scale * torch.randn(shape, generator=g)).to(dtype)


class PassTestCase(unittest.TestCase):
    """Assertions on a pass's stats, with the summary in every failure message."""

    @classmethod
    def setUpClass(cls):
        setup()

    def assertReplaced(self, p, n, *kind_parts):
        s = p.stats.summary()
        self.assertEqual(p.stats.replaced, n, s)
        for part in kind_parts:
            self.assertTrue(any(part in k for k in p.stats.kinds), f"no kind with {part!r}:\n{s}")

    def assertLeft(self, p, *reason_parts, count=1):
        s = p.stats.summary()
        self.assertEqual(len(p.stats.rejected), count, s)
        for part in reason_parts:
            self.assertTrue(any(part in why for _, why in p.stats.rejected),
                            f"no reason with {part!r}:\n{s}")

    def assertNote(self, p, *parts):
        s = p.stats.summary()
        for part in parts:
            self.assertTrue(any(part in n for n in p.stats.notes), f"no note with {part!r}:\n{s}")

    def assertBits(self, got, want, what=""):
        self.assertTrue(bits_equal(got, want),
                        f"{what}: differs in {int((got.float() != want.float()).sum())} of "
                        f"{want.numel()} elements" if got.shape == want.shape else
                        f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}")
