"""Eligibility of a matched all-reduce for AllReduceFusionPass (arfusion.torch.compile): which
communicator of the pass it runs on (the process group's ranks, or the pass's group_map), and
whether arfusion's own planner (arfPlanShape on that communicator) takes the shape, so that every
rank decides identically. A refusal is _NoMatch with the reason.
"""

from __future__ import annotations

import arfusion as _arf
from arfusion._lib import ArfError

from . import ops as _ops
from ._comm import Communicator, get_communicator
from ._match import _C10D_AR, _C10D_WAIT, _NoMatch, _is_call, _op

# ---- the all-reduce and its communicator ---------------------------------------------------------


def _comm_for_group(group_name: str, comms, group_map: dict) -> Communicator:
    if group_name in group_map:
        return get_communicator(group_map[group_name])
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


def _all_reduce_source(n, comms, group_map: dict):
    """(input node, value node, nodes to erase, communicator) when n is an all-reduce."""
    if _is_call(n, *_C10D_AR):
        x = n.args[0]
        reduce_op = n.args[1] if len(n.args) > 1 else n.kwargs.get("reduceOp")
        group = n.args[2] if len(n.args) > 2 else n.kwargs.get("group_name")
        waits = list(n.users)
        if len(waits) != 1 or not _is_call(waits[0], *_C10D_WAIT):
            raise _NoMatch("the all_reduce is not followed by exactly one wait_tensor")
        if str(reduce_op).lower() != "sum":
            raise _NoMatch(f"reduce op {reduce_op!r} is not sum")
        return x, waits[0], [waits[0], n], _comm_for_group(str(group), comms, group_map)
    vllm_ar = _op("vllm", "all_reduce")
    if vllm_ar is not None and _is_call(n, vllm_ar):
        group = n.args[1] if len(n.args) > 1 else n.kwargs.get("group_name")
        if str(group) in group_map:
            comm = get_communicator(group_map[str(group)])
        elif len(comms) == 1:
            comm = comms[0]
        else:
            raise _NoMatch(f"torch.ops.vllm.all_reduce group {group!r}: several "
                           "communicators and no group_map entry")
        return n.args[0], n, [n], comm
    arf_ar = _op("arfusion", "all_reduce")
    if arf_ar is not None and _is_call(n, arf_ar):
        return n.args[0], n, [n], get_communicator(n.args[1])
    return None


# ---- the planner ---------------------------------------------------------------------------------


def _check_plan(comm, pattern, hidden, rows, weight_dtype, norm, algorithm: str,
                assume_max_tokens: bool, scale_rule: str = "divide"):
    """_NoMatch unless arfPlanShape accepts the call (with the scale rule the fused op will get)
    at its row count; a symbolic count at both ends of its range (the upper end comm.max_tokens
    only under assume_max_tokens)."""
    def plan_at(t):
        args = comm.shape_args(int(pattern), hidden, int(t), gamma_dtype=weight_dtype,
                               gamma_plus_one=norm.gamma_plus_one, eps=norm.eps,
                               norm_rounding=_ops.norm_rounding_value(norm.rounding),
                               algorithm=_ops.algorithm_value(algorithm),
                               scale_rule=_ops.scale_rule_value(scale_rule))
        try:
            return comm.plan_shape(args)
        except ArfError as e:
            raise _NoMatch(f"arfPlanShape refuses T={t}, H={hidden} "
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
