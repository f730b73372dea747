"""torch.compile pass: all-reduce -> residual add -> RMSNorm (-> FP8 quantization) becomes one
arfusion op.

Install it as Inductor's post-grad custom pass (a CustomGraphPass with a uuid, so the FX graph
cache keys on it)::

    p = AllReduceFusionPass(comm)            # comm: an arfusion.torch.Communicator (or its name)
    model = torch.compile(model, options={"post_grad_custom_post_pass": p})
    # or: torch.compile(model, options=compile_options(comm))
    ...
    print(p.stats.summary())                 # per all-reduce: fused, or why not

What it looks for, starting from every all-reduce of the post-grad graph (a walk over users, not
one fixed pattern, so small variations still match):

  all-reduce  every op that is or may hide an all-reduce is counted (_collectives.py lists them:
              torch's functional and symmetric-memory forms, vLLM's and SGLang's ops, in place or
              not, arfusion's own); the ones that sum a whole tensor over a known group are fused
  views       reshape / view between the all-reduce and the add that keep rows of [hidden]
              elements (an MoE block's [B*S, H] sum viewed as [B, S, H]; no-op views): the fused
              op runs in the viewed shape
  residual    add(ar, residual) / add(residual, ar) in the activation dtype; or none (first layer:
              the norm reads the all-reduce itself; the fused op's residual_out is the all-reduce)
  RMSNorm     aten._fused_rms_norm / aten.rms_norm, or the decomposed fp32 chain
              convert(f32) -> pow 2 | mul x*x -> mean(-1, keepdim) -> add eps -> rsqrt | pow -0.5
              -> mul, then
                * weight in fp32 -> convert      (F.rms_norm, nn.RMSNorm, fp32 weights: norm_rounding
                                                  "once")
                * (1 + weight.float()) -> convert  (Gemma: gamma_plus_one, "once")
                convert -> * weight               (Hugging Face LlamaRMSNorm `weight * x.to(dtype)`:
                                                  "before_weight")
                convert (no weight)               (a ones weight, "once")
  FP8 tails   after the rounded norm (_match_quant.py): static per-tensor, per-token and per-group
              1x128 in the forms whose bits arfusion reproduces (scale = clamp_min(amax / 448,
              1/(448*512)) with amax over the fp32 or the bf16 norm, groups by any view with 128
              last); torch on a GPU evaluates `amax / 448.0` as amax * fp32(1/448), so the fused op
              is called with scale_rule="times_reciprocal". Any other FP8 tail stays unfused, with
              the step that differs in the note (x * scale.reciprocal(), 448 / amax, another floor)

Forms fused on request or refused, each with the real cause (_residual_forms.py): a residual add in
fp32 with the norm reading the unrounded sum (vLLM's native RMSNorm, the conversion explicit or
implicit in the add) fuses with fp32_residual_add=True (the norm then reads the rounded sum); a bias
or another tensor added to the sum before the residual add, a residual multiplier and an fp32
residual stream are refused (the fused op adds one addend, the residual, to the rounded sum).

Two forms fuse less than the whole site, with a note saying so:
  * post-norm sites (all-reduce -> norm -> residual add [-> norm]: Gemma 2/3's sandwich, OLMo 2):
    the all-reduce and its norm fuse as a first-layer call; the add and the next norm stay
    separate kernels (post_norm="first_layer"; "off" leaves them alone). post_norm="sandwich"
    fuses a whole sandwich (all-reduce, norm, residual add, next norm, any FP8 tail) into one call
    with post_weight (_sandwich.py) where the library offers it; until the sandwich kernels'
    GPU tests have passed the library refuses such calls (unless ARF_EXPERIMENTAL_SANDWICH=1),
    and the pass notes that and fuses the site as a first-layer call;
  * a norm that only an fp32 reader follows unrounded (torch 2.10's Inductor folds fp32 -> bf16 ->
    fp32 when an FP8 tail alone reads the rounded norm): the all-reduce and the residual add fuse,
    and the fp32 norm and its reader keep reading the fused op's residual, as before.

Eligibility is arfusion's own planner (arfPlanShape on the communicator, or arfPlanFromFacts for a
CommunicatorFacts: world size, dtype, hidden, token count, quantization block rules), so every rank
decides identically. A dynamic token count must have a known upper bound
(torch._dynamo.mark_dynamic(t, 0, max=...)), or pass assume_max_tokens=True to promise that no call
exceeds the communicator's max_tokens (a call that does raises ArfError; it never computes wrong
numbers).

Every decision is counted in ``pass.stats`` (FusionStats: graphs, graphs without any all-reduce,
all-reduces seen, matched, replaced, per-kind counts, the reason for every all-reduce left alone)
and logged on the "arfusion.compile" logger: a WARNING for a graph whose all-reduces are not all
fused, and for the first graph without any all-reduce while the pass has met none (a pass that
silently applies nowhere is the failure mode this avoids).

This module holds the pass (finding, matching, planning and rewriting in turn); the steps live in
_collectives.py, _match.py, _residual_forms.py, _match_quant.py, _eligibility.py and _rewrite.py,
the counts in _stats.py.
"""

from __future__ import annotations

import hashlib
import logging
import os
from typing import Any

import torch
import torch.fx as fx
from torch._inductor.custom_graph_pass import CustomGraphPass

from arfusion._lib import Pattern

from . import ops as _ops
from ._collectives import find_all_reduces
from ._comm import ACTIVATION_DTYPES, Communicator, registered_communicators
from ._eligibility import (CommunicatorFacts, _lookup, check_plan, comm_for_c10d_group,
                           comm_for_engine_group)
from ._graph import NoMatch, dtype, numel, val
from ._match import match_site
from ._match_quant import match_quant, opaque_quant_readers
from ._rewrite import insert_fused
from ._sandwich import sandwich_site
from ._stats import FusionStats

log = logging.getLogger("arfusion.compile")

# Every file of the pass: uuid() hashes them, so the FX graph cache keys on the pass's code.
_SOURCES = ("compile.py", "_collectives.py", "_graph.py", "_match.py", "_residual_forms.py",
            "_sandwich.py", "_match_quant.py", "_eligibility.py", "_rewrite.py", "_stats.py",
            "ops.py", "_comm.py")
_POST_NORM = ("first_layer", "sandwich", "off")


def _source_files() -> tuple:
    here = os.path.dirname(os.path.abspath(__file__))
    return tuple(os.path.join(here, f) for f in _SOURCES)


class AllReduceFusionPass(CustomGraphPass):
    """Inductor post-grad pass replacing all-reduce + residual add + RMSNorm (+ FP8 tail) with
    ``torch.ops.arfusion.fused_add_rms_norm_out`` / ``fused_add_rms_norm_quant``.

    communicators: a Communicator, a registry name, a CommunicatorFacts, or a list of them
        (default: every communicator registered when the pass is made). A c10d all-reduce is
        mapped to the communicator whose ranks equal its process group's; ``group_map`` ({group
        name: communicator name}) overrides (needed for engines' all-reduce ops, which name their
        own groups, when the pass has several communicators).
    quant: also fuse recognised FP8 tails (default True).
    assume_max_tokens: fuse dynamic token counts without a known upper bound, promising calls
        stay within max_tokens (see the module docstring).
    fp32_residual_add: also fuse the native form of vLLM / SGLang, where the residual add runs in
        fp32 and the norm reads the unrounded fp32 sum (arfusion normalizes the rounded residual:
        results can differ by rounding). Off by default.
    post_norm: "first_layer" (default): an all-reduce -> norm -> residual add site fuses the
        all-reduce and its norm (the add and any next norm stay unfused, noted); "sandwich": a
        site with a next norm becomes one sandwich call where the library's planner accepts it
        (not yet by default: see the module docstring), else as "first_layer" with the reason
        noted; "off": left alone.
    then: a pass (callable on the graph) to run after this one, e.g. a previously configured
        post_grad_custom_post_pass (its uuid joins ours).
    algorithm: forced algorithm name for the replacements (default "auto").
    """

    def __init__(self, communicators=None, *, quant: bool = True, assume_max_tokens: bool = False,
                 fp32_residual_add: bool = False, group_map: dict | None = None,
                 post_norm: str = "first_layer", then=None, algorithm: str = "auto"):
        if communicators is None:
            communicators = sorted(registered_communicators())
        elif isinstance(communicators, (str, Communicator, CommunicatorFacts)):
            communicators = [communicators]
        self._entries = []  # names of live communicators, or CommunicatorFacts
        for c in communicators:
            self._entries.append(c.name if isinstance(c, Communicator) else c)
        if not self._entries:
            raise ValueError("arfusion: AllReduceFusionPass needs at least one communicator "
                             "(create one with Communicator.from_group first, or describe one "
                             "with CommunicatorFacts)")
        if post_norm not in _POST_NORM:
            raise ValueError(f"arfusion: post_norm must be one of {_POST_NORM}, not {post_norm!r}")
        self.comm_names = [e if isinstance(e, str) else e.name for e in self._entries]
        self.quant = quant
        self.assume_max_tokens = assume_max_tokens
        self.fp32_residual_add = fp32_residual_add
        self.group_map = dict(group_map or {})
        self.post_norm = post_norm
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
        for entry in self._entries:
            comm = registered_communicators().get(entry) if isinstance(entry, str) else entry
            h.update((entry if isinstance(entry, str) else entry.name).encode())
            if comm is not None:
                h.update(repr(sorted(comm.plan_facts().items())).encode())
                h.update(repr((getattr(comm, "ranks", None), str(comm.dtype))).encode())
            else:
                h.update(b"<absent>")
        h.update(repr((self.quant, self.assume_max_tokens, self.fp32_residual_add,
                       sorted(self.group_map.items()), self.post_norm,
                       self.algorithm)).encode())
        if self.then is not None:
            then_uuid = self.then.uuid() if hasattr(self.then, "uuid") else None
            if then_uuid is None:
                return None  # the chained pass cannot be cached: neither can we
            h.update(repr(then_uuid).encode())
        return h.hexdigest()

    # -- entry point --
    def __call__(self, graph: fx.Graph) -> None:
        stats = FusionStats(graphs=1)
        met_before = self.stats.all_reduces
        try:
            self._run(graph, stats)
        finally:
            self.history.append(stats)
            self.stats.merge(stats)
            if stats.all_reduces:
                fused_all = stats.replaced + len(stats.prefused) == stats.all_reduces
                log.log(logging.INFO if fused_all else logging.WARNING, "%s", stats.summary())
            elif met_before == 0 and self.stats.graphs_without_all_reduce == 1:
                log.warning("arfusion pass: a graph without any all-reduce, and none met so far: "
                            "if the model is tensor-parallel, its all-reduces are outside the "
                            "compiled graphs (e.g. split off as piecewise-graph boundaries) or in "
                            "ops that hide them")
            else:
                log.info("arfusion pass: a graph without any all-reduce (%d so far)",
                         self.stats.graphs_without_all_reduce)
        if self.then is not None:
            self.then(graph)

    # -- communicator resolution --
    def _comms(self) -> list:
        out = []
        for entry in self._entries:
            c = registered_communicators().get(entry) if isinstance(entry, str) else entry
            if c is not None and c.alive:
                out.append(c)
        return out

    def _run(self, graph: fx.Graph, stats: FusionStats) -> None:
        sites = find_all_reduces(graph)
        stats.all_reduces = len(sites)
        if not sites:
            stats.graphs_without_all_reduce = 1
            return
        comms = self._comms()
        changed = False
        erase = []
        for site in sites:
            name = site.node.name
            if site.prefused:
                stats.prefused.append((name, site.label))
                stats.sites.append((name, site.label, "already fused"))
                continue
            try:
                if site.refusal is not None:
                    raise NoMatch(site.refusal)
                if not comms:
                    raise NoMatch(f"no live communicator among {self.comm_names} in this process")
                kind = self._try_fuse(graph, site, comms, stats)
                changed = True
                erase.extend(site.erase)
                stats.sites.append((name, site.label, f"fused {kind}"))
            except NoMatch as e:
                reason = f"{site.label}: {e}"
                stats.rejected.append((name, reason))
                stats.sites.append((name, site.label, f"left: {e}"))
        if changed:
            graph.eliminate_dead_code()
            # in order: the value's reader (wait_tensor / getitem), then the op: side-effecting
            # nodes that dead-code elimination alone keeps, and the collective would still run
            alive = set(graph.nodes)
            for node in erase:
                if node not in alive:
                    continue  # dead-code elimination took it already
                if node.users:
                    stats.notes.append(f"{node.name}: still used after the fusion; kept")
                else:
                    graph.erase_node(node)
            graph.eliminate_dead_code()
            graph.lint()

    def _comm_of(self, site, comms):
        kind = site.group_kind
        if kind == "c10d":
            group = site.group
            name = group if isinstance(group, str) else getattr(group, "group_name", group)
            return comm_for_c10d_group(str(name), comms, self.group_map)
        if kind == "ranks":
            hits = [c for c in comms if getattr(c, "ranks", None) == list(site.group or [])]
            if len(hits) != 1:
                raise NoMatch(f"no communicator of the pass has the ranks {site.group}")
            return hits[0]
        if kind == "arfusion":
            return _lookup(str(site.group), comms)
        return comm_for_engine_group(site.label, site.group, comms, self.group_map)

    # -- one all-reduce --
    def _try_fuse(self, graph, site, comms, stats) -> str:
        comm = self._comm_of(site, comms)
        x = site.input
        xv = val(x)
        if not isinstance(xv, torch.Tensor):
            raise NoMatch("the all-reduce input has no tensor metadata")
        act = xv.dtype
        if act not in ACTIVATION_DTYPES:
            raise NoMatch(f"dtype {act} (arfusion fuses bf16/fp16)")
        if act != comm.dtype:
            raise NoMatch(f"dtype {act} differs from communicator {comm.name!r}'s {comm.dtype}")
        if xv.dim() < 1:
            raise NoMatch("0-d all-reduce")
        hidden = xv.shape[-1]
        if not isinstance(hidden, int):
            raise NoMatch("the hidden size is symbolic")

        order = {node: i for i, node in enumerate(graph.nodes)}
        m = match_site(site.value, hidden, act, self.fp32_residual_add, order)
        stats.matched += 1
        norm = m.norm
        if m.post_norm is not None and self.post_norm == "off":
            raise NoMatch(f"a {m.post_norm} site (all-reduce -> norm -> residual add) is left "
                          "alone: post_norm='off'")
        rows = numel(m.shape[:-1])
        weight_dtype = dtype(norm.weight) if norm.weight is not None else act
        sandwich_note = None
        if m.post_norm == "sandwich" and self.post_norm == "sandwich":
            try:
                s = sandwich_site(m, site.value, hidden, act, order)
                check_plan(comm, Pattern.ResidualRmsNorm, hidden, rows, weight_dtype, s.norm,
                           self.algorithm, self.assume_max_tokens, sandwich=True)
                m, norm = s, s.norm
            except NoMatch as e:
                sandwich_note = f"not fused as a sandwich call: {e}"
        sandwich = m.post is not None

        # quantization tail
        quant, quant_note = None, None
        if self.quant and norm.out is not None:
            try:
                quant = match_quant(norm.out, hidden)
            except NoMatch as e:
                if str(e) != "no FP8 tail":
                    quant_note = f"an FP8 tail follows the norm but stays unfused: {e}"
        if quant is not None:
            try:
                check_plan(comm, _ops.quant_pattern(quant.kind), hidden, rows, weight_dtype, norm,
                           self.algorithm, self.assume_max_tokens, quant.scale_rule, sandwich)
            except NoMatch as e:
                quant_note = f"{quant.kind} tail left unfused: {e}"
                quant = None
        if quant is None:
            check_plan(comm, Pattern.ResidualRmsNorm, hidden, rows, weight_dtype, norm,
                       self.algorithm, self.assume_max_tokens, sandwich=sandwich)

        opaque = opaque_quant_readers(norm.out) if norm.out is not None else []
        insert_fused(graph, x, m, quant, comm, self.algorithm)

        node = site.node.name
        stats.replaced += 1
        kind = f"{m.form}/{norm.form}/{norm.rounding}"
        if m.post_norm:
            kind = f"{m.form}[{m.post_norm}]/{norm.form}/{norm.rounding}"
            stats.notes.append(f"{node}: a {m.post_norm} site (all-reduce -> norm -> residual add"
                               f"{' -> norm' if m.post_norm == 'sandwich' else ''}): the "
                               "all-reduce and its norm are fused as a first-layer call; the "
                               "residual add and the next norm stay separate kernels"
                               + (f" ({sandwich_note})" if sandwich_note else ""))
        if m.views:
            kind += "+view"
        if norm.out is None:
            kind += "+add_only"
            stats.notes.append(f"{node}: the norm is read unrounded in fp32 (by "
                               f"{norm.unrounded_reader}: Inductor removed its round trip through "
                               f"{act}): only the all-reduce and the residual add are fused; the "
                               "norm and its reader stay separate kernels")
        if quant is not None:
            kind += f"+{quant.kind}"
        stats.kinds[kind] += 1
        if quant_note:
            stats.notes.append(f"{node}: {quant_note}")
        for op_name in opaque:
            stats.notes.append(f"{node}: the norm is read by {op_name}, an opaque quantization op: "
                               "the norm is fused, the quantization stays a separate kernel")
        return kind


def compile_options(communicators=None, **pass_options) -> dict:
    """Options for torch.compile(model, options=...) installing the pass (chaining a
    post_grad_custom_post_pass already set in torch._inductor.config)."""
    import torch._inductor.config as inductor_config

    existing = inductor_config.post_grad_custom_post_pass
    if existing is not None and "then" not in pass_options:
        pass_options["then"] = existing
    return {"post_grad_custom_post_pass": AllReduceFusionPass(communicators, **pass_options)}


__all__ = ["AllReduceFusionPass", "CommunicatorFacts", "FusionStats", "compile_options"]
