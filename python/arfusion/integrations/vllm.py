"""arfusion's compile pass and communicator inside vLLM (written against vLLM 0.34.0).

Where the pass runs. vLLM's post-grad pass manager (``PostGradPassManager``) runs, in order: its
own passes and the one in ``compilation_config.inductor_compile_config["post_grad_custom_post_pass"]``,
then a cleanup, then the lowering of vLLM's IR ops (``VllmIRLoweringPass``), then clone
elimination, cleanup and fix-functionalization. Until the lowering, a model's RMSNorm is an
opaque ``torch.ops.vllm_ir.rms_norm`` / ``fused_add_rms_norm`` node, which arfusion's pass (it
matches torch's own RMSNorm forms) cannot see through: installed as a plain custom pass it would
fuse nothing. ``install_pass`` therefore installs ``AfterIrLowering`` in that slot: it runs vLLM's
own IR lowering first (the same ``VllmIRLoweringPass``, with the IR op priority vLLM set at worker
start, so the graph is the one the pass manager would lower a moment later; its later lowering
then finds nothing left), then arfusion's pass on the lowered graph. The IR priority must put
``native`` first for rms_norm and fused_add_rms_norm (vLLM's default when compiling with
Inductor); another provider lowers to its own opaque kernel, which ``check_config`` refuses.

Why the slot and not a wrapper of the pass manager: the slot's pass is part of vLLM's compile
cache key (vLLM hashes ``inductor_compile_config``, a pass by its ``uuid()``), so artifacts
compiled with arfusion are never loaded by a run without it, and the other way round.

The communicator. ``setup_worker(vllm_config)`` is collective over vLLM's tensor-parallel group
and runs in each worker after vLLM's distributed initialization (``get_tp_group()`` exists, the
CUDA device is set) and before the model is compiled: it builds the communicator from the group's
device group with its gloo ``cpu_group`` for the rendezvous, sized for
``max_num_batched_tokens`` tokens of the model's hidden size and dtype, then calls
``install_pass``, which also turns vLLM's own all-reduce + RMSNorm fusion off
(``PassConfig.fuse_allreduce_rms``, logged). ``install_worker_hook()`` arranges that call through
vLLM's worker (the plugin, ``arfusion.integrations.vllm_plugin``, does this); an engine that
builds its own worker calls ``setup_worker`` itself.

Messages go to the ``vllm.arfusion`` logger, so vLLM's log shows them.
"""

from __future__ import annotations

import hashlib
import logging
import os

log = logging.getLogger("vllm.arfusion")

TESTED_VLLM_VERSIONS = ("0.34.0",)
MAX_TOKENS_ENV = "ARFUSION_VLLM_MAX_TOKENS"
_IR_OPS = ("rms_norm", "fused_add_rms_norm")


class ArfusionVllmError(RuntimeError):
    """arfusion cannot run in this vLLM process as configured; the message says what to change."""


def _vllm_modules():
    """vLLM's modules this integration uses, imported together so a missing one is one error."""
    try:
        import vllm
        from vllm.compilation.passes import inductor_pass
        from vllm.compilation.passes.ir import lowering_pass
        from vllm.config import CompilationMode
    except ImportError as e:
        raise ArfusionVllmError(
            f"arfusion: this vLLM lacks a module the integration needs ({e}); it is written "
            f"against vLLM {', '.join(TESTED_VLLM_VERSIONS)}") from e
    return vllm, inductor_pass, lowering_pass, CompilationMode


# ---- the pass in vLLM's pass manager -------------------------------------------------------------

_pass_class = None


def _after_ir_lowering_class():
    """AfterIrLowering, a subclass of vLLM's InductorPass (made on first use: vLLM is imported
    only then)."""
    global _pass_class
    if _pass_class is not None:
        return _pass_class
    _, inductor_pass, lowering_pass, _ = _vllm_modules()

    class AfterIrLowering(inductor_pass.InductorPass):
        """vLLM's IR lowering, then arfusion's pass (then ``then``, a pass that held the slot
        before). Applies to compile ranges whose largest token count the communicator takes."""

        def __init__(self, vllm_config, arf_pass, *, max_tokens: int, then=None):
            self.lowering = lowering_pass.VllmIRLoweringPass(vllm_config)
            self.arf_pass = arf_pass
            self.max_tokens = int(max_tokens)
            self.then = then
            self.graphs = 0

        def is_applicable_for_range(self, compile_range) -> bool:
            # Rank-symmetric: every rank compiles the same ranges. A range past max_tokens is
            # compiled unfused (and the pass manager lowers the IR itself).
            fits = compile_range.end <= self.max_tokens
            if not fits:
                log.info("arfusion: compile range %s exceeds the communicator's max_tokens %d: "
                         "left unfused", compile_range, self.max_tokens)
            return fits

        def __call__(self, graph) -> None:
            self.lowering(graph)
            before = self.arf_pass.stats.replaced
            self.arf_pass(graph)
            self.graphs += 1
            stats = self.arf_pass.history[-1] if self.arf_pass.history else None
            if stats is not None:
                level = logging.WARNING if stats.rejected else logging.INFO
                log.log(level, "arfusion: %d all-reduce(s) fused in this graph\n%s",
                        self.arf_pass.stats.replaced - before, stats.summary())
            if self.then is not None:
                self.then(graph)

        def uuid(self) -> str:
            h = hashlib.sha256()
            h.update(b"arfusion.integrations.vllm.AfterIrLowering\0")
            with open(os.path.abspath(__file__), "rb") as f:
                h.update(f.read())
            h.update(str(self.lowering.uuid()).encode())
            arf_uuid = self.arf_pass.uuid()
            then_uuid = self.then.uuid() if self.then is not None else "-"
            if arf_uuid is None or then_uuid is None:
                raise ArfusionVllmError("arfusion: a pass without a cache key is in vLLM's "
                                        "post-grad slot; vLLM's compile cache needs one")
            h.update(f"{arf_uuid}|{then_uuid}|{self.max_tokens}".encode())
            return h.hexdigest()

    _pass_class = AfterIrLowering
    return _pass_class


def check_config(vllm_config) -> None:
    """Raises ArfusionVllmError unless the pass can run in this configuration: vLLM's own
    compilation (mode VLLM_COMPILE) with Inductor, and the native implementation first in the IR
    priority of rms_norm and fused_add_rms_norm."""
    _, _, _, CompilationMode = _vllm_modules()
    cc = vllm_config.compilation_config
    problems = []
    if cc.mode != CompilationMode.VLLM_COMPILE:
        problems.append(f"compilation mode is {getattr(cc.mode, 'name', cc.mode)}, the pass needs "
                        "VLLM_COMPILE (no --enforce-eager, no -O0)")
    if cc.backend != "inductor":
        problems.append(f"compilation backend is {cc.backend!r}, the pass needs 'inductor'")
    priority = getattr(getattr(vllm_config, "kernel_config", None), "ir_op_priority", None)
    for op in _IR_OPS:
        order = list(getattr(priority, op, None) or []) if priority is not None else []
        if order and order[0] != "native":
            problems.append(f"the IR priority of {op} starts with {order[0]!r}: that provider "
                            "lowers to an opaque kernel the pass cannot fuse; put 'native' first "
                            f"(--ir-op-priority {op}=native; unset VLLM_USE_OINK_OPS)")
    if problems:
        raise ArfusionVllmError("arfusion: cannot fuse in this vLLM configuration: "
                                + "; ".join(problems))


def turn_off_vllm_fusion(vllm_config) -> None:
    """PassConfig.fuse_allreduce_rms off (vLLM's FlashInfer fusion would claim the same sites
    first and allocate its own workspace); says so when it was on."""
    pass_config = vllm_config.compilation_config.pass_config
    if pass_config.fuse_allreduce_rms:
        log.warning("arfusion: turning vLLM's all-reduce + RMSNorm fusion off "
                    "(PassConfig.fuse_allreduce_rms was on): arfusion's pass fuses these sites")
    pass_config.fuse_allreduce_rms = False


def install_pass(vllm_config, comm, *, group_name: str, **pass_options):
    """Installs arfusion's pass, after vLLM's IR lowering, in vLLM's post-grad custom pass slot of
    ``vllm_config`` (before vLLM compiles the model), and turns vLLM's own all-reduce fusion off.

    comm: the arfusion Communicator (or anything AllReduceFusionPass takes, e.g. the facts of one)
        for vLLM's process group ``group_name`` (``get_tp_group().unique_name``: the name
        ``torch.ops.vllm.all_reduce`` carries in the graph).
    pass_options: AllReduceFusionPass's options; by default assume_max_tokens=True (vLLM's
        compile ranges end at max_num_batched_tokens, and ranges past the communicator's
        max_tokens are not given to the pass) and fp32_residual_add=True (vLLM's native
        fused_add_rms_norm adds the residual in fp32).
    Returns the installed pass (its ``arf_pass.stats`` count what was fused).
    """
    import arfusion.torch as aft

    check_config(vllm_config)
    turn_off_vllm_fusion(vllm_config)
    pass_options.setdefault("assume_max_tokens", True)
    pass_options.setdefault("fp32_residual_add", True)
    group_map = dict(pass_options.pop("group_map", {}) or {})
    group_map.setdefault(group_name, comm.name)
    arf_pass = aft.AllReduceFusionPass(comm, group_map=group_map, **pass_options)
    icc = vllm_config.compilation_config.inductor_compile_config
    previous = icc.get("post_grad_custom_post_pass")
    if previous is not None and getattr(previous, "arf_pass", None) is not None:
        raise ArfusionVllmError("arfusion: the pass is already installed in this vLLM config")
    p = _after_ir_lowering_class()(vllm_config, arf_pass, max_tokens=comm.max_tokens,
                                   then=previous)
    icc["post_grad_custom_post_pass"] = p
    log.info("arfusion: pass installed in vLLM's post-grad pass manager, after vLLM's IR lowering "
             "(all-reduces of group %r fused through communicator %r, compile ranges up to %d "
             "tokens)%s", group_name, comm.name, comm.max_tokens,
             "; the pass that held the slot runs after it" if previous is not None else "")
    return p


# ---- the communicator at worker start ------------------------------------------------------------


def _max_tokens(vllm_config) -> int:
    budget = int(vllm_config.scheduler_config.max_num_batched_tokens)
    text = os.environ.get(MAX_TOKENS_ENV, "").strip()
    if not text:
        return budget
    try:
        value = int(text)
    except ValueError:
        raise ArfusionVllmError(f"arfusion: {MAX_TOKENS_ENV}={text!r} is not a token count") from None
    if value <= 0:
        raise ArfusionVllmError(f"arfusion: {MAX_TOKENS_ENV}={value} must be positive")
    return min(value, budget)


def _split_compile_ranges(vllm_config, max_tokens: int) -> None:
    """A compile range ending at max_tokens, so batches up to it are fused when the communicator
    is smaller than vLLM's token budget (identical on every rank; before the first compile)."""
    cc = vllm_config.compilation_config
    budget = int(vllm_config.scheduler_config.max_num_batched_tokens)
    if max_tokens >= budget:
        return
    endpoints = list(cc.compile_ranges_endpoints or [])
    if max_tokens not in endpoints:
        cc.compile_ranges_endpoints = sorted(set(endpoints + [max_tokens]))
        log.info("arfusion: compile ranges split at %d tokens (%s); larger batches run unfused",
                 max_tokens, MAX_TOKENS_ENV)


def setup_worker(vllm_config, *, group=None, max_tokens: int | None = None, name: str | None = None):
    """In a vLLM worker, after vLLM's distributed initialization and before the model is compiled:
    the arfusion communicator over vLLM's tensor-parallel group (``group``: a vLLM
    GroupCoordinator, default ``get_tp_group()``), and the pass installed with ``install_pass``.
    Collective over the group. Returns the communicator, or None when the group has one rank
    (nothing to all-reduce). Raises ArfusionVllmError or ArfError (on every rank) when it cannot.

    max_tokens: the communicator's token capacity (default max_num_batched_tokens, or
        ARFUSION_VLLM_MAX_TOKENS when smaller; compile ranges are split there).
    """
    import torch

    import arfusion.torch as aft

    if group is None:
        from vllm.distributed import get_tp_group

        group = get_tp_group()
    if group.world_size == 1:
        log.info("arfusion: tensor parallelism is 1: no all-reduce to fuse; not installed")
        return None
    check_config(vllm_config)
    model = vllm_config.model_config
    dtype = model.dtype
    if dtype not in (torch.bfloat16, torch.float16):
        raise ArfusionVllmError(f"arfusion: the model's dtype is {dtype}; the fused kernels take "
                                "bfloat16 or float16 activations")
    tokens = int(max_tokens) if max_tokens is not None else _max_tokens(vllm_config)
    hidden = int(model.get_hidden_size())
    comm = aft.Communicator.from_group(
        group.device_group, cpu_group=group.cpu_group, max_tokens=tokens, max_hidden=hidden,
        dtype=dtype, name=name or f"vllm:{group.unique_name}")
    log.info("arfusion: communicator %r over ranks %s (rank %d of %d): %d tokens x %d hidden %s, "
             "workspace %.1f MiB", comm.name, list(group.ranks), comm.rank, comm.world_size,
             tokens, hidden, str(dtype).replace("torch.", ""),
             getattr(comm, "workspace_bytes", 0) / 2**20)
    _split_compile_ranges(vllm_config, tokens)
    install_pass(vllm_config, comm, group_name=group.unique_name)
    return comm


def install_worker_hook() -> None:
    """Makes every vLLM GPU worker of this process call ``setup_worker`` right after vLLM's
    distributed initialization (``vllm.v1.worker.gpu_worker.init_worker_distributed_environment``,
    which ``Worker.init_device`` calls before it takes its memory snapshot, so the workspace counts
    as baseline memory as NCCL's buffers do). Idempotent. Imports arfusion.torch first, so missing
    operators fail here, in every vLLM process, rather than at the first worker."""
    import arfusion.torch  # noqa: F401  (raises ImportError naming what is missing)

    vllm, _, _, _ = _vllm_modules()
    if vllm.__version__ not in TESTED_VLLM_VERSIONS:
        log.warning("arfusion: written against vLLM %s; this is vLLM %s",
                    ", ".join(TESTED_VLLM_VERSIONS), vllm.__version__)
    try:
        from vllm.v1.worker import gpu_worker
    except ImportError as e:
        raise ArfusionVllmError(f"arfusion: vLLM's GPU worker module cannot be imported ({e})") from e
    original = getattr(gpu_worker, "init_worker_distributed_environment", None)
    if original is None:
        raise ArfusionVllmError("arfusion: this vLLM has no "
                                "vllm.v1.worker.gpu_worker.init_worker_distributed_environment to "
                                "hook; call arfusion.integrations.vllm.setup_worker from the worker")
    if getattr(original, "arfusion_hook", False):
        return

    def init_worker_distributed_environment(vllm_config, *args, **kwargs):
        result = original(vllm_config, *args, **kwargs)
        setup_worker(vllm_config)
        return result

    init_worker_distributed_environment.arfusion_hook = True
    init_worker_distributed_environment.__wrapped__ = original
    gpu_worker.init_worker_distributed_environment = init_worker_distributed_environment
    log.info("arfusion: ARFUSION_VLLM=1: each worker builds its communicator after vLLM's "
             "distributed initialization and installs the pass")


__all__ = ["ArfusionVllmError", "check_config", "install_pass", "install_worker_hook",
           "setup_worker", "turn_off_vllm_fusion", "TESTED_VLLM_VERSIONS"]
