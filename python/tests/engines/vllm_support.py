"""What the vLLM tests share: a VllmConfig as a vLLM worker holds it, vLLM's own backend configuring
its pass manager, and a compile of a function through that pass manager that stops where the
pass manager ends (before fix-functionalization, whose ops need vLLM's CUDA extension, and before
code generation). No GPU: fake tensors would do, but the layers here run on CPU tensors, since
vLLM's layers are made on the CPU; the pass decides from shapes and the communicator's facts, not
from the device.
"""

from __future__ import annotations

import unittest

try:
    import vllm
except ImportError:  # pragma: no cover - depends on the venv
    raise unittest.SkipTest("vllm is not installed")

import torch  # noqa: E402
import torch._inductor.config as inductor_config  # noqa: E402
from torch._inductor.compile_fx import compile_fx  # noqa: E402

import vllm.ir  # noqa: E402
from vllm.compilation.backends import VllmBackend  # noqa: E402
from vllm.compilation.passes.inductor_pass import pass_context  # noqa: E402
from vllm.config import (CompilationConfig, CompilationMode, DeviceConfig, PassConfig,  # noqa: E402
                         VllmConfig, set_current_vllm_config)
from vllm.config.utils import Range  # noqa: E402

import arfusion.torch as aft  # noqa: E402

VLLM_VERSION = vllm.__version__
BF16 = torch.bfloat16
GROUP = "tp:0"  # the unique name vLLM gives its first tensor-parallel group


def config(*, fuse_allreduce_rms: bool = True, mode=CompilationMode.VLLM_COMPILE, **kw) -> VllmConfig:
    """A VllmConfig as vLLM builds one for a compiled model (the device given explicitly: vLLM
    cannot infer one without a GPU), with the worker's process-wide IR settings applied as
    vLLM's WorkerBase.__init__ applies them."""
    cfg = VllmConfig(device_config=DeviceConfig(device="cpu"),
                     compilation_config=CompilationConfig(
                         mode=mode, pass_config=PassConfig(fuse_allreduce_rms=fuse_allreduce_rms)),
                     **kw)
    cfg.kernel_config.ir_op_priority.set_default()
    vllm.ir.set_default_torch_wrap(cfg.compilation_config.ir_enable_torch_wrap)
    return cfg


def facts(max_tokens: int = 2048, name: str = "vllm:" + GROUP) -> aft.CommunicatorFacts:
    """The communicator of a 2-rank TP group as the pass sees it (no GPU, no communicator)."""
    return aft.CommunicatorFacts(name, world_size=2, max_tokens=max_tokens, max_hidden=16384,
                                 ranks=[0, 1])


class _Stop(Exception):
    pass


class _Record:
    """A pass that records the call targets of the graph it is given (for the pass manager's
    list of passes: callable, uuid, is_applicable_for_range)."""

    def __init__(self, into: list):
        self.into = into

    def __call__(self, graph):
        self.into.extend(_targets(graph))

    def uuid(self):
        return "record"

    def is_applicable_for_range(self, compile_range) -> bool:
        return True


class Compiled:
    """fn compiled through the pass manager of vLLM's own backend (VllmBackend.configure_post_pass,
    as vLLM calls it for a compiled model) for one compile range: ``targets_at_entry`` (the graph
    the pass manager was given), ``targets`` (the graph after all its passes up to
    fix-functionalization), and ``backend`` (the VllmBackend, whose pass_manager ran)."""

    def __init__(self, cfg: VllmConfig, fn, inputs, compile_range: Range = Range(1, 2048)):
        self.backend = VllmBackend(cfg)
        self.backend.configure_post_pass()
        pm = self.backend.pass_manager
        self.targets_at_entry: list[str] = []
        self.targets: list[str] = []
        pm.passes.insert(0, _Record(self.targets_at_entry))
        done = self.targets

        def stop(graph):
            done.extend(_targets(graph))
            raise _Stop()

        pm.fix_functionalization = stop
        torch._dynamo.reset()
        with inductor_config.patch({"fx_graph_cache": False}):
            compiled = torch.compile(fn, fullgraph=True, dynamic=False,
                                     backend=self._inductor(compile_range))
            try:
                with torch.no_grad(), set_current_vllm_config(cfg):
                    compiled(*inputs)
            except Exception as e:  # noqa: BLE001 - _Stop arrives wrapped by Dynamo / Inductor
                if not done or ("_Stop" not in repr(e) and not isinstance(e, _Stop)):
                    raise

    def _inductor(self, compile_range: Range):
        inductor_options = self.backend.inductor_config

        def backend(gm, example_inputs):
            with inductor_config.patch(inductor_options), pass_context(compile_range):
                return compile_fx(gm, example_inputs)

        return backend


def _targets(graph) -> list[str]:
    return [str(n.target) for n in graph.nodes if n.op == "call_function"]


def randn(shape, seed, dtype=BF16):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=g).to(dtype)
