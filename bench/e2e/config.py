"""Command line, presets, variants and the run plan of the end-to-end TP decoder benchmark.

Pure Python (no torch): tested on the CPU by bench/e2e/tests (ctest e2e_cpu). The GPU side
(rank.py, model.py, gates.py, timing.py) reads the plan this module makes.

Presets (an explicit option overrides the preset's value):
  full  (default)  TP 1,2,4,8; L=80; decode batches 1..256; prefill 512/2048/8192; 200 replays
  quick            TP 2; L=8; 32 gated decode steps; decode batches 1,32; prefill 512; 30 replays
                   (a smoke of every variant and gate, minutes on one GPU; not for the record)
  ctest            TP 2; L=2; gates only, 16 decode steps (the GPU ctest e2e_gpu)
"""

from __future__ import annotations

import argparse
import dataclasses
import math
import os

# ---- the model: Llama-3-70B shapes ---------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class ModelDims:
    hidden: int = 8192
    heads: int = 64
    kv_heads: int = 8
    head_dim: int = 128
    ffn: int = 28672
    vocab: int = 32000
    layers: int = 80
    eps: float = 1e-5
    rope_theta: float = 500000.0

    def check_tp(self, tp: int) -> list[str]:
        """Reasons this TP degree cannot shard the model (empty: it can)."""
        why = []
        if tp < 1:
            why.append(f"TP {tp} < 1")
            return why
        if self.heads % tp or self.kv_heads % tp:
            why.append(f"{self.heads} query / {self.kv_heads} KV heads do not split over TP {tp}")
        if self.ffn % (tp * 128):
            why.append(f"FFN {self.ffn} is not a multiple of 128 * TP {tp} (FP8 128x128 weight blocks)")
        if self.vocab % (tp * 32):
            why.append(f"vocab {self.vocab} is not a multiple of 32 * TP {tp} (weight blocks)")
        if self.hidden % 128:
            why.append(f"hidden {self.hidden} is not a multiple of 128")
        return why


# ---- variants ------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Variant:
    name: str
    ar: str            # "c10d" (torch.distributed.all_reduce), "arf_ar" (arfusion all-reduce op),
    #                    "fused" (arfusion fused op in the model code)
    compiled: bool     # the model's layers under torch.compile
    fusion_pass: bool  # ... with arfusion's AllReduceFusionPass
    fp8: bool          # FP8 quantization of the normalized activations + FP8 GEMMs (QKV, gate/up)
    algorithm: str     # arfusion algorithm of the fused ops ("auto" unless forced)
    timed: bool        # timed by default (others are correctness references only)
    description: str
    inplace: bool = True  # "fused": the in-place op at the layer sites (else the _out op)

    @property
    def needs_nccl_everywhere(self) -> bool:
        """A c10d all-reduce left in a compiled graph: needs NCCL (one GPU per rank) to run at all
        under CUDA graphs, and this variant has nothing else to offer (d0, e_d0)."""
        return self.ar == "c10d" and self.compiled and not self.fusion_pass


def _v(name, ar, compiled=False, fusion_pass=False, fp8=False, algorithm="auto", timed=True,
       description="", inplace=True):
    return Variant(name, ar, compiled, fusion_pass, fp8, algorithm, timed, description, inplace)


VARIANTS: dict[str, Variant] = {v.name: v for v in (
    _v("a", "c10d", description="NCCL all-reduce (torch.distributed) + torch residual add + "
       "LlamaRMSNorm: what an engine does without fusion"),
    _v("b", "arf_ar", description="arfusion all-reduce (torch.ops.arfusion.all_reduce) + torch add + "
       "LlamaRMSNorm"),
    _v("c", "fused", description="arfusion fused op in the model code (in place, the engines' "
       "fused_add_rms_norm convention; norm_rounding=before_weight)"),
    _v("c_compiled", "fused", compiled=True, timed=False, inplace=False,
       description="(c) under torch.compile, calling fused_add_rms_norm_out (the op the pass "
       "emits; the same bits as the in-place op): the reference for (d) bitwise"),
    _v("d0", "c10d", compiled=True, description="model (a) under torch.compile without the pass "
       "(the compiled baseline of (d))"),
    _v("d", "c10d", compiled=True, fusion_pass=True,
       description="model (a) under torch.compile with arfusion's AllReduceFusionPass"),
    _v("e_a", "c10d", fp8=True, description="(a) + torch FP8 quantization of the normalized "
       "activations + FP8 GEMMs (QKV, gate/up)"),
    _v("e_c", "fused", fp8=True, description="(c) with the fused quantizing op "
       "(fused_add_rms_norm_quant) feeding the FP8 GEMMs"),
    _v("e_c_compiled", "fused", compiled=True, fp8=True, timed=False,
       description="(e_c) under torch.compile: the reference for (e_d) bitwise"),
    _v("e_d0", "c10d", compiled=True, fp8=True,
       description="(e_a) under torch.compile without the pass"),
    _v("e_d", "c10d", compiled=True, fusion_pass=True, fp8=True,
       description="(e_a) under torch.compile with the pass (FP8 tail fused)"),
)}

DEFAULT_ORDER = ["a", "b", "c", "c_compiled", "d0", "d", "e_a", "e_c", "e_c_compiled", "e_d0", "e_d"]
ALGORITHMS = ("unfused", "oneshot_lamport", "oneshot_pull", "twoshot")


# The teacher-forcing reference of the end-to-end gates, in the order tried (the next takes over
# when one fails to run): the unfused engine, the fused op in the model code, then their FP8 forms.
REFERENCE_PREFERENCE = ("a", "c", "e_a", "e_c")


def gate_order(gate_variants) -> list[str]:
    """The order the gates run the variants in: the reference candidates first (the first that
    runs becomes the reference), then the rest as given. Every variant is a candidate, so a
    chunk of variants without (a) or (c) still has a reference: without one every variant would
    decode freely, and one near-tie of two logits would send two variants down different token
    paths, which the comparisons would then report as a difference of the kernels."""
    names = list(gate_variants)
    preferred = [n for n in REFERENCE_PREFERENCE if n in names]
    return preferred + [n for n in names if n not in preferred]


def forced_algorithm_variant(algorithm: str) -> Variant:
    """(c) with every fused call forced to `algorithm` (gate only): the contract says every
    algorithm, and the library's unfused path, give the same bits."""
    if algorithm not in ALGORITHMS:
        raise ValueError(f"unknown arfusion algorithm {algorithm!r} (one of {', '.join(ALGORITHMS)})")
    if algorithm == "unfused":   # arfusion's own two kernels: the fusion gain at equal numerics
        return _v("c@unfused", "fused", algorithm="unfused", timed=True,
                  description="(c) with algorithm=unfused forced: arfusion's all-reduce kernel, then "
                              "its norm kernel (bitwise equal to (c) by contract)")
    return _v(f"c@{algorithm}", "fused", algorithm=algorithm, timed=False,
              description=f"(c) with algorithm={algorithm} forced (gate only)")


def variant(name: str) -> Variant:
    if name.startswith("c@"):
        return forced_algorithm_variant(name[2:])
    try:
        return VARIANTS[name]
    except KeyError:
        raise ValueError(f"unknown variant {name!r} (known: {', '.join(DEFAULT_ORDER)}, "
                         f"c@<algorithm>)") from None


# ---- presets and the command line ----------------------------------------------------------------

PRESETS = {
    "full": dict(tp=[1, 2, 4, 8], layers=80, decode_batches=[1, 8, 32, 64, 128, 256],
                 prefill_tokens=[512, 2048, 8192], replays=200, prefill_replays=200, warmup=20,
                 gate_steps=128, prompt_tokens=32, context=2048, gate_algorithms=list(ALGORITHMS),
                 time_shared=False, gates_only=False, deadline=6 * 3600.0),
    # quick fits one 10-minute call on one GPU: two time-sliced processes pay a GPU time slice per
    # collective: L=80 x 128 steps took ~90 s per gated variant (ten of them; ~4.6 ms per
    # collective, derived from 160 collectives a step)
    "quick": dict(tp=[2], layers=8, decode_batches=[1, 32], prefill_tokens=[512], replays=30,
                  prefill_replays=10, warmup=5, gate_steps=32, prompt_tokens=32, context=2048,
                  gate_algorithms=["unfused"], time_shared=True, gates_only=False,
                  deadline=3600.0),
    "ctest": dict(tp=[2], layers=2, decode_batches=[], prefill_tokens=[], replays=0,
                  prefill_replays=0, warmup=0, gate_steps=16, prompt_tokens=16, context=256,
                  gate_algorithms=["unfused"], time_shared=False, gates_only=True,
                  deadline=600.0),
}
MIN_RECORD_REPLAYS = 200


def _int_list(text: str) -> list[int]:
    text = text.strip()
    if not text:
        return []
    out = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        try:
            v = int(part)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{part!r} is not an integer") from None
        if v <= 0:
            raise argparse.ArgumentTypeError(f"{v} must be positive")
        out.append(v)
    return out


def _name_list(text: str) -> list[str]:
    return [p.strip() for p in text.split(",") if p.strip()]


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(
        prog="tp_decoder.py",
        description="End-to-end tensor-parallel decoder (Llama-3-70B shapes): correctness gates, "
                    "then CUDA-graph step times of NCCL / arfusion / fused / compiled variants.")
    mode = ap.add_mutually_exclusive_group()
    mode.add_argument("--quick", action="store_true", help="preset quick: gates + a short timing")
    mode.add_argument("--ctest", action="store_true", help="preset ctest: 2 layers, TP 2, gates only")
    ap.add_argument("--tp", type=_int_list, help="TP degrees, e.g. 1,2,4,8")
    ap.add_argument("--layers", type=int, help="decoder layers L (one layer's weights serve all L)")
    ap.add_argument("--variants", type=_name_list,
                    help="variants to run (default: all; gate-only ones are run for the gates). "
                         "Known: " + ", ".join(DEFAULT_ORDER))
    ap.add_argument("--decode-batches", type=_int_list, help="decode batch sizes (CUDA graphs)")
    ap.add_argument("--prefill-tokens", type=_int_list, help="prefill token counts (one sequence)")
    ap.add_argument("--context", type=int, help="static KV cache length (decode attends to all of it)")
    ap.add_argument("--replays", type=int, help="timed CUDA-graph replays per decode shape")
    ap.add_argument("--prefill-replays", type=int, help="timed replays per prefill shape")
    ap.add_argument("--warmup", type=int, help="untimed replays before timing")
    ap.add_argument("--gate-steps", type=int, help="greedy decode steps of the gates")
    ap.add_argument("--prompt-tokens", type=int, help="prompt length of the gates")
    ap.add_argument("--gate-algorithms", type=_name_list,
                    help="forced arfusion algorithms compared bitwise with (c) in the gates "
                         "(" + ", ".join(ALGORITHMS) + "; empty: none)")
    ap.add_argument("--kv-cache", choices=("shared", "per-layer"), default="shared",
                    help="timing: one KV cache for all layers (default; memory of one layer) or "
                         "one per layer. The gates always use one per layer.")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--results", default=None,
                    help="results directory (default bench/results/<date>-e2e[-quick]-<commit>)")
    ap.add_argument("--gates-only", action="store_true", default=None, help="no timing")
    ap.add_argument("--time-shared", action="store_true", default=None,
                    help="time TP>1 even where ranks share a GPU (time-sliced: meaningless, flagged)")
    ap.add_argument("--allow-short", action="store_true",
                    help=f"allow fewer than {MIN_RECORD_REPLAYS} replays outside --quick (flagged)")
    ap.add_argument("--min-cosine", type=float, default=0.95,
                    help="sanity bound (not a contract): logits cosine of every bf16 variant vs the "
                         "reference variant")
    ap.add_argument("--min-cosine-fp8", type=float, default=0.90,
                    help="sanity bound: logits cosine of every FP8 variant vs e_a")
    ap.add_argument("--arf-timeout", type=float, default=300.0,
                    help="arfusion's bound on every device-side wait, seconds (ranks compile at "
                         "different speeds; the library's default of 10 s is too short for that)")
    ap.add_argument("--deadline", type=float, help="seconds per TP degree before its ranks are killed")
    ap.add_argument("--time-anyway", action="store_true",
                    help="time even when a demanded gate failed (the run still fails)")
    ap.add_argument("--no-plot", action="store_true")
    ap.add_argument("--nccl-shared-gpu", action="store_true",
                    help="where ranks share a GPU, run (a) and the compiled c10d variants (d0, e_d0) "
                         "on NCCL anyway: each rank poses to NCCL as a host of its own (NCCL_HOSTID), "
                         "so NCCL joins them over loopback sockets instead of refusing two ranks on "
                         "one GPU. Slow (time-sliced and through host memory), so opt-in")
    return ap


@dataclasses.dataclass
class Options:
    preset: str
    tp: list[int]
    layers: int
    variants: list[str]
    decode_batches: list[int]
    prefill_tokens: list[int]
    context: int
    replays: int
    prefill_replays: int
    warmup: int
    gate_steps: int
    prompt_tokens: int
    gate_algorithms: list[str]
    kv_cache: str
    seed: int
    results: str | None
    gates_only: bool
    time_shared: bool
    allow_short: bool
    min_cosine: float
    min_cosine_fp8: float
    arf_timeout: float
    deadline: float
    time_anyway: bool
    no_plot: bool
    command_line: list[str]
    nccl_shared_gpu: bool = False

    @property
    def quick(self) -> bool:
        return self.preset in ("quick", "ctest")

    def dims(self) -> ModelDims:
        return ModelDims(layers=self.layers)

    @property
    def for_the_record(self) -> bool:
        """Timing good enough for the performance record (>= 200 replays per shape, not a quick preset)."""
        return (not self.quick and self.replays >= MIN_RECORD_REPLAYS
                and (not self.prefill_tokens or self.prefill_replays >= MIN_RECORD_REPLAYS))


class UsageError(ValueError):
    pass


def parse_args(argv: list[str]) -> Options:
    ap = build_parser()
    ns = ap.parse_args(argv)
    preset = "quick" if ns.quick else "ctest" if ns.ctest else "full"
    base = dict(PRESETS[preset])

    def pick(name):
        v = getattr(ns, name)
        return base[name] if v is None else v

    variants = ns.variants if ns.variants is not None else list(DEFAULT_ORDER)
    opts = Options(
        preset=preset, tp=pick("tp"), layers=pick("layers"), variants=variants,
        decode_batches=pick("decode_batches"), prefill_tokens=pick("prefill_tokens"),
        context=pick("context"), replays=pick("replays"), prefill_replays=pick("prefill_replays"),
        warmup=pick("warmup"), gate_steps=pick("gate_steps"), prompt_tokens=pick("prompt_tokens"),
        gate_algorithms=pick("gate_algorithms"), kv_cache=ns.kv_cache, seed=ns.seed,
        results=ns.results, gates_only=pick("gates_only"), time_shared=pick("time_shared"),
        allow_short=ns.allow_short, min_cosine=ns.min_cosine, min_cosine_fp8=ns.min_cosine_fp8,
        arf_timeout=ns.arf_timeout, deadline=pick("deadline"), time_anyway=ns.time_anyway,
        no_plot=ns.no_plot, command_line=list(argv), nccl_shared_gpu=ns.nccl_shared_gpu)
    validate(opts)
    return opts


def validate(o: Options) -> None:
    problems = []
    dims = o.dims()
    if o.layers < 1:
        problems.append("--layers must be >= 1")
    if not o.tp:
        problems.append("--tp names no TP degree")
    for tp in o.tp:
        problems += [f"TP {tp}: {w}" for w in dims.check_tp(tp)]
    if len(set(o.tp)) != len(o.tp):
        problems.append("--tp repeats a degree")
    for name in o.variants:
        try:
            variant(name)
        except ValueError as e:
            problems.append(str(e))
    for alg in o.gate_algorithms:
        if alg not in ALGORITHMS:
            problems.append(f"--gate-algorithms: unknown algorithm {alg!r}")
    if o.context % 16:
        problems.append(f"--context {o.context} must be a multiple of 16 (attention mask alignment)")
    if o.prompt_tokens < 1 or o.gate_steps < 1:
        problems.append("--prompt-tokens and --gate-steps must be >= 1")
    if o.prompt_tokens + o.gate_steps > o.context:
        problems.append(f"--prompt-tokens {o.prompt_tokens} + --gate-steps {o.gate_steps} exceed the "
                        f"KV cache (--context {o.context})")
    if not o.gates_only:
        if not o.decode_batches and not o.prefill_tokens:
            problems.append("timing without a decode batch or a prefill size (use --gates-only)")
        if o.decode_batches and o.replays < 1:
            problems.append("--replays must be >= 1")
        if o.prefill_tokens and o.prefill_replays < 1:
            problems.append("--prefill-replays must be >= 1")
        short = (o.decode_batches and o.replays < MIN_RECORD_REPLAYS) or (
            o.prefill_tokens and o.prefill_replays < MIN_RECORD_REPLAYS)
        if short and not o.quick and not o.allow_short:
            problems.append(f"fewer than {MIN_RECORD_REPLAYS} replays per shape: not a measurement "
                            "for the record (pass --allow-short to run it anyway, flagged)")
        if o.warmup < 0:
            problems.append("--warmup must be >= 0")
    if not 0.0 <= o.min_cosine <= 1.0 or not 0.0 <= o.min_cosine_fp8 <= 1.0:
        problems.append("--min-cosine / --min-cosine-fp8 must lie in [0, 1]")
    if o.arf_timeout <= 0 or o.deadline <= 0:
        problems.append("--arf-timeout and --deadline must be positive")
    if problems:
        raise UsageError("; ".join(problems))


# ---- the plan --------------------------------------------------------------------------------------


@dataclasses.dataclass
class TPPlan:
    tp: int
    gpus_used: int
    ranks_per_gpu: int
    shared_gpu: bool          # ranks share a GPU (time-sliced, or at once under MPS)
    baseline_allreduce: str   # "nccl" or "gloo_cpu_copy" (variant (a') on a shared GPU)
    gate_variants: list[str]
    timed_variants: list[str]
    skipped: dict             # variant -> reason (gates and timing)
    timing_skipped: str | None  # reason the whole timing is skipped, or None
    time_sliced: bool         # timing runs although ranks share a GPU (flagged)
    decode_batches: list[int]
    prefill_tokens: list[int]
    max_tokens: int           # the arfusion communicator's capacity (largest call of the run)
    nccl_over_loopback: bool = False  # NCCL although ranks share a GPU (--nccl-shared-gpu)
    sharing: str = ""         # how ranks share a GPU: "time-sliced", "MPS" (at once), "" (they don't)

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


def mps_daemon_present(environ=os.environ) -> bool:
    """Whether this job's CUDA processes would connect to an MPS control daemon (its pipe
    directory: CUDA_MPS_PIPE_DIRECTORY, else the default /tmp/nvidia-mps)."""
    pipe = environ.get("CUDA_MPS_PIPE_DIRECTORY") or "/tmp/nvidia-mps"
    return os.path.exists(os.path.join(pipe, "control"))


def sharing_words(sharing: str) -> str:
    """Why shared-GPU times mean nothing, in the words of how the ranks share it."""
    if sharing == "MPS":
        return "run at once under MPS, contending for one GPU's SMs and memory"
    return "time-sliced"


def plan_tp(o: Options, tp: int, num_gpus: int, mps: bool = False) -> TPPlan:
    """What one TP degree runs on a machine with num_gpus GPUs (rank r on GPU r % num_gpus);
    mps: the rank processes run under an MPS daemon."""
    if num_gpus < 1:
        raise ValueError("no GPU")
    shared = num_gpus < tp
    sharing = ("MPS" if mps else "time-sliced") if shared else ""
    gpus_used = min(tp, num_gpus)
    ranks_per_gpu = math.ceil(tp / gpus_used)
    nccl = not shared or o.nccl_shared_gpu
    requested = [variant(n) for n in o.variants]
    if any(v.name == "c" for v in requested):
        requested += [forced_algorithm_variant(a) for a in o.gate_algorithms
                      if f"c@{a}" not in [v.name for v in requested]]
    gate, timed, skipped = [], [], {}
    for v in requested:
        if v.needs_nccl_everywhere and not nccl:
            skipped[v.name] = ("its compiled graph keeps torch.distributed's all-reduce, which needs "
                               "NCCL (one GPU per rank); NCCL cannot put two ranks on one GPU")
            continue
        gate.append(v.name)
        if not v.timed:
            continue
        if v.ar == "c10d" and not v.compiled and not nccl:
            skipped[v.name] = (f"({v.name}) cannot run here: NCCL cannot put two ranks on one GPU. "
                               f"The gates run ({v.name}') instead: torch.distributed all-reduce "
                               "over gloo of CPU copies (gloo's bf16 summation order, not NCCL's); "
                               "it cannot be captured in a CUDA graph, so it is not timed")
            continue
        timed.append(v.name)
    timing_skipped = None
    time_sliced = False
    if o.gates_only:
        timing_skipped = "gates only (--gates-only / --ctest)"
    elif shared and tp > 1 and not o.time_shared:
        timing_skipped = (f"{tp} ranks on {num_gpus} GPU(s): ranks share a GPU, times are "
                          f"{sharing_words(sharing)} and meaningless; timing runs belong to a machine "
                          f"with one GPU per rank (>= {tp} GPUs). --time-shared runs them anyway, flagged.")
    elif shared and tp > 1:
        time_sliced = True
    if not timed and timing_skipped is None:
        timing_skipped = "no timed variant can run here"
    decode = [] if timing_skipped else list(o.decode_batches)
    prefill = [] if timing_skipped else list(o.prefill_tokens)
    max_tokens = max([o.prompt_tokens, 1] + decode + prefill)
    return TPPlan(tp=tp, gpus_used=gpus_used, ranks_per_gpu=ranks_per_gpu, shared_gpu=shared,
                  baseline_allreduce="nccl" if nccl else "gloo_cpu_copy", gate_variants=gate,
                  timed_variants=timed if timing_skipped is None else [], skipped=skipped,
                  timing_skipped=timing_skipped, time_sliced=time_sliced, decode_batches=decode,
                  prefill_tokens=prefill, max_tokens=max_tokens, nccl_over_loopback=shared and nccl,
                  sharing=sharing)


def make_plan(o: Options, num_gpus: int, mps: bool = False) -> list[TPPlan]:
    return [plan_tp(o, tp, num_gpus, mps) for tp in o.tp]


def options_to_json(o: Options) -> dict:
    d = dataclasses.asdict(o)
    d["for_the_record"] = o.for_the_record
    return d


def options_from_json(d: dict) -> Options:
    fields = {f.name for f in dataclasses.fields(Options)}
    return Options(**{k: v for k, v in d.items() if k in fields})
