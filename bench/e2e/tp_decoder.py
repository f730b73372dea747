#!/usr/bin/env python3
"""End-to-end tensor-parallel decoder benchmark and accuracy gate.

A Llama-3-70B-shaped decoder (hidden 8192, 64 query / 8 KV heads, head dim 128, FFN 28672,
RMSNorm, SwiGLU, rotary, static KV cache) sharded Megatron-style over TP = 1, 2, 4, 8 processes,
in variants that differ only in how the all-reduce + residual add + RMSNorm sites run (see
config.VARIANTS and README.md). For every TP degree: the correctness gates (gates.py) first, then
CUDA-graph step times (timing.py). Writes e2e.json, e2e.txt and e2e_step_time.png to the results
directory.

    python3 bench/e2e/tp_decoder.py [--quick | --ctest] [options]      (bash bench/e2e/run.sh ...)

Exit status: 0 every demanded gate passed and nothing failed; 1 a failure (the verdict lists it);
2 bad arguments; 77 skipped ("SKIPPED: ..." says why: no torch >= 2.10 or no GPU).

Ranks are processes (torch.multiprocessing, spawn); rank r uses GPU r % (visible GPUs). Where
ranks share a GPU the times are time-sliced and meaningless: the run says so and, unless
--time-shared, times only what has a GPU per rank.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)

import config  # noqa: E402
import report  # noqa: E402

CHILD_ENV_DEFAULTS = {
    # with the default 8 hardware queues, ranks sharing a GPU can share a FIFO (tests/gpu/gpu_main.cc)
    "CUDA_DEVICE_MAX_CONNECTIONS": "32",
    # no NVLink multicast for NCCL (the machines' rules; arfusion's own runs do the same)
    "NCCL_NVLS_ENABLE": "0",
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _git_commit() -> str | None:
    if os.environ.get("ARF_GIT_COMMIT"):
        return os.environ["ARF_GIT_COMMIT"]
    try:
        out = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                             text=True, timeout=10)
        return out.stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def _skip(msg: str) -> int:
    print(f"SKIPPED: {msg}", flush=True)
    return 77


def _results_dir(opts, commit) -> str:
    if opts.results:
        return os.path.abspath(opts.results)
    date = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")
    tag = {"full": "e2e", "quick": "e2e-quick", "ctest": "e2e-ctest"}[opts.preset]
    return os.path.join(REPO, "bench", "results", f"{date}-{tag}-{commit or 'nogit'}")


def run_tp(opts, plan, torch, mp) -> dict:
    """Spawns plan.tp rank processes; returns the run object (rank 0's, merged with the others')."""
    out_dir = tempfile.mkdtemp(prefix=f"arf_e2e_tp{plan.tp}_")
    payload = json.dumps({"options": config.options_to_json(opts), "plan": plan.to_json(),
                          "sys_path": [HERE]})
    import rank as rank_mod

    t0 = time.time()
    procs = mp.start_processes(rank_mod.rank_entry,
                               args=(plan.tp, _free_port(), payload, out_dir),
                               nprocs=plan.tp, join=False, start_method="spawn")
    problems = []
    deadline = t0 + opts.deadline
    all_written_at = None
    while True:
        try:
            if procs.join(timeout=2.0):
                break
        except Exception as e:  # noqa: BLE001 - a rank exited with an error
            problems.append(f"a rank process failed: {type(e).__name__}: {str(e)[:1500]}")
            break
        now = time.time()
        if now > deadline:
            problems.append(f"deadline of {opts.deadline:.0f} s exceeded: rank processes killed")
            break
        written = all(os.path.exists(os.path.join(out_dir, f"rank{r}.json")) for r in range(plan.tp))
        if written and all_written_at is None:
            all_written_at = now
        if all_written_at is not None and now - all_written_at > 120:
            problems.append("ranks wrote their results but did not exit within 120 s: killed")
            break
    for p in procs.processes:
        if p.is_alive():
            p.kill()
    for p in procs.processes:
        p.join(timeout=10)
    per_rank = []
    for r in range(plan.tp):
        try:
            with open(os.path.join(out_dir, f"rank{r}.json")) as f:
                per_rank.append(json.load(f))
        except (OSError, ValueError):
            per_rank.append(None)
    shutil.rmtree(out_dir, ignore_errors=True)
    run = per_rank[0]
    if run is None:
        run = {"tp": plan.tp, "status": "crashed", "errors": ["rank 0 left no result"],
               "fp8": {"mode": None, "detail": ""}, "comm": {},
               "gates": {"passed": False, "demanded": [], "reported": {}},
               "timing": {"skipped": "the run crashed", "rows": [], "deltas": []},
               "pass_stats": {}}
    for r, other in enumerate(per_rank[1:], start=1):
        if other is None:
            problems.append(f"rank {r} left no result")
        elif other.get("status") == "crashed":
            run["errors"] += other.get("errors", [])
    if problems:
        run["errors"] += problems
        run["status"] = "crashed"
    elif any(o is not None and o.get("status") == "crashed" for o in per_rank):
        run["status"] = "crashed"
    run["plan"] = plan.to_json()
    run["wall_seconds"] = round(time.time() - t0, 1)
    return run


def environment(torch, arfusion) -> dict:
    props = torch.cuda.get_device_properties(0)
    try:
        v = torch.cuda.nccl.version()
        nccl = ".".join(str(x) for x in v) if isinstance(v, (tuple, list)) else str(v)
    except Exception:  # noqa: BLE001
        nccl = None
    return {"python": platform.python_version(), "torch": torch.__version__,
            "cuda": torch.version.cuda, "nccl": nccl, "gpu_count": torch.cuda.device_count(),
            "gpu_name": props.name, "gpu_memory_bytes": props.total_memory,
            "sm_count": props.multi_processor_count, "hostname": socket.gethostname(),
            "arfusion_library": arfusion.library_path,
            "env": {k: os.environ.get(k) for k in ("CUDA_DEVICE_MAX_CONNECTIONS", "NCCL_NVLS_ENABLE",
                                                    "ARFUSION_LIBRARY", "CUDA_VISIBLE_DEVICES",
                                                    "ARF_TUNING_TABLE")}}


def model_json(opts) -> dict:
    import dataclasses

    d = dataclasses.asdict(opts.dims())
    d.update({"description": "Llama-3-70B shapes, Megatron TP, bf16, random N(0, 1/fan_in) "
                             "weights of one layer reused by all L layers",
              "context": opts.context, "seed": opts.seed, "prompt_tokens": opts.prompt_tokens,
              "gate_steps": opts.gate_steps, "kv_cache_timing": opts.kv_cache,
              "kv_cache_gates": "per-layer",
              "norm": "LlamaRMSNorm (fp32 statistics, weight * x.to(bf16)); fused ops with "
                      "norm_rounding=before_weight",
              "embedding": "vocab-parallel + all-reduce (the first all-reduce -> norm site)",
              "lm_head": "replicated vocab x hidden, gates only (not in the timed step)",
              "timed_step": "embedding + L layers + final norm, CUDA graph"})
    return d


def main(argv: list[str]) -> int:
    try:
        opts = config.parse_args(argv)
    except config.UsageError as e:
        print(f"tp_decoder.py: {e}", file=sys.stderr)
        return 2
    try:
        import torch
    except ImportError:
        return _skip("torch is not installed (this benchmark needs torch >= 2.10 with CUDA)")
    try:
        major_minor = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    except ValueError:
        major_minor = (0, 0)
    if major_minor < (2, 10):
        return _skip(f"torch {torch.__version__} < 2.10 (from {torch.__file__})")
    if not torch.cuda.is_available() or torch.cuda.device_count() == 0:
        return _skip("no CUDA device visible")
    for k, v in CHILD_ENV_DEFAULTS.items():
        os.environ.setdefault(k, v)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    try:
        import arfusion
    except ImportError as e:
        print(f"FAILED: import arfusion: {e}\n(install the package: pip install "
              "--no-build-isolation ./python; run.sh does it)", flush=True)
        return 1
    try:
        import arfusion.torch  # noqa: F401 - fails early (torch version, op registration)
    except ImportError as e:
        print(f"FAILED: import arfusion.torch: {e}", flush=True)
        return 1
    import torch.multiprocessing as mp

    ngpu = torch.cuda.device_count()
    plans = config.make_plan(opts, ngpu, mps=config.mps_daemon_present())
    commit = _git_commit()
    out = _results_dir(opts, commit)
    env = environment(torch, arfusion)
    print(f"arfusion e2e TP decoder: preset {opts.preset}, L={opts.layers}, torch {torch.__version__}, "
          f"{ngpu} x {env['gpu_name']}, library {arfusion.library_path}", flush=True)
    print(f"results -> {out}", flush=True)
    for p in plans:
        where = (f"{p.tp} ranks on {p.gpus_used} GPU(s)"
                 + (f" (SHARED: {config.sharing_words(p.sharing)})" if p.shared_gpu else ""))
        print(f"  TP {p.tp}: {where}; gates: {', '.join(p.gate_variants)}; timing: "
              + (p.timing_skipped or ", ".join(p.timed_variants)), flush=True)
        if p.time_sliced:
            print(f"  WARNING: TP {p.tp} timing runs with ranks sharing a GPU: "
                  f"{config.sharing_words(p.sharing)}, MEANINGLESS times (code path only).", flush=True)
        for name, why in p.skipped.items():
            print(f"  TP {p.tp}: skipped {name}: {why}", flush=True)
    if not opts.for_the_record and not opts.gates_only:
        print("  NOTE: short timing (quick preset or < 200 replays): not for the record.", flush=True)
    runs = []
    for p in plans:
        print(f"=== TP {p.tp} ===", flush=True)
        runs.append(run_tp(opts, p, torch, mp))
    doc = report.make_document(
        date=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        git_commit=commit, command_line=["bench/e2e/tp_decoder.py"] + list(argv),
        options=config.options_to_json(opts), environment=env, model=model_json(opts),
        variants={n: config.variant(n).description for n in config.DEFAULT_ORDER}
        | {f"c@{a}": config.forced_algorithm_variant(a).description for a in config.ALGORITHMS},
        runs=runs)
    doc = report.sanitize(doc)
    problems = report.validate_document(doc)
    if problems:
        doc["verdict"]["passed"] = False
        doc["verdict"]["failures"] += [f"result document: {p}" for p in problems]
    os.makedirs(out, exist_ok=True)
    with open(os.path.join(out, "e2e.json"), "w") as f:
        json.dump(doc, f, indent=1, allow_nan=False)
    text = report.format_text(doc)
    with open(os.path.join(out, "e2e.txt"), "w") as f:
        f.write(text)
    why_no_plot = "--no-plot" if opts.no_plot else report.plot(doc, os.path.join(out, "e2e_step_time.png"))
    print(text, flush=True)
    print(f"wrote {out}/e2e.json, e2e.txt" + ("" if why_no_plot else ", e2e_step_time.png")
          + (f" (no plot: {why_no_plot})" if why_no_plot else ""), flush=True)
    return 0 if doc["verdict"]["passed"] else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
