#!/usr/bin/env python3
"""The compile pass on Hugging Face transformers models on a GPU, with a real arfusion communicator:
every model of python/tests/torch_cpu/hf_models.py (its modeling code from PyPI, 2 decoder layers,
hidden 256, bf16), tensor-parallel over 2 rank processes that share one GPU (the harness's way:
gloo for torch.distributed, arfusion's ipc transport), each rank holding its own shard of weights
drawn from the same seed. Per model and rank (hf_model_check.py): eager (every all-reduce through
torch.distributed), compiled without the pass, compiled with arfusion's AllReduceFusionPass, on
token batches of 1, 3, 17 and 64 tokens (1 in a graph of its own, the others in one graph with a
bounded dynamic token count). A model passes when

  - every all-reduce is fused, or left for a reason the pass documents as a limitation, and the
    outcome is the documented one (docs/compile_pass_models.md) in every graph;
  - its logits are within the tolerances of hf_model_check.py (against the model compiled without
    the pass, and against eager);
  - the ranks' logits are bitwise identical (eager, compiled without and with the pass).

    python3 python/tests/gpu/hf_models_gpu.py [--models Llama,Gemma3] [--json FILE]
    python3 python/tests/gpu/hf_models_gpu.py --negative-controls   # each check fails on its fault
    python3 python/tests/gpu/hf_models_gpu.py --cpu-dry-run [--ranks 0,1]   # no GPU (see below)

--negative-controls compiles Llama with two faults put into the graph after the pass
(hf_model_check.mutant_hook): a dropped residual must exceed the tolerance, a rounding changed on
rank 1 alone must make the ranks differ; it exits 0 when both are caught.
--cpu-dry-run runs the same per-rank check on the CPU in this process: the CPU tests' fake process
group (an all-reduce leaves its input as it is, so the ranks' outputs are partial sums and are not
compared across ranks), the fused ops' CPU kernels (python/tests/torch_cpu/cpu_kernels.py) and a
CommunicatorFacts; it shows that models build and shard, the dynamic graphs compile with the pass,
the outcome matches the table, and the comparisons run.

Needs torch >= 2.10 with CUDA, transformers, and the arfusion package installed
(python/tests/run_hf_models_gpu.sh installs it and sets PYTHONPATH). Exit 0 all passed, 1 a
failure, 77 skipped (a "SKIPPED: ..." line says why).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:  # arfusion: the installed package (python/tests/run_hf_models_gpu.sh)
    sys.path.insert(0, HERE)

WORLD = 2
CONTROL_MODEL = "Llama"
CONTROLS = (("drop_residual", "drop_residual"), ("rank_rounding", "rank_rounding"))
CONTROL_TOKENS = (3, 17)


# ---- on every rank (harness.run_scenario imports this module there) ------------------------------


def _no_compile_caches():
    """A cache hit would skip the pass (nothing to count, nothing checked)."""
    import torch._inductor.config as inductor_config

    inductor_config.fx_graph_cache = False
    try:
        import torch._functorch.config as functorch_config

        functorch_config.enable_autograd_cache = False
    except (ImportError, AttributeError):
        pass


def gpu_compile(fn, p):
    import torch

    torch._dynamo.reset()  # the models' forwards share code objects: no guard or cache carries over
    options = {"post_grad_custom_post_pass": p} if p is not None else None
    return torch.compile(fn, fullgraph=True, options=options)


def rank_scenario(ctx):
    """One rank: every model of $ARF_HF_MODELS, results to $ARF_HF_OUT/<model>.rank<r>.json. A
    model's failed expectations go into its result; a check fails here only when it raises."""
    import torch

    import arfusion.torch as aft
    import hf_model_check as hc

    _no_compile_caches()
    names = [n for n in os.environ["ARF_HF_MODELS"].split(",") if n]
    tokens = tuple(int(t) for t in os.environ["ARF_HF_TOKENS"].split(","))
    controls = os.environ.get("ARF_HF_MODE") == "controls"
    out_dir = os.environ["ARF_HF_OUT"]
    # timeout: a rank's fused op waits for its peer's launch while the peer may still be compiling
    comm = aft.Communicator.from_group(name="tp", max_tokens=hc.MAX_TOKENS, max_hidden=hc.HIDDEN,
                                       dtype=torch.bfloat16, timeout_s=120.0)
    variants = CONTROLS if controls else (("pass", None),)
    for name in names:
        def one(name=name):
            res = hc.check_model(name, rank=ctx.rank, world=ctx.world, device=ctx.device,
                                 comm=comm, compile_fn=gpu_compile, tokens=tokens,
                                 variants=variants)
            with open(os.path.join(out_dir, f"{name}.rank{ctx.rank}.json"), "w") as f:
                json.dump(res, f)
            comm.check()  # an asynchronous error of the communicator fails the model
            return f"{len(res['problems'])} problem(s)"

        ctx.check(name, one)
    ctx.barrier()
    comm.destroy()


# ---- the parent ------------------------------------------------------------------------------------


def _skip_reason(cpu: bool):
    try:
        import torch
    except ImportError:
        return "torch is not installed"
    version = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    if version < (2, 10):
        return f"torch {torch.__version__} < 2.10 (the Hugging Face models' graphs need 2.10)"
    if not cpu and not torch.cuda.is_available():
        return "no CUDA device visible"
    try:
        import transformers  # noqa: F401
    except ImportError:
        return "transformers is not installed"
    return None


def _run_gpu(names, tokens, controls, groups, deadline):
    """Runs the models in `groups` sets of rank processes at once (compilation, on the CPU,
    dominates); returns ({model: [rank results]}, {model: harness problems})."""
    import concurrent.futures

    import harness

    out_dir = tempfile.mkdtemp(prefix="arf_hf_models_")
    split = [names[i::groups] for i in range(groups)]
    split = [s for s in split if s]
    # Inductor's compile workers: every rank process has a pool; share the cores among them (the
    # ranks inherit this process's environment at spawn, before they import Inductor)
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS",
                          str(max(1, (os.cpu_count() or 2) // (WORLD * len(split)))))

    def run(group):
        env = {"CUDA_DEVICE_MAX_CONNECTIONS": "32", "ARF_HF_MODELS": ",".join(group),
               "ARF_HF_TOKENS": ",".join(map(str, tokens)), "ARF_HF_OUT": out_dir,
               "ARF_HF_MODE": "controls" if controls else "check", "NCCL_NVLS_ENABLE": "0"}
        if os.environ.get("ARFUSION_LIBRARY"):
            env["ARFUSION_LIBRARY"] = os.environ["ARFUSION_LIBRARY"]
        return group, harness.run_scenario("hf_models_gpu", "rank_scenario", WORLD, deadline, env)

    results, harness_problems = {}, {}
    with concurrent.futures.ThreadPoolExecutor(len(split)) as pool:
        for group, (records, problems) in pool.map(run, split):
            by_name = dict(records)
            for name in group:
                hp = [f"harness: {p}" for p in problems]
                rec = by_name.get(name)
                if rec is None:
                    hp.append("the ranks did not reach this model")
                elif not rec["ok"]:
                    hp.extend(d[:2000] for d in rec["details"])
                harness_problems[name] = hp
                ranks = []
                for r in range(WORLD):
                    try:
                        with open(os.path.join(out_dir, f"{name}.rank{r}.json")) as f:
                            ranks.append(json.load(f))
                    except (OSError, ValueError):
                        pass
                results[name] = ranks
    return results, harness_problems


def _run_cpu(names, tokens, controls, ranks):
    """The per-rank check on the CPU, in this process (fake process group, CommunicatorFacts)."""
    import importlib.util

    import hf_model_check as hc

    spec = importlib.util.spec_from_file_location("cpu_harness",
                                                  os.path.join(hc.TORCH_CPU, "harness.py"))
    cpu = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cpu)  # its own imports (cpu_kernels, engine_ops) from its directory
    cpu.setup()
    comm = cpu.comm(max_tokens=hc.MAX_TOKENS, max_hidden=hc.HIDDEN)
    variants = CONTROLS if controls else (("pass", None),)
    results, problems = {}, {}
    for name in names:
        results[name], problems[name] = [], []
        for r in ranks:
            t0 = time.time()
            try:
                # the fake group's all-reduce sums nothing: no whole-model reference
                res = hc.check_model(name, rank=r, world=WORLD, device="cpu", comm=comm,
                                     compile_fn=cpu.compile_cpu, tokens=tokens, variants=variants,
                                     whole_model_reference=False)
                results[name].append(res)
            except Exception as e:  # noqa: BLE001 - reported per model
                import traceback

                problems[name].append(f"rank {r}: {type(e).__name__}: {e}\n"
                                      f"{traceback.format_exc(limit=8)}")
            print(f"  {name} rank {r}: {time.time() - t0:.0f} s", flush=True)
    return results, problems


def _verdicts(results, harness_problems, controls, compare_ranks):
    """{model: {"ok", "problems", ...}} (controls: "ok" = every fault caught by its check)."""
    import hf_model_check as hc

    out = {}
    for name, ranks in results.items():
        problems = list(harness_problems.get(name, []))
        if len(ranks) != (WORLD if compare_ranks else len(ranks)) or not ranks:
            problems.append(f"results of {len(ranks)} rank(s)")
        cross = hc.cross_rank(ranks) if compare_ranks else []
        per_rank = [f"rank {r['rank']}: {p}" for r in ranks for p in r["problems"]]
        entry = {"ranks": ranks, "cross_rank": cross, "ranks_compared": compare_ranks}
        if not controls:
            problems += per_rank + [f"cross-rank: {c}" for c in cross]
            entry.update(ok=not problems, problems=problems)
        else:
            caught = {}
            for label, _ in CONTROLS:
                mine = [p for p in per_rank if f": {label}: " in p]
                if label == "drop_residual":
                    caught[label] = any("compiled without the pass" in p for p in mine)
                elif compare_ranks:
                    caught[label] = any(c.startswith(f"{label}:") for c in cross)
                else:  # the CPU dry run compares no ranks: that the fault is put in, only
                    caught[label] = any(r["variants"][label].get("mutated_nodes") for r in ranks)
            # anything else wrong (a crash, a reference off, the pass's outcome) is a failure
            other = [p for p in per_rank if not any(f": {lb}: T=" in p for lb, _ in CONTROLS)]
            problems += other + [f"{lb}: the fault was not caught" for lb, ok in caught.items()
                                 if not ok]
            entry.update(ok=not problems, problems=problems, caught=caught)
        out[name] = entry
    return out


def _table(verdicts, controls) -> str:
    head = (f"{'model':<10} {'ARs':>3} {'fused':>5} {'left':>4} {'graphs':>6} {'err/no-pass':>11} "
            f"{'err/eager':>9} {'no-pass/eager':>13} {'ranks':>6} {'s':>4}  verdict")
    lines = [head]
    for name, v in verdicts.items():
        r0 = v["ranks"][0] if v["ranks"] else None
        if r0 is None:
            lines.append(f"{name:<10} {'-':>3} {'-':>5} {'-':>4} {'-':>6} {'':>11} {'':>9} {'':>13} "
                         f"{'':>6} {'':>4}  FAIL")
            continue
        for label, var in r0["variants"].items():
            g = var["per_graph"][0] if var["per_graph"] else {"all_reduces": 0, "replaced": 0,
                                                              "left": []}
            runs = [run for r in v["ranks"] for run in r["variants"].get(label, {}).get(
                "runs", {}).values()]
            e_np = max((run["err_vs_without_pass"] for run in runs), default=float("nan"))
            e_eg = max((run["err_vs_eager"] for run in runs), default=float("nan"))
            e_ref = max((e for r in v["ranks"] for e in r["err_without_pass_vs_eager"].values()),
                        default=float("nan"))
            same = "-" if not v["ranks_compared"] or len(v["ranks"]) < WORLD else (
                "differ" if any(c.startswith(("eager", "compiled", label)) for c in v["cross_rank"])
                else "same")
            secs = max(sum(r["seconds"].values()) + r["variants"][label]["seconds"]
                       for r in v["ranks"] if label in r["variants"])
            model = name if not controls else f"{name}:{label}"
            verdict = "PASS" if v["ok"] else "FAIL"
            if controls:
                verdict = "caught" if v["caught"].get(label) else "MISSED"
                if v["caught"].get(label) and not v["ranks_compared"] and label == "rank_rounding":
                    verdict = "applied (ranks not compared)"
            lines.append(f"{model:<10} {g['all_reduces']:>3} {g['replaced']:>5} {len(g['left']):>4} "
                         f"{var['stats']['graphs']:>6} {e_np:>11.4g} {e_eg:>9.4g} {e_ref:>13.4g} "
                         f"{same:>6} {secs:>4.0f}  {verdict}")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--models", default="", help="comma-separated names of hf_models.MODELS "
                    "(default: all; with --negative-controls: Llama)")
    ap.add_argument("--tokens", default="", help="comma-separated token counts (default 1,3,17,64; "
                    "with --negative-controls 3,17)")
    ap.add_argument("--json", default=None, help="write every result here")
    ap.add_argument("--groups", type=int, default=3,
                    help="sets of rank processes run at once, each on its share of the models")
    ap.add_argument("--deadline", type=float, default=220.0, help="seconds per set of ranks")
    ap.add_argument("--negative-controls", action="store_true")
    ap.add_argument("--cpu-dry-run", action="store_true")
    ap.add_argument("--ranks", default="0,1", help="--cpu-dry-run: the ranks whose shards run")
    args = ap.parse_args(argv)

    why = _skip_reason(args.cpu_dry_run)
    if why:
        print(f"SKIPPED: {why}", flush=True)
        return 77
    import torch
    import transformers

    import hf_model_check as hc
    import hf_models

    names = [n for n in args.models.split(",") if n] or (
        [CONTROL_MODEL] if args.negative_controls else list(hf_models.MODELS))
    unknown = [n for n in names if n not in hf_models.MODELS]
    if unknown:
        print(f"unknown models {unknown}; known: {list(hf_models.MODELS)}", flush=True)
        return 2
    tokens = tuple(int(t) for t in args.tokens.split(",") if t) or (
        CONTROL_TOKENS if args.negative_controls else hc.TOKENS)
    if any(not 1 <= t <= hc.MAX_TOKENS for t in tokens):
        print(f"token counts must be within 1..{hc.MAX_TOKENS}", flush=True)
        return 2
    try:
        import arfusion  # noqa: F401 - the library must load before ranks are spawned
    except ImportError as e:
        print(f"FAILED: import arfusion: {e}", flush=True)
        return 1
    where = "CPU dry run (fake process group)" if args.cpu_dry_run else (
        f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}")
    print(f"torch {torch.__version__}, transformers {transformers.__version__}, {where}; library "
          f"{arfusion.library_path}; models {names}; tokens {list(tokens)}; tolerances "
          f"{hc.TOL_COMPILED} (vs compiled without the pass), {hc.TOL_EAGER} (vs eager)", flush=True)
    t0 = time.time()
    if args.cpu_dry_run:
        ranks = [int(r) for r in args.ranks.split(",") if r]
        results, hp = _run_cpu(names, tokens, args.negative_controls, ranks)
    else:
        results, hp = _run_gpu(names, tokens, args.negative_controls, max(1, args.groups),
                               args.deadline)
    verdicts = _verdicts(results, hp, args.negative_controls, compare_ranks=not args.cpu_dry_run)
    for name, v in verdicts.items():
        for p in v["problems"]:
            print(f"FAIL  {name}: {p}", flush=True)
    print(_table(verdicts, args.negative_controls), flush=True)
    failed = [n for n, v in verdicts.items() if not v["ok"]]
    print(f"{len(verdicts) - len(failed)} passed, {len(failed)} failed ({time.time() - t0:.0f} s)"
          + (" [negative controls: passed = every fault caught]" if args.negative_controls else ""),
          flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "transformers": transformers.__version__,
                       "device": where, "tokens": list(tokens),
                       "tolerances": {"vs_compiled_without_pass": hc.TOL_COMPILED,
                                      "vs_eager": hc.TOL_EAGER},
                       "negative_controls": args.negative_controls,
                       "seconds": round(time.time() - t0, 1), "models": verdicts}, f, indent=1)
    return 0 if not failed and verdicts else 1


if __name__ == "__main__":
    sys.exit(main())
