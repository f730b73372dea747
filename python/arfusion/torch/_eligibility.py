"""Eligibility of a matched all-reduce for AllReduceFusionPass (arfusion.torch.compile): which
communicator of the pass it runs on (the process group's ranks, or the pass's group_map), and
whether arfusion's own planner takes the shape, so that every rank decides identically. A refusal is
_NoMatch with the reason.

The planner is arfPlanShape on a live Communicator, or arfPlanFromFacts for a CommunicatorFacts (a
communicator described by its facts: no GPU, no communicator needed; the same decisions as
arfPlanShape on a communicator with those facts and no tuning table).
"""

from __future__ import annotations

import torch

import arfusion as _arf
from arfusion._lib import ArfError

from . import ops as _ops
from ._comm import TORCH_TO_ARF_DTYPE, Communicator, get_communicator
from ._match import _NoMatch

# ---- a communicator described by its facts -------------------------------------------------------


class CommunicatorFacts:
    """A communicator as the compile pass sees it, without creating one: its registry name, its
    activation dtype, the global ranks of its process group and the facts its planner decides from
    (arfPlanFacts_t). The pass plans with arfPlanFromFacts and names ``name`` in the fused ops it
    inserts, so wherever the compiled graph runs, a Communicator of that name with these facts must
    exist (``Communicator.from_group(..., name=name)``; ``CommunicatorFacts.of(comm)`` copies a live
    one's facts). For compiling where no communicator exists (no GPU), and for the pass's tests.

    ranks: the global ranks of the torch.distributed group whose all-reduces it replaces (None:
    unknown, matched by world size as for Communicator.from_nccl).
    max_ctas: arfCommConfig_t::max_ctas of the communicator (0: no bound); it caps the planned
    grids, so facts without a live communicator's bound would plan other grids than it runs.
    """

    alive = True  # nothing to destroy: always usable by the pass

    def __init__(self, name: str, *, world_size: int, max_tokens: int, max_hidden: int,
                 dtype: torch.dtype = torch.bfloat16, ranks: list[int] | None = None,
                 oneshot_max_tokens: int = 0, sm_count: int = 132, ranks_per_device: int = 1,
                 nccl: bool = False, max_ctas: int = 0):
        if dtype not in (torch.bfloat16, torch.float16):
            raise ValueError(f"arfusion: activation dtype must be bf16 or fp16, not {dtype}")
        self.name = name
        self.dtype = dtype
        self.world_size = int(world_size)
        self.max_tokens = int(max_tokens)
        self.max_hidden = int(max_hidden)
        self.ranks = list(ranks) if ranks is not None else None
        self._facts = _arf.plan_facts(world_size=self.world_size, dtype=int(TORCH_TO_ARF_DTYPE[dtype]),
                                      max_tokens=self.max_tokens, max_hidden=self.max_hidden,
                                      oneshot_max_tokens=int(oneshot_max_tokens),
                                      sm_count=int(sm_count), ranks_per_device=int(ranks_per_device),
                                      nccl=int(bool(nccl)), max_ctas=int(max_ctas))

    @classmethod
    def of(cls, comm: Communicator) -> "CommunicatorFacts":
        """The facts of a live communicator (its name, dtype, ranks and planner facts)."""
        f = comm.plan_facts()
        return cls(comm.name, world_size=f["world_size"], max_tokens=f["max_tokens"],
                   max_hidden=f["max_hidden"], dtype=comm.dtype, ranks=getattr(comm, "ranks", None),
                   oneshot_max_tokens=f["oneshot_max_tokens"], sm_count=f["sm_count"],
                   ranks_per_device=f["ranks_per_device"], nccl=bool(f["nccl"]),
                   max_ctas=f["max_ctas"])

    def plan_facts(self) -> dict:
        f = self._facts
        return {name: getattr(f, name) for name, *_ in f._fields_
                if name not in ("struct_size", "version")}

    def plan_shape(self, args) -> _arf.Plan:
        return _arf.plan_from_facts(self._facts, args)

    def __repr__(self) -> str:
        return (f"CommunicatorFacts({self.name!r}, world_size={self.world_size}, "
                f"dtype={self.dtype}, ranks={self.ranks}, max_tokens={self.max_tokens})")


# ---- the all-reduce's communicator ---------------------------------------------------------------


def _lookup(name: str, comms):
    """A communicator of the pass by name (CommunicatorFacts included), else the registry's."""
    for c in comms:
        if c.name == name:
            return c
    return get_communicator(name)


def comm_for_c10d_group(group_name: str, comms, group_map: dict):
    """The pass's communicator for a torch.distributed process group: group_map's entry, else the
    one whose global ranks equal the group's (or the only one of that world size whose ranks are
    unknown)."""
    if group_name in group_map:
        return _lookup(group_map[group_name], comms)
    try:
        import torch.distributed as dist
        from torch.distributed.distributed_c10d import _resolve_process_group

        ranks = list(dist.get_process_group_ranks(_resolve_process_group(group_name)))
    except Exception as e:  # noqa: BLE001
        raise _NoMatch(f"process group {group_name!r} cannot be resolved ({e}); "
                       "give group_map") from None
    hits = [c for c in comms if getattr(c, "ranks", None) == ranks]
    if len(hits) == 1:
        return hits[0]
    unknown = [c for c in comms if getattr(c, "ranks", None) is None
               and c.world_size == len(ranks)]
    if not hits and len(unknown) == 1:
        return unknown[0]
    raise _NoMatch(f"no communicator of the pass has the ranks {ranks} of group "
                   f"{group_name!r} (communicators: "
                   + ", ".join(f"{c.name}={getattr(c, 'ranks', None)}" for c in comms) + ")")


def comm_for_engine_group(label: str, group, comms, group_map: dict):
    """The pass's communicator for an engine's all-reduce op naming its own group (vLLM's and
    SGLang's GroupCoordinator.unique_name, e.g. "tp:0"; None for ops that name none): group_map's
    entry, else the pass's only communicator."""
    if group is not None and str(group) in group_map:
        return _lookup(group_map[str(group)], comms)
    if len(comms) == 1:
        return comms[0]
    if group is None:
        raise _NoMatch(f"{label} names no group: with several communicators the pass cannot tell "
                       "which one it reduces over (it fuses it with a single communicator)")
    raise _NoMatch(f"{label} group {group!r}: the pass has several communicators and group_map "
                   "has no entry for it")


# ---- the planner ---------------------------------------------------------------------------------


def _shape_args(comm, pattern, hidden, rows, weight_dtype, norm, algorithm, scale_rule, sandwich):
    act = TORCH_TO_ARF_DTYPE[comm.dtype]
    gdt = TORCH_TO_ARF_DTYPE[weight_dtype] if weight_dtype is not None else act
    return _arf.fused_args(pattern=int(pattern), algorithm=_ops.algorithm_value(algorithm),
                           dtype=int(act), num_tokens=int(rows), hidden=int(hidden),
                           gamma_dtype=int(gdt), gamma_plus_one=int(bool(norm.gamma_plus_one)),
                           eps=float(norm.eps),
                           norm_rounding=_ops.norm_rounding_value(norm.rounding),
                           scale_rule=_ops.scale_rule_value(scale_rule),
                           post_gamma=1 if sandwich else None)  # the planner reads NULL or not


def check_plan(comm, pattern, hidden, rows, weight_dtype, norm, algorithm: str,
               assume_max_tokens: bool, scale_rule: str = "divide", sandwich: bool = False):
    """_NoMatch unless the planner accepts the call (with the scale rule the fused op will get; a
    sandwich call when `sandwich`) at its row count; a symbolic count at both ends of its range
    (the upper end comm.max_tokens only under assume_max_tokens)."""
    def plan_at(t):
        args = _shape_args(comm, pattern, hidden, t, weight_dtype, norm, algorithm, scale_rule,
                           sandwich)
        try:
            return comm.plan_shape(args)
        except ArfError as e:
            raise _NoMatch(f"the planner refuses T={t}, H={hidden} "
                           f"({_arf.pattern_name(pattern)}): {e.status}: {e.message}") from None

    if isinstance(rows, int):
        plan_at(rows)
        return
    lo, hi = _sym_bounds(rows)
    if hi is None:
        if not assume_max_tokens:
            raise _NoMatch("dynamic token count without an upper bound (mark_dynamic(..., "
                           "max=...) or assume_max_tokens=True)")
        hi = comm.max_tokens
    plan_at(max(1, lo))
    plan_at(hi)


def _sym_bounds(expr):
    """(lower, upper or None) of a SymInt row count."""
    try:
        node = expr.node
        vr = node.shape_env.bound_sympy(node.expr)
        lo = int(vr.lower) if vr.lower.is_finite else 1
        hi = int(vr.upper) if vr.upper.is_finite else None
        return lo, hi
    except Exception:  # noqa: BLE001
        return 1, None
