"""One rank of one TP degree (spawned by tp_decoder.py): process group, arfusion communicator,
weights, gates, then timing; rank 0 writes the run's JSON object for the driver.

Process groups: with one GPU per rank the default group is NCCL (variant (a)'s all-reduce) and a
gloo group over the same ranks carries the bootstrap (arfusion's id), result exchange and barriers;
where ranks share a GPU the default group is gloo (NCCL cannot put two ranks on one GPU) and (a)
runs as (a'): gloo all-reduce of CPU copies, unless --nccl-shared-gpu has each rank pose to NCCL as a
host of its own (then NCCL over loopback sockets, as with one GPU per rank).
"""

from __future__ import annotations

import datetime
import json
import os
import sys
import time
import traceback


class Ctx:
    """What gates.py and timing.py read (plain attributes)."""

    def __init__(self, **kw):
        self.__dict__.update(kw)

    def log(self, msg: str) -> None:
        if self.rank == 0:
            print(f"[tp{self.world} {time.strftime('%H:%M:%S')}] {msg}", flush=True)

    def barrier(self) -> None:
        import torch.distributed as dist

        dist.barrier(group=self.cpu_group)

    def gather(self, obj):
        import torch.distributed as dist

        out = [None] * self.world
        dist.all_gather_object(out, obj, group=self.cpu_group)
        return out


def _configure_compiler(torch) -> None:
    import torch._dynamo
    import torch._inductor.config as inductor_config

    cfg = torch._dynamo.config
    for name in ("cache_size_limit", "recompile_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, 256)
    for name in ("accumulated_cache_size_limit", "accumulated_recompile_limit"):
        if hasattr(cfg, name):
            setattr(cfg, name, 4096)
    # a cache hit would skip the pass: nothing to count, and the pass check would fail
    inductor_config.fx_graph_cache = False
    # GEMMs stay cuBLAS (aten) in compiled graphs, as in eager: no Triton GEMM templates (which
    # _scaled_mm would otherwise consider even without max-autotune), so compiled and eager
    # variants differ only where Inductor fuses the code between the GEMMs
    inductor_config.max_autotune_gemm_backends = "ATEN"
    try:
        import torch._functorch.config as functorch_config

        functorch_config.enable_autograd_cache = False
    except (ImportError, AttributeError):
        pass


def _plans(ctx, sizes) -> list:
    """arfusion's plan (algorithm, kernels, grid, reason) of every call shape the run makes."""
    kinds = [("plain", {})]
    if ctx.fp8_mode == "per_group":
        kinds.append(("fp8", {"quant": "fp8_per_group", "scale_layout": "mn_major"}))
    elif ctx.fp8_mode == "per_token":
        kinds.append(("fp8", {"quant": "fp8_per_token"}))
    out = []
    for t in sorted(set(sizes)):
        entry = {"tokens": t}
        for key, kw in kinds:
            try:
                p = ctx.comm.plan(t, ctx.dims.hidden, norm_rounding="before_weight", **kw)
                entry[key] = {"algorithm": p.algorithm, "kernels": p.num_kernels, "grid": p.grid,
                              "fallback_level": p.fallback_level, "reason": p.reason}
            except Exception as e:  # noqa: BLE001
                entry[key] = {"refused": f"{type(e).__name__}: {e}"}
        out.append(entry)
    return out


def rank_entry(rank: int, world: int, port: int, payload_json: str, out_dir: str) -> None:
    payload = json.loads(payload_json)
    for p in reversed(payload["sys_path"]):
        if p not in sys.path:
            sys.path.insert(0, p)
    import config

    opts = config.options_from_json(payload["options"])
    plan = config.TPPlan(**payload["plan"])
    result = {"tp": world, "status": "ok", "errors": [], "fp8": {"mode": None, "detail": ""},
              "comm": {}, "gates": {"passed": False, "demanded": [], "reported": {}},
              "timing": {"skipped": plan.timing_skipped, "time_sliced": plan.time_sliced,
                         "rows": [], "deltas": [], "skipped_variants": {}},
              "pass_stats": {}, "seconds": {}}
    t_start = time.time()
    comm = None
    dist = None
    cpu_group = None
    try:
        import torch
        import torch.distributed as dist

        import gates
        import model
        import report
        import timing

        ndev = torch.cuda.device_count()
        device = torch.device("cuda", rank % ndev)
        torch.cuda.set_device(device)
        nccl = plan.baseline_allreduce == "nccl"
        init = f"tcp://127.0.0.1:{port}"
        timeout = datetime.timedelta(seconds=max(900.0, 3 * opts.arf_timeout))
        if nccl and plan.nccl_over_loopback:
            # Ranks sharing the GPU join NCCL over loopback (before NCCL's first use here).
            from arfusion.shared_gpu import nccl_env_for_ranks_on_one_gpu
            os.environ.update(nccl_env_for_ranks_on_one_gpu(f"arfusion-e2e-{os.getppid()}", rank))
        if nccl:
            dist.init_process_group("nccl", init_method=init, rank=rank, world_size=world,
                                    timeout=timeout, device_id=device)
            cpu_group = dist.new_group(backend="gloo", timeout=timeout)
            warm = torch.ones(16, device=device)
            dist.all_reduce(warm)   # NCCL's lazy setup happens here, never inside a capture
            torch.cuda.synchronize()
        else:
            dist.init_process_group("gloo", init_method=init, rank=rank, world_size=world,
                                    timeout=timeout)
            cpu_group = dist.group.WORLD
        model.set_cpu_group(cpu_group)
        _configure_compiler(torch)

        import arfusion
        import arfusion.torch as aft

        dims = opts.dims()
        comm_name = "e2e_tp"
        comm = aft.Communicator.from_group(dist.group.WORLD, cpu_group=cpu_group,
                                           max_tokens=plan.max_tokens, max_hidden=dims.hidden,
                                           dtype=torch.bfloat16, timeout_s=opts.arf_timeout,
                                           init_timeout_s=120.0, name=comm_name)
        t0 = time.time()
        W = model.make_weights(dims, world, rank, opts.seed, device)
        positions = max([opts.context] + list(plan.prefill_tokens))
        cos_tab, sin_tab = model.rope_tables(dims, positions, device)
        gen = torch.Generator().manual_seed(opts.seed + 1)
        prompt = torch.randint(0, dims.vocab, (opts.prompt_tokens,), generator=gen).to(device)
        ctx = Ctx(rank=rank, world=world, device=device, dims=dims, opts=opts, plan=plan, W=W,
                  comm=comm, comm_name=comm_name, cpu_group=cpu_group, nccl=nccl,
                  cos_tab=cos_tab, sin_tab=sin_tab,
                  ctx_arange=torch.arange(opts.context, device=device), prompt_ids=prompt,
                  fp8_mode=None, fp8_detail="")
        ctx.log(f"weights ready ({time.time() - t0:.1f} s); arfusion workspace "
                f"{comm.workspace_bytes / 2**20:.1f} MiB per rank; library {arfusion.library_path}")

        # FP8: the same answer on every rank, or none
        wants_fp8 = any(config.variant(n).fp8 for n in plan.gate_variants + plan.timed_variants)
        if wants_fp8:
            ms = [opts.prompt_tokens, 1] + list(plan.decode_batches) + list(plan.prefill_tokens)
            mode, detail = gates.probe_fp8(ctx, ms)
            got = ctx.gather((mode, detail))
            if len({m for m, _ in got}) != 1:
                mode, detail = None, f"ranks disagree: {got}"
            ctx.fp8_mode, ctx.fp8_detail = mode, detail
            if mode is not None:
                W.qkv8, W.qkv_s = model.quant_weight(W.qkv, mode)
                W.gu8, W.gu_s = model.quant_weight(W.gu, mode)
            ctx.log(f"FP8: {mode or 'unavailable'} ({detail})")
        else:
            ctx.fp8_detail = "no FP8 variant requested"
        result["fp8"] = {"mode": ctx.fp8_mode, "detail": ctx.fp8_detail}
        sizes = [opts.prompt_tokens, 1] + list(plan.decode_batches) + list(plan.prefill_tokens)
        result["comm"] = {"name": comm_name, "workspace_bytes": comm.workspace_bytes,
                          "max_tokens": plan.max_tokens, "plans": _plans(ctx, sizes),
                          "library": arfusion.library_path}

        # ---- gates, then timing
        t0 = time.time()
        g, records, passes = gates.run_gates(ctx)
        result["seconds"]["gates"] = round(time.time() - t0, 1)
        result["gates"] = g.to_json()
        result["pass_stats"]["gates"] = passes
        ctx.log(f"gates {'PASSED' if g.passed else 'FAILED'} "
                f"({sum(x['ok'] for x in g.demanded)}/{len(g.demanded)}) in "
                f"{result['seconds']['gates']} s")
        del records
        if plan.timing_skipped is None:
            if not g.passed and not opts.time_anyway:
                result["timing"]["skipped"] = ("a demanded gate failed: no timing (--time-anyway "
                                               "times anyway)")
            else:
                skip = {n: f"its gate run failed: {s.get('detail', '')[:300]}"
                        for n, s in g.reported.get("variants", {}).items()
                        if s.get("status") == "error"}
                t0 = time.time()
                t = timing.run_timing(ctx, skip)
                result["seconds"]["timing"] = round(time.time() - t0, 1)
                result["timing"]["rows"] = t["rows"]
                result["timing"]["skipped_variants"] = t["skipped_variants"]
                result["timing"]["deltas"] = report.compute_deltas(t["rows"], dims.layers)
                result["pass_stats"]["timing"] = t["pass_stats"]
        if not g.passed:
            result["status"] = "failed"
    except Exception as e:  # noqa: BLE001 - reported by the driver
        result["status"] = "crashed"
        result["errors"].append(f"rank {rank}: {type(e).__name__}: {e}\n{traceback.format_exc()}")
        print(f"[tp{world} rank {rank}] CRASHED: {type(e).__name__}: {e}", flush=True)
    result["seconds"]["total"] = round(time.time() - t_start, 1)
    path = os.path.join(out_dir, f"rank{rank}.json")
    try:
        import report as _report

        with open(path, "w") as f:
            json.dump(_report.sanitize(result), f)
    except Exception as e:  # noqa: BLE001
        print(f"[tp{world} rank {rank}] cannot write {path}: {e}", flush=True)
    # arfCommDestroy is collective: only when no rank crashed (a dead peer would keep it waiting)
    destroy = False
    if dist is not None and dist.is_initialized():
        try:
            out = [None] * world
            dist.all_gather_object(out, result["status"], group=cpu_group)
            destroy = all(s != "crashed" for s in out)
        except Exception:  # noqa: BLE001
            destroy = False
    if destroy and comm is not None:
        try:
            comm.destroy()
        except Exception:  # noqa: BLE001
            pass
    if dist is not None:
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass
