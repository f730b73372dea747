"""torch.compile pass: all-reduce -> residual add -> RMSNorm (-> FP8 quantization) becomes one
arfusion op.

Install it as Inductor's post-grad custom pass (a CustomGraphPass with a uuid, so the FX graph
cache keys on it)::

    p = AllReduceFusionPass(comm)            # comm: an arfusion.torch.Communicator (or its name)
    model = torch.compile(model, options={"post_grad_custom_post_pass": p})
    # or: torch.compile(model, options=compile_options(comm))
    ...
    print(p.stats.summary())                 # matched / replaced / why not, per graph

What it looks for, starting from every all-reduce node of the post-grad graph (a walk over users,
not one fixed pattern, so small variations still match):

  all-reduce  torch.ops._c10d_functional.all_reduce(x, "sum", group) + wait_tensor (what Dynamo
              makes of torch.distributed.all_reduce and funcol.all_reduce), torch.ops.vllm.
              all_reduce(x, group) when vLLM is loaded, torch.ops.arfusion.all_reduce(x, comm)
  residual    add(ar, residual) / add(residual, ar) in the activation dtype; or none (first layer:
              the norm reads the all-reduce itself; the fused op's residual_out is the all-reduce)
  RMSNorm     aten._fused_rms_norm / aten.rms_norm, or the decomposed fp32 chain
              convert(f32) -> pow 2 | mul x*x -> mean(-1, keepdim) -> add eps -> rsqrt -> mul, then
                * weight in fp32 -> convert      (F.rms_norm, nn.RMSNorm, fp32 weights: norm_rounding
                                                  "once")
                * (1 + weight.float()) -> convert  (Gemma: gamma_plus_one, "once")
                convert -> * weight               (Hugging Face LlamaRMSNorm `weight * x.to(dtype)`:
                                                  "before_weight")
                convert (no weight)               (a ones weight, "once")
  FP8 tails   after the norm, in plain torch: static per-tensor (x.float() / scale).clamp(-448, 448)
              .to(float8_e4m3fn); per-token and per-group 1x128 with scale = clamp_min(amax / 448,
              1 / (448 * 512)) and q = (x / scale).clamp(-448, 448).to(float8_e4m3fn) (anything
              else is left unfused and reported). torch on a GPU evaluates `amax / 448.0` (a
              Python-number divisor) as amax * fp32(1/448), eager and Inductor alike, which
              differs from the IEEE quotient in about 40% of scales: the fused op is called with
              scale_rule="times_reciprocal" (arfFp8ScaleTimesReciprocal), which computes exactly
              that, so fusion leaves the scales torch would have computed, and q = e4m3(x / scale)
              (IEEE) follows from them as in eager torch (rows or groups holding a NaN excepted:
              arfusion's amax ignores NaN elements, torch's propagates them). When only the tail
              reads the rounded norm, Inductor folds its round trip through bf16 and quantizes the
              unrounded fp32 value, which arfusion does not do: that form is left unfused

Eligibility is arfusion's own planner (arfPlanShape on the communicator: world size, dtype,
hidden, token count, quantization block rules), so every rank decides identically. A dynamic
token count must have a known upper bound (torch._dynamo.mark_dynamic(t, 0, max=...)), or pass
assume_max_tokens=True to promise that no call exceeds the communicator's max_tokens (a call that
does raises ArfError; it never computes wrong numbers).

Every decision is counted in ``pass.stats`` (FusionStats: graphs, all-reduces seen, matched,
replaced, per-kind counts, and the reason for every all-reduce left alone) and logged on the
"arfusion.compile" logger: a pass that silently applies nowhere is the failure mode this avoids.

This module holds the pass (matching, planning and rewriting in turn) and its stats; the steps
live in _match.py (the graph forms above), _eligibility.py (the communicator and arfPlanShape)
and _rewrite.py (the fused node and its metadata).
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import logging
import os
from typing import Any

import torch
import torch.fx as fx
from torch._inductor.custom_graph_pass import CustomGraphPass

from arfusion._lib import Pattern

from . import ops as _ops
from ._comm import ACTIVATION_DTYPES, Communicator, registered_communicators
from ._eligibility import _all_reduce_source, _check_plan
from ._match import (_C10D_AR, _NoMatch, _dtype, _has_fp8_consumer, _is_call, _match_quant,
                     _match_residual_norm, _targets, _val)
from ._rewrite import _insert_fused

log = logging.getLogger("arfusion.compile")


# ---- stats ---------------------------------------------------------------------------------------


@dataclasses.dataclass
class FusionStats:
    """What the pass did. ``rejected`` holds (all-reduce node, reason) for every all-reduce it saw
    and left alone; ``notes`` holds remarks on replaced patterns (e.g. a quantization tail that
    stayed unfused)."""

    graphs: int = 0
    all_reduces: int = 0
    matched: int = 0
    replaced: int = 0
    kinds: collections.Counter = dataclasses.field(default_factory=collections.Counter)
    rejected: list = dataclasses.field(default_factory=list)
    notes: list = dataclasses.field(default_factory=list)

    def merge(self, other: "FusionStats") -> None:
        self.graphs += other.graphs
        self.all_reduces += other.all_reduces
        self.matched += other.matched
        self.replaced += other.replaced
        self.kinds.update(other.kinds)
        self.rejected.extend(other.rejected)
        self.notes.extend(other.notes)

    def summary(self) -> str:
        lines = [f"arfusion pass: {self.graphs} graph(s), {self.all_reduces} all-reduce(s), "
                 f"{self.matched} matched, {self.replaced} replaced"]
        for kind, n in sorted(self.kinds.items()):
            lines.append(f"  replaced {n} x {kind}")
        for node, reason in self.rejected:
            lines.append(f"  not replaced: {node}: {reason}")
        for note in self.notes:
            lines.append(f"  note: {note}")
        if self.graphs == 0:
            lines.append("  note: the pass has not run in this process: nothing compiled yet, or every "
                         "graph came from Inductor's FX graph cache (a cached graph is the one the pass "
                         "produced when it was compiled; the pass is not run again and counts nothing)")
        return "\n".join(lines)


# ---- the pass ------------------------------------------------------------------------------------

# Every file of the pass: uuid() hashes them, so the FX graph cache keys on the pass's code.
_SOURCES = ("compile.py", "_match.py", "_eligibility.py", "_rewrite.py", "ops.py", "_comm.py")


def _source_files() -> tuple:
    here = os.path.dirname(os.path.abspath(__file__))
    return tuple(os.path.join(here, f) for f in _SOURCES)


class AllReduceFusionPass(CustomGraphPass):
    """Inductor post-grad pass replacing all-reduce + residual add + RMSNorm (+ FP8 tail) with
    ``torch.ops.arfusion.fused_add_rms_norm_out`` / ``fused_add_rms_norm_quant``.

    communicators: a Communicator, a registry name, or a list of them (default: every
        communicator registered when the pass is made). A c10d all-reduce is mapped to the
        communicator whose ranks equal its process group's; ``group_map`` ({group name: registry
        name}) overrides (needed for torch.ops.vllm.all_reduce with several communicators).
    quant: also fuse recognised FP8 tails (default True).
    assume_max_tokens: fuse dynamic token counts without a known upper bound, promising calls
        stay within max_tokens (see the module docstring).
    fp32_residual_add: also match vLLM's native form, where the residual add runs in fp32 and the
        norm reads the unrounded fp32 sum (arfusion normalizes the rounded residual: results can
        differ by rounding). Off by default.
    then: a pass (callable on the graph) to run after this one, e.g. a previously configured
        post_grad_custom_post_pass (its uuid joins ours).
    algorithm: forced algorithm name for the replacements (default "auto").
    """

    def __init__(self, communicators=None, *, quant: bool = True, assume_max_tokens: bool = False,
                 fp32_residual_add: bool = False, group_map: dict | None = None,
                 then=None, algorithm: str = "auto"):
        if communicators is None:
            names = sorted(registered_communicators())
        elif isinstance(communicators, (str, Communicator)):
            names = [communicators if isinstance(communicators, str) else communicators.name]
        else:
            names = [c if isinstance(c, str) else c.name for c in communicators]
        if not names:
            raise ValueError("arfusion: AllReduceFusionPass needs at least one communicator "
                             "(create one with Communicator.from_group first)")
        self.comm_names = names
        self.quant = quant
        self.assume_max_tokens = assume_max_tokens
        self.fp32_residual_add = fp32_residual_add
        self.group_map = dict(group_map or {})
        self.then = then
        self.algorithm = algorithm
        _ops.algorithm_value(algorithm)
        self.stats = FusionStats()       # cumulative over every graph
        self.history: list[FusionStats] = []

    # -- cache key --
    def uuid(self) -> Any:
        h = hashlib.sha256()
        for path in _source_files():
            with open(path, "rb") as f:
                h.update(f.read())
        for name in self.comm_names:
            h.update(name.encode())
            comm = registered_communicators().get(name)
            if comm is not None:
                facts = comm.plan_facts()
                h.update(repr(sorted(facts.items())).encode())
                h.update(repr(getattr(comm, "ranks", None)).encode())
            else:
                h.update(b"<absent>")
        h.update(repr((self.quant, self.assume_max_tokens, self.fp32_residual_add,
                       sorted(self.group_map.items()), self.algorithm)).encode())
        if self.then is not None:
            then_uuid = self.then.uuid() if hasattr(self.then, "uuid") else None
            if then_uuid is None:
                return None  # the chained pass cannot be cached: neither can we
            h.update(repr(then_uuid).encode())
        return h.hexdigest()

    # -- entry point --
    def __call__(self, graph: fx.Graph) -> None:
        stats = FusionStats(graphs=1)
        try:
            self._run(graph, stats)
        finally:
            self.history.append(stats)
            self.stats.merge(stats)
            level = logging.INFO if stats.replaced or not stats.all_reduces else logging.WARNING
            if stats.all_reduces:
                log.log(level, "%s", stats.summary())
        if self.then is not None:
            self.then(graph)

    # -- communicator resolution --
    def _comms(self) -> list[Communicator]:
        out = []
        for name in self.comm_names:
            c = registered_communicators().get(name)
            if c is not None and c.alive:
                out.append(c)
        return out

    def _run(self, graph: fx.Graph, stats: FusionStats) -> None:
        comms = self._comms()
        candidates = []
        for n in list(graph.nodes):
            if _is_call(n, *_C10D_AR) or _is_call(n, *_targets(("vllm", "all_reduce"),
                                                                 ("arfusion", "all_reduce"))):
                candidates.append(n)
        stats.all_reduces = len(candidates)
        if not candidates:
            return
        if not comms:
            for n in candidates:
                stats.rejected.append((n.name, "no live communicator among "
                                       f"{self.comm_names} in this process"))
            return
        changed = False
        self._erase_after_dce = []
        for n in candidates:
            try:
                done = self._try_fuse(graph, n, comms, stats)
                changed = changed or done
            except _NoMatch as e:
                stats.rejected.append((n.name, str(e)))
        if changed:
            graph.eliminate_dead_code()
            for node in self._erase_after_dce:  # in order: wait_tensor, then all_reduce
                if node.users:
                    stats.notes.append(f"{node.name}: still used after the fusion; kept")
                else:
                    graph.erase_node(node)
            graph.eliminate_dead_code()
            graph.lint()

    # -- one all-reduce --
    def _try_fuse(self, graph, ar_node, comms, stats) -> bool:
        src = _all_reduce_source(ar_node, comms, self.group_map)
        if src is None:
            raise _NoMatch("not an all-reduce form the pass knows")
        x, ar_val, ar_nodes, comm = src
        xv = _val(x)
        if not isinstance(xv, torch.Tensor):
            raise _NoMatch("the all-reduce input has no tensor metadata")
        act = xv.dtype
        if act not in ACTIVATION_DTYPES:
            raise _NoMatch(f"dtype {act} (arfusion fuses bf16/fp16)")
        if act != comm.dtype:
            raise _NoMatch(f"dtype {act} differs from communicator {comm.name!r}'s {comm.dtype}")
        if xv.dim() < 1:
            raise _NoMatch("0-d all-reduce")
        hidden = xv.shape[-1]
        if not isinstance(hidden, int):
            raise _NoMatch("the hidden size is symbolic")
        shape = tuple(xv.shape)

        # residual add, or the first-layer form (norm reads the all-reduce)
        order = {node: i for i, node in enumerate(graph.nodes)}
        norm, residual, y, form = _match_residual_norm(ar_val, hidden, act, shape,
                                                       self.fp32_residual_add, order)
        stats.matched += 1
        if form in ("residual", "fp32_residual") and len(ar_val.users) > 1:
            raise _NoMatch("the all-reduce result has users besides the residual add "
                           f"({', '.join(u.name for u in ar_val.users if u is not y)})")

        # quantization tail
        quant = None
        if self.quant:
            try:
                quant = _match_quant(norm.out, hidden, shape[:-1])
            except _NoMatch:
                quant = None
        weight_dtype = _dtype(norm.weight) if norm.weight is not None else act
        rows = 1
        for d in shape[:-1]:
            rows = rows * d
        if quant is not None:
            try:
                _check_plan(comm, _ops.quant_pattern(quant.kind), hidden, rows, weight_dtype, norm,
                            self.algorithm, self.assume_max_tokens, quant.scale_rule)
            except _NoMatch as e:
                stats.notes.append(f"{ar_node.name}: {quant.kind} tail left unfused: {e}")
                quant = None
        if quant is None:
            _check_plan(comm, Pattern.ResidualRmsNorm, hidden, rows, weight_dtype, norm,
                        self.algorithm, self.assume_max_tokens)
        fp8_left = self.quant and quant is None and _has_fp8_consumer(norm.out)

        # the fused op in place of the matched nodes
        _insert_fused(graph, x, xv, act, hidden, residual, y, norm, quant, comm, self.algorithm)

        # The unfused all-reduce goes once the dead chain is gone (wait_tensor is side-effecting:
        # dead-code elimination alone would keep it, and the collective would still run).
        self._erase_after_dce.extend(ar_nodes)
        stats.replaced += 1
        kind = f"{form}/{norm.form}/{norm.rounding}" + (f"+{quant.kind}" if quant else "")
        stats.kinds[kind] += 1
        if fp8_left:
            stats.notes.append(f"{ar_node.name}: an FP8 conversion follows the norm but not in "
                               "arfusion's form; it stays unfused")
        return True


def compile_options(communicators=None, **pass_options) -> dict:
    """Options for torch.compile(model, options=...) installing the pass (chaining a
    post_grad_custom_post_pass already set in torch._inductor.config)."""
    import torch._inductor.config as inductor_config

    existing = inductor_config.post_grad_custom_post_pass
    if existing is not None and "then" not in pass_options:
        pass_options["then"] = existing
    return {"post_grad_custom_post_pass": AllReduceFusionPass(communicators, **pass_options)}


__all__ = ["AllReduceFusionPass", "FusionStats", "compile_options"]
