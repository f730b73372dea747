"""FX graph helpers of the compile pass (arfusion.torch.compile): node metadata, op identity by
name, and the small structural queries the matchers share. Nothing here changes a graph."""

from __future__ import annotations

import struct

import torch
import torch.fx as fx


class NoMatch(Exception):
    """Raised by the matchers with the reason the walk stopped."""


def f32(x: float) -> float:
    """x rounded to the nearest fp32."""
    return struct.unpack("f", struct.pack("f", float(x)))[0]


def val(n):
    """The fake-tensor value of a node (meta["val"]), None for anything else."""
    return n.meta.get("val") if isinstance(n, fx.Node) else None


def dtype(n):
    v = val(n)
    return v.dtype if isinstance(v, torch.Tensor) else None


def shape(n):
    v = val(n)
    return tuple(v.shape) if isinstance(v, torch.Tensor) else None


def numel(shape_):
    out = 1
    for d in shape_:
        out = out * d
    return out


def is_call(n, *targets) -> bool:
    return isinstance(n, fx.Node) and n.op == "call_function" and n.target in targets


def op(namespace: str, name: str, overload: str = "default"):
    """torch.ops.<namespace>.<name>.<overload>, or None where it does not exist."""
    try:
        return getattr(getattr(getattr(torch.ops, namespace), name), overload)
    except (AttributeError, RuntimeError):
        return None


def targets(*specs) -> tuple:
    return tuple(t for t in (op(*s) for s in specs) if t is not None)


CONVERT = targets(("prims", "convert_element_type"), ("aten", "_to_copy"))
VIEW = targets(("aten", "view"), ("aten", "reshape"), ("aten", "_unsafe_view"))
MUL = targets(("aten", "mul", "Tensor"))
ADD = targets(("aten", "add", "Tensor"), ("aten", "add", "Scalar"))
ADD_TENSOR = targets(("aten", "add", "Tensor"))
DIV = targets(("aten", "div", "Tensor"), ("aten", "div", "Scalar"))
POW = targets(("aten", "pow", "Tensor_Scalar"))
MEAN = targets(("aten", "mean", "dim"))
RSQRT = targets(("aten", "rsqrt"))
ABS = targets(("aten", "abs"))
AMAX = targets(("aten", "amax"))
MAX_DIM = targets(("aten", "max", "dim"))
MAX = targets(("aten", "max"))
RECIPROCAL = targets(("aten", "reciprocal"))
UNSQUEEZE = targets(("aten", "unsqueeze"))
CLAMP = targets(("aten", "clamp"), ("aten", "clamp_min"), ("aten", "clamp_max"))
FUSED_RMS = targets(("aten", "_fused_rms_norm"), ("aten", "rms_norm"))


def convert_dtype(n):
    """The target dtype when n is a pure dtype conversion, else None."""
    if not isinstance(n, fx.Node) or n.op != "call_function":
        return None
    if n.target == op("prims", "convert_element_type"):
        return n.args[1] if len(n.args) > 1 else n.kwargs.get("dtype")
    if n.target == op("aten", "_to_copy"):
        extra = {k for k in n.kwargs if k not in ("dtype", "layout", "device", "memory_format")}
        if extra or len(n.args) > 1:
            return None
        v, src = val(n), val(n.args[0])
        if v is None or src is None or v.device != src.device:
            return None
        return n.kwargs.get("dtype")
    return None


def other_operand(n, mine):
    """For a binary node n that uses `mine` as one operand: the other operand."""
    a, b = n.args[0], n.args[1]
    if a is mine and b is not mine:
        return b
    if b is mine and a is not mine:
        return a
    if a is mine and b is mine:
        return mine
    return None


def is_last_dim(dims, ndim) -> bool:
    if not isinstance(dims, (list, tuple)) or len(dims) != 1:
        return False
    d = dims[0]
    return d == -1 or d == ndim - 1


def scalar(x):
    return float(x) if isinstance(x, (int, float)) and not isinstance(x, bool) else None


def depends_on(node: fx.Node, ancestor: fx.Node) -> bool:
    seen, todo = set(), [node]
    while todo:
        n = todo.pop()
        if n is ancestor:
            return True
        if n not in seen:
            seen.add(n)
            todo.extend(n.all_input_nodes)
    return False


def describe(node) -> str:
    """A node as reasons name it: its name and op (e.g. "add_3 (aten.add.Tensor)")."""
    if not isinstance(node, fx.Node):
        return repr(node)
    target = node.target
    name = str(target) if hasattr(target, "_schema") else getattr(target, "__name__", str(target))
    return f"{node.name} ({name})"
