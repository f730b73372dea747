"""Every op of a post-grad graph that is, or may hide, an all-reduce (AllReduceFusionPass counts each
one as fused or left with a reason: nothing is missed silently).

Recognised by name (namespace and op name), so that engines' ops are found whether or not the
engine was imported before the pass:

  torch         _c10d_functional.all_reduce + wait_tensor (what Dynamo makes of dist.all_reduce and
                funcol.all_reduce), c10d_functional.all_reduce (legacy, the group as a rank list),
                symm_mem.one_shot_all_reduce / multimem_one_shot_all_reduce /
                one_shot_all_reduce_copy; in place (refused or fused as below): _c10d_functional
                .all_reduce_, symm_mem.two_shot_all_reduce_ / multimem_all_reduce_; the coalesced
                forms and the unfunctionalized c10d.allreduce_ (refused)
  vLLM          vllm.all_reduce(tensor, group_name); older releases' vllm.outplace_all_reduce and
                vllm.inplace_all_reduce; vllm.all_reduce_symmetric_with_copy (no group name)
  SGLang        sglang.outplace_all_reduce(tensor, group_name, method), sglang.flashinfer_allreduce,
                sglang.inplace_all_reduce(tensor, group_name) (in place)
  arfusion      arfusion.all_reduce(input, comm), arfusion.all_reduce_ (in place)

An in-place op reaches the post-grad graph functionalized: auto_functionalized(_v2)(op, ...) whose
output holds the reduced tensor; it is fused when the op reduces a whole tensor (not part of one).
Ops that already fuse an all-reduce (arfusion's own fused ops, vLLM's FlashInfer / AITER fusions)
are counted as already fused. Opaque ops that may all-reduce inside (vLLM's MoE ops, whose FusedMoE
layer all-reduces its result when reduce_results is set) and any other op whose name says
all-reduce are counted with the reason they cannot be fused.
"""

from __future__ import annotations

import dataclasses
import operator

import torch
import torch.fx as fx

from ._graph import is_call, val


@dataclasses.dataclass
class AllReduce:
    """One all-reduce site of a graph. ``input`` is the summed tensor and ``value`` the node holding
    the sum (None for what cannot be fused); ``erase`` the nodes removed once the fused op replaces
    the sum (the value's producers, in order); ``group`` what the op names its group by (a c10d
    group name, a rank list for the legacy op, an engine's group name, an arfusion communicator
    name) and ``group_kind`` which of those it is. ``refusal`` says why it cannot be fused at all;
    ``prefused`` marks an op that already fuses an all-reduce."""

    node: fx.Node
    label: str
    input: fx.Node | None = None
    value: fx.Node | None = None
    erase: list = dataclasses.field(default_factory=list)
    group: object = None
    group_kind: str | None = None
    reduce_op: object = "sum"
    refusal: str | None = None
    prefused: bool = False


# (namespace, op name) -> (kind, input argument, group argument, reduce-op argument)
# kinds: "functional" (result read through wait_tensor), "direct" (the op's result is the sum),
# "in_place" (functionalized: the auto_functionalized output holds the sum)
_FUSABLE = {
    ("_c10d_functional", "all_reduce"): ("functional", "input", "group_name", "reduce_op"),
    ("_c10d_functional_autograd", "all_reduce"): ("functional", "input", "group_name", "reduce_op"),
    ("c10d_functional", "all_reduce"): ("functional", "self", "ranks", "reduceOp"),
    ("symm_mem", "one_shot_all_reduce"): ("direct", "input", "group_name", "reduce_op"),
    ("symm_mem", "multimem_one_shot_all_reduce"): ("direct", "input", "group_name", "reduce_op"),
    ("symm_mem", "one_shot_all_reduce_copy"): ("direct", "local_input", "group_name", "reduce_op"),
    ("symm_mem", "two_shot_all_reduce_"): ("in_place", "input", "group_name", "reduce_op"),
    ("symm_mem", "multimem_all_reduce_"): ("in_place", "input", "group_name", "reduce_op"),
    ("vllm", "all_reduce"): ("direct", "tensor", "group_name", None),
    ("vllm", "outplace_all_reduce"): ("direct", "tensor", "group_name", None),
    ("vllm", "all_reduce_symmetric_with_copy"): ("direct", "input_tensor", None, None),
    ("vllm", "inplace_all_reduce"): ("in_place", "tensor", "group_name", None),
    ("sglang", "outplace_all_reduce"): ("direct", "tensor", "group_name", None),
    ("sglang", "flashinfer_allreduce"): ("direct", "tensor", "group_name", None),
    ("sglang", "inplace_all_reduce"): ("in_place", "tensor", "group_name", None),
    ("arfusion", "all_reduce"): ("direct", "input", "comm", None),
    ("arfusion", "all_reduce_"): ("in_place", "input", "comm", None),
}
_GROUP_KIND = {"_c10d_functional": "c10d", "_c10d_functional_autograd": "c10d",
               "c10d_functional": "ranks", "symm_mem": "c10d", "vllm": "engine",
               "sglang": "engine", "arfusion": "arfusion"}

_PREFUSED = {
    ("arfusion", "fused_add_rms_norm"), ("arfusion", "fused_add_rms_norm_out"),
    ("arfusion", "fused_add_rms_norm_quant"),
    ("vllm", "flashinfer_trtllm_fused_allreduce_norm"),
    ("vllm", "rocm_aiter_fused_allreduce_rmsnorm"),
    ("vllm", "rocm_aiter_fused_allreduce_rmsnorm_quant_per_group"),
}

_OUT_VARIANT = ("writes the sum into a preallocated output tensor (an out= variant): not fused")
_REFUSED = {
    ("_c10d_functional", "all_reduce_"): "_c10d_functional.all_reduce_ reduces in place and is not "
    "fused (torch.distributed.all_reduce under Dynamo gives the out-of-place all_reduce)",
    ("symm_mem", "one_shot_all_reduce_out"): _OUT_VARIANT,
    ("symm_mem", "one_shot_all_reduce_copy_out"): _OUT_VARIANT,
    ("symm_mem", "two_shot_all_reduce_out"): _OUT_VARIANT,
    ("symm_mem", "multimem_one_shot_all_reduce_out"): _OUT_VARIANT,
    ("_c10d_functional", "all_reduce_coalesced"): "a coalesced all-reduce (several tensors in one "
    "collective) is not fused",
    ("_c10d_functional", "all_reduce_coalesced_"): "a coalesced all-reduce (several tensors in one "
    "collective) is not fused",
    ("c10d", "allreduce_"): "c10d.allreduce_ is the process group's own op, not functionalized "
    "(call torch.distributed.all_reduce, which Dynamo makes functional)",
    ("c10d", "allreduce_coalesced_"): "c10d.allreduce_coalesced_ is the process group's own "
    "coalesced op, not fused",
    ("vllm", "moe_forward"): "an opaque MoE op: vLLM's FusedMoE all-reduces its result inside it "
    "when reduce_results is set, where the pass cannot reach (the all-reduce can be fused when the "
    "model all-reduces the MoE output itself, reduce_results=False)",
    ("vllm", "moe_forward_shared"): "an opaque MoE op: vLLM's FusedMoE all-reduces its result "
    "inside it when reduce_results is set, where the pass cannot reach (the all-reduce can be fused "
    "when the model all-reduces the MoE output itself, reduce_results=False)",
}

_AUTO_FUNCTIONALIZED = ("auto_functionalized", "auto_functionalized_v2")


def _key(target):
    """(namespace, op name) of an OpOverload / OpOverloadPacket, else None."""
    ns = getattr(target, "namespace", None)
    name = getattr(target, "_opname", None)
    if ns is None or name is None:
        return None
    return ns, name


def _hop_name(target):
    return target.name() if isinstance(target, torch._ops.HigherOrderOperator) else None


def _looks_like_all_reduce(key) -> bool:
    name = key[1].lower()
    return "all_reduce" in name or "allreduce" in name


def _arg(node, schema_op, name):
    """Argument `name` of node (a call of schema_op): by keyword, else by its schema position."""
    if name in node.kwargs:
        return node.kwargs[name]
    for i, a in enumerate(schema_op._schema.arguments):
        if a.name == name:
            return node.args[i] if i < len(node.args) else a.default_value
    return None


def _label(key, suffix=""):
    return f"{key[0]}.{key[1]}{suffix}"


def _direct(node, key, spec) -> AllReduce:
    kind, inp, grp, red = spec
    site = AllReduce(node, _label(key), input=_arg(node, node.target, inp),
                     group=_arg(node, node.target, grp) if grp else None,
                     group_kind=_GROUP_KIND[key[0]] if grp else "engine",
                     reduce_op=_arg(node, node.target, red) if red else "sum")
    if kind == "functional":
        waits = [u for u in node.users if _key(u.target) in (("_c10d_functional", "wait_tensor"),
                                                              ("c10d_functional", "wait_tensor"))]
        if len(waits) != 1 or len(node.users) != 1:
            site.refusal = "the all_reduce is not read through exactly one wait_tensor"
            return site
        site.value, site.erase = waits[0], [waits[0], node]
    elif kind == "direct":
        site.value, site.erase = node, [node]
    else:
        site.refusal = (f"{site.label} writes its input in place and appears unfunctionalized in "
                        "the graph")
    if site.refusal is None and str(site.reduce_op).lower() not in ("sum", "reduceop.sum"):
        site.refusal = f"reduce op {site.reduce_op!r} is not sum"
    return site


def _in_place(node, op, key, spec) -> AllReduce:
    """auto_functionalized(_v2)(op, ...) of an in-place all-reduce: the new value of the mutated
    tensor is the sum when the op reduces the whole tensor."""
    _, inp, grp, red = spec
    site = AllReduce(node, _label(key, " (in place)"),
                     group=node.kwargs.get(grp) if grp else None,
                     group_kind=_GROUP_KIND[key[0]] if grp else "engine",
                     reduce_op=node.kwargs.get(red, "sum") if red else "sum")
    outs = val(node)
    if not isinstance(outs, (tuple, list)):
        site.refusal = "the functionalized in-place all-reduce has no output metadata"
        return site
    if _hop_name(node.target) == "auto_functionalized_v2":
        bases = node.kwargs.get("_all_bases") or []
        i = node.kwargs.get(f"_{inp}_base_index")
        if i is None or i >= len(bases):
            site.refusal = "the in-place all-reduce's tensor is not one of the graph's tensors"
            return site
        base = bases[i]
        index = len(outs) - len(bases) + i
        if not _whole_base(node.kwargs, inp, base):
            site.refusal = ("the in-place all-reduce reduces part of a tensor (a view that does not "
                            "cover it once in order): not fused")
            return site
    else:
        base = node.kwargs.get(inp)
        index = len(outs) - 1
    getters = [u for u in node.users if is_call(u, operator.getitem) and u.args[1] == index]
    others = [u for u in node.users if u not in getters]
    if len(getters) != 1 or others:
        site.refusal = "the reduced tensor is not read through exactly one output of the op"
        return site
    site.input, site.value, site.erase = base, getters[0], [getters[0], node]
    if str(site.reduce_op).lower() != "sum":
        site.refusal = f"reduce op {site.reduce_op!r} is not sum"
    return site


def _whole_base(kwargs, arg, base) -> bool:
    """auto_functionalized_v2 describes the mutated argument as a view of its base by extra
    keywords (_<arg>_size/_stride/_storage_offset, or _<arg>_slice_dim/_start/_end); none, or a
    view covering the whole base in order, is the whole tensor."""
    view = {k[len(arg) + 2:]: v for k, v in kwargs.items()
            if k.startswith(f"_{arg}_") and k != f"_{arg}_base_index"}
    if not view:
        return True
    if set(view) <= {"size", "stride", "storage_offset"}:
        return _covers(base, view.get("size"), view.get("stride"), view.get("storage_offset"))
    if set(view) <= {"slice_dim", "slice_start", "slice_end"}:
        b = val(base)
        dim = view.get("slice_dim", 0)
        return (isinstance(b, torch.Tensor) and view.get("slice_start") in (0, None)
                and (view.get("slice_end") is None or view["slice_end"] >= b.shape[dim]))
    return False


def _covers(base, size, stride, offset) -> bool:
    """A view of `base` with these size/stride/offset is the whole of a contiguous base, in order."""
    b = val(base)
    if (size is None or stride is None or not isinstance(b, torch.Tensor)
            or not b.is_contiguous() or offset not in (0, None)):
        return False
    numel = 1
    expect = []
    for s in reversed(list(size)):
        expect.append(numel)
        numel *= s
    if numel != b.numel():
        return False
    return all(s == 1 or st == e for s, st, e in zip(reversed(list(size)), reversed(list(stride)),
                                                     expect))


def find_all_reduces(graph: fx.Graph) -> list[AllReduce]:
    """Every all-reduce site of the graph, in graph order."""
    sites = []
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        hop = _hop_name(node.target)
        if hop in _AUTO_FUNCTIONALIZED and node.args:
            op = node.args[0]
            key = _key(op)
            if key is None:
                continue
            if key in _FUSABLE and _FUSABLE[key][0] == "in_place":
                sites.append(_in_place(node, op, key, _FUSABLE[key]))
            elif key in _REFUSED:
                sites.append(AllReduce(node, _label(key), refusal=_REFUSED[key]))
            elif key in _PREFUSED:
                sites.append(AllReduce(node, _label(key), prefused=True))
            elif _looks_like_all_reduce(key):
                sites.append(AllReduce(node, _label(key, " (in place)"),
                                       refusal="an in-place op named like an all-reduce that the "
                                       "pass does not know"))
            continue
        key = _key(node.target)
        if key is None:
            continue
        if key in _FUSABLE:
            sites.append(_direct(node, key, _FUSABLE[key]))
        elif key in _REFUSED:
            sites.append(AllReduce(node, _label(key), refusal=_REFUSED[key]))
        elif key in _PREFUSED:
            sites.append(AllReduce(node, _label(key), prefused=True))
        elif _looks_like_all_reduce(key):
            sites.append(AllReduce(node, _label(key), refusal="an op named like an all-reduce that "
                                   "the pass does not know (its semantics are not known: not fused)"))
    return sites
