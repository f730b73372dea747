"""arfusion in SGLang's place for FlashInfer's fused all-reduce + residual add + RMSNorm (written
against SGLang 0.5.23).

SGLang fuses in model code: its RMSNorm's ``forward_with_allreduce_fusion`` calls
``flashinfer_allreduce_residual_rmsnorm(input_tensor, residual, weight, eps, max_token_num,
use_oneshot, trigger_completion_at_end, fp32_acc, use_attn_tp_group)``, which returns
``(norm_out, residual_out)`` as new tensors (its inputs are left as they were) or ``(None, None)``
when it declines, after which SGLang all-reduces, adds and normalizes unfused.
``allreduce_residual_rmsnorm`` below has that signature and those conventions, so it is called in
the same place (examples/sglang shows where). Its decisions depend only on shapes, dtypes and the
communicator's static facts, so every rank of the group decides alike; every decline is counted
(``stats()``) and its reason logged once, on the ``sglang.arfusion`` logger.

Ignored arguments, kept for the signature: ``max_token_num`` (the communicator's own capacity
decides), ``use_oneshot`` (arfusion's planner picks the algorithm, identically on every rank),
``trigger_completion_at_end`` (arfusion signals dependent launches after its last store),
``fp32_acc`` (arfusion always sums in fp32, in rank order).

Setup, collective over the group, before CUDA-graph capture (where SGLang calls
``pre_initialize_workspaces``): ``setup(max_token_num, hidden_dim, dtype)`` builds the
communicators from SGLang's attention-TP group and, where it differs, the group the MoE output is
reduced over (``use_attn_tp_group=False``), or ``enable(comm, use_attn_tp_group=...)`` registers
one built elsewhere.

``register_op()`` registers the function as ``torch.ops.sglang.arfusion_allreduce_residual_rmsnorm``
with SGLang's own ``register_custom_op`` and fake, as SGLang registers FlashInfer's (opaque to
torch.compile).
"""

from __future__ import annotations

import collections
import logging
import threading

log = logging.getLogger("sglang.arfusion")

TESTED_SGLANG_VERSIONS = ("0.5.23",)

_comms: dict[bool, object] = {}          # use_attn_tp_group -> Communicator
_norm_rounding: dict[bool, str] = {}
_stats = collections.Counter()
_logged: set = set()
_lock = threading.Lock()


def enable(comm, *, use_attn_tp_group: bool = True, norm_rounding: str = "once") -> None:
    """Registers ``comm`` (an arfusion.torch.Communicator over the same ranks as the SGLang group)
    as the one the drop-in uses for that group. norm_rounding "once" rounds the normalized,
    weighted value once, as FlashInfer's fused kernel and SGLang's CUDA RMSNorm do;
    "before_weight" rounds before the weight multiply (Hugging Face's LlamaRMSNorm)."""
    if norm_rounding not in ("once", "before_weight"):
        raise ValueError(f"arfusion: norm_rounding {norm_rounding!r} is neither 'once' nor "
                         "'before_weight'")
    with _lock:
        _comms[bool(use_attn_tp_group)] = comm
        _norm_rounding[bool(use_attn_tp_group)] = norm_rounding


def disable() -> None:
    """Forgets the registered communicators (the drop-in then declines every call)."""
    with _lock:
        _comms.clear()
        _norm_rounding.clear()


def communicator(use_attn_tp_group: bool = True):
    """The communicator registered for the group, or None."""
    return _comms.get(bool(use_attn_tp_group))


def stats() -> dict:
    """Counts of calls: "fused", and "declined: <reason>" for each reason a call was declined."""
    return dict(_stats)


def reset_stats() -> None:
    _stats.clear()
    _logged.clear()


def _decline(reason: str):
    _stats[f"declined: {reason}"] += 1
    if reason not in _logged:
        _logged.add(reason)
        log.warning("arfusion: declined (SGLang's unfused path runs): %s; later declines for "
                    "this reason are counted in arfusion.integrations.sglang.stats()", reason)
    return None, None


def decline_reason(input_tensor, residual, weight, use_attn_tp_group: bool = True):
    """Why the drop-in would decline this call (None: it fuses). Shapes, dtypes and the
    communicator's static facts only: the same answer on every rank."""
    comm = _comms.get(bool(use_attn_tp_group))
    group = "attention-TP" if use_attn_tp_group else "MoE-reduction"
    if comm is None:
        return f"no arfusion communicator for the {group} group (call setup() or enable())"
    if residual is None:
        return "no residual"
    if input_tensor.dim() < 1 or input_tensor.shape != residual.shape:
        return (f"input {tuple(input_tensor.shape)} and residual {tuple(residual.shape)} "
                "differ in shape")
    if not (input_tensor.is_contiguous() and residual.is_contiguous() and weight.is_contiguous()):
        return "a non-contiguous tensor"
    if input_tensor.dtype != comm.dtype or residual.dtype != comm.dtype:
        return (f"dtype {input_tensor.dtype}/{residual.dtype}, the communicator's is {comm.dtype}")
    hidden = int(input_tensor.shape[-1])
    tokens = input_tensor.numel() // hidden if hidden else 0
    if weight.dim() != 1 or int(weight.shape[0]) != hidden:
        return f"weight shape {tuple(weight.shape)} for hidden size {hidden}"
    if tokens == 0:
        return "no tokens"
    if tokens > comm.max_tokens:
        return f"{tokens} tokens exceed the communicator's max_tokens {comm.max_tokens}"
    if hidden > comm.max_hidden:
        return f"hidden size {hidden} exceeds the communicator's max_hidden {comm.max_hidden}"
    return None


def allreduce_residual_rmsnorm(
    input_tensor,
    residual,
    weight,
    eps: float = 1e-6,
    max_token_num: int = 2048,
    use_oneshot=None,
    trigger_completion_at_end: bool = False,
    fp32_acc: bool = True,
    use_attn_tp_group: bool = True,
):
    """SGLang's ``flashinfer_allreduce_residual_rmsnorm`` through arfusion: returns
    ``(norm_out, residual_out)``, new tensors, where residual_out = all_reduce(input_tensor) +
    residual and norm_out = RMSNorm(residual_out) * weight; or ``(None, None)`` when it declines
    (see decline_reason), after which the caller runs its unfused path. A failure of the fused
    call itself raises arfusion.ArfError (on every rank)."""
    reason = decline_reason(input_tensor, residual, weight, use_attn_tp_group)
    if reason is not None:
        return _decline(reason)
    key = bool(use_attn_tp_group)
    comm = _comms[key]
    norm_out, residual_out = comm.fused_add_rms_norm_out(
        input_tensor, residual, weight, float(eps), norm_rounding=_norm_rounding[key])
    _stats["fused"] += 1
    return norm_out, residual_out


def applies(batch_size: int, use_attn_tp_group: bool = True) -> bool:
    """The counterpart of SGLang's ``flashinfer_ar_fusion_applies(batch_size)``: whether a batch of
    this many tokens is given to arfusion (a communicator for the group, within its capacity)."""
    comm = _comms.get(bool(use_attn_tp_group))
    return comm is not None and 0 < batch_size <= comm.max_tokens


# ---- setup from SGLang's groups -----------------------------------------------------------------


def _groups():
    """(use_attn_tp_group, SGLang GroupCoordinator) for the two groups SGLang's fused call reduces
    over: the attention-TP group, and the group the MoE output is reduced over."""
    from sglang.srt.layers.flashinfer_comm_fusion import resolve_fusion_group

    return [(True, resolve_fusion_group(use_attn_tp_group=True)[2]),
            (False, resolve_fusion_group(use_attn_tp_group=False)[2])]


def setup(max_token_num: int, hidden_dim: int, dtype, *, norm_rounding: str = "once",
          groups=None) -> dict:
    """Collective over SGLang's fusion groups (every rank calls it, before CUDA-graph capture):
    an arfusion communicator for each group (``groups``: (use_attn_tp_group, GroupCoordinator)
    pairs, default those of SGLang's fused call), enabled for it. Two groups of the same ranks
    share one communicator (their calls come in one order on every rank, on one stream); groups
    of different ranks (hybrid expert + tensor parallelism) get one each, so a reduction never
    crosses into the other group's peers. Groups of one rank are skipped.
    Returns {use_attn_tp_group: communicator}."""
    import arfusion.torch as aft

    made, by_ranks = {}, {}
    for use_attn, group in (groups if groups is not None else _groups()):
        if group.world_size == 1:
            continue
        ranks = tuple(group.ranks)
        comm = by_ranks.get(ranks)
        if comm is None:
            comm = aft.Communicator.from_group(group.device_group, cpu_group=group.cpu_group,
                                               max_tokens=int(max_token_num),
                                               max_hidden=int(hidden_dim), dtype=dtype,
                                               name=f"sglang:{group.unique_name}")
            by_ranks[ranks] = comm
            log.info("arfusion: communicator %r over ranks %s: %d tokens x %d hidden, workspace "
                     "%.1f MiB", comm.name, list(ranks), int(max_token_num), int(hidden_dim),
                     getattr(comm, "workspace_bytes", 0) / 2**20)
        enable(comm, use_attn_tp_group=use_attn, norm_rounding=norm_rounding)
        made[use_attn] = comm
    return made


def fake_allreduce_residual_rmsnorm(input_tensor, residual, weight, eps: float = 1e-6,
                                    max_token_num: int = 2048, use_oneshot=None,
                                    trigger_completion_at_end: bool = False, fp32_acc: bool = True,
                                    use_attn_tp_group: bool = True):
    """Shapes for torch.compile (the real call returns tensors of these shapes when it fuses)."""
    import torch

    return torch.empty_like(input_tensor), torch.empty_like(residual)


def register_op():
    """``allreduce_residual_rmsnorm`` as ``torch.ops.sglang.arfusion_allreduce_residual_rmsnorm``,
    through SGLang's ``register_custom_op`` with a fake, as SGLang registers FlashInfer's (opaque
    to torch.compile). Unlike FlashInfer's registration it declares no mutated argument: the call
    leaves its inputs as they were. Returns the callable SGLang's decorator returns."""
    import typing

    import torch
    from sglang.srt.utils.custom_op import register_custom_op

    def arfusion_allreduce_residual_rmsnorm(input_tensor, residual, weight, eps=1e-6,
                                            max_token_num=2048, use_oneshot=None,
                                            trigger_completion_at_end=False, fp32_acc=True,
                                            use_attn_tp_group=True):
        return allreduce_residual_rmsnorm(input_tensor, residual, weight, eps, max_token_num,
                                          use_oneshot, trigger_completion_at_end, fp32_acc,
                                          use_attn_tp_group)

    # The schema torch infers from these (this module's annotations are strings).
    arfusion_allreduce_residual_rmsnorm.__annotations__ = {
        "input_tensor": torch.Tensor, "residual": torch.Tensor, "weight": torch.Tensor,
        "eps": float, "max_token_num": int, "use_oneshot": typing.Optional[bool],
        "trigger_completion_at_end": bool, "fp32_acc": bool, "use_attn_tp_group": bool,
        "return": typing.Tuple[torch.Tensor, torch.Tensor]}
    return register_custom_op(mutates_args=[], fake_impl=fake_allreduce_residual_rmsnorm)(
        arfusion_allreduce_residual_rmsnorm)


__all__ = ["allreduce_residual_rmsnorm", "applies", "communicator", "decline_reason", "disable",
           "enable", "fake_allreduce_residual_rmsnorm", "register_op", "reset_stats", "setup",
           "stats", "TESTED_SGLANG_VERSIONS"]
