"""CUDA-graph step times (torch side). Runs after the gates, on every rank in lockstep.

Per (variant, shape): the step (embedding + L layers + final norm; the LM head is left out — it is
the same in every variant) runs twice eagerly on a side stream (compiling the compiled variants),
is captured once with torch.cuda.graph (capture_error_mode="thread_local": NCCL's watchdog thread
keeps running), replayed once and compared bitwise with the eager output (demanded for the
variants whose all-reduces are arfusion's; reported for NCCL's), replayed --warmup times untimed,
then --replays times back to back with a CUDA event between replays. Every rank's per-replay
times go to rank 0 (report.timing_row: max over ranks per replay, then percentiles).

Decode: B sequences, one new token each, all at position context-1, attending over the whole
static KV cache (context entries). Prefill: one sequence of T tokens at positions 0..T-1 (causal),
writing its KV cache. KV cache: one shared by all layers (default; the memory of one layer — every
layer reads and writes the same buffer, the cost per layer is a real layer's) or one per layer.
"""

from __future__ import annotations

import gc
import time
import traceback

import torch

import config
import model
import report
from gates import bits_equal


def _inputs(ctx, phase: str, size: int, kv_mode: str):
    dims, dev, opts = ctx.dims, ctx.device, ctx.opts
    nkv, D, L = dims.kv_heads // ctx.world, dims.head_dim, dims.layers
    gen = torch.Generator().manual_seed(opts.seed * 7 + size)
    if phase == "decode":
        C = opts.context
        ids = torch.randint(0, dims.vocab, (size,), generator=gen).to(dev)
        positions = torch.tensor([C - 1], device=dev)
        cos, sin = ctx.cos_tab.index_select(0, positions), ctx.sin_tab.index_select(0, positions)
        mask = (ctx.ctx_arange <= positions).view(1, 1, 1, C)
        shape = (size, nkv, C, D)
    else:
        ids = torch.randint(0, dims.vocab, (size,), generator=gen).to(dev)
        positions = torch.arange(size, device=dev)
        cos, sin, mask = ctx.cos_tab[:size], ctx.sin_tab[:size], None
        shape = (1, nkv, size, D)

    def pair():
        return (torch.zeros(shape, dtype=torch.bfloat16, device=dev),
                torch.zeros(shape, dtype=torch.bfloat16, device=dev))

    if kv_mode == "per-layer":
        caches = [pair() for _ in range(L)]
    else:
        caches = [pair()] * L
    return ids, positions, caches, cos, sin, mask


def measure(ctx, runner, phase: str, size: int, replays: int, warmup: int):
    """(per-replay microseconds on this rank, replay output == eager output)."""
    ids, positions, caches, cos, sin, mask = _inputs(ctx, phase, size, ctx.opts.kv_cache)

    def step():
        return runner.forward(ids, positions, caches, cos, sin, mask)

    with torch.no_grad():
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(2):
                out = step()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        ctx.comm.check()
        eager = out.clone()
        del out
        ctx.barrier()
        graph = torch.cuda.CUDAGraph()
        gc.collect()
        gc.disable()
        try:
            with torch.cuda.graph(graph, capture_error_mode="thread_local"):
                static_out = step()
        finally:
            gc.enable()
        torch.cuda.synchronize()
        ctx.barrier()
        graph.replay()
        torch.cuda.synchronize()
        ctx.comm.check()
        matches = bits_equal(static_out, eager)
        for _ in range(warmup):
            graph.replay()
        torch.cuda.synchronize()
        ctx.barrier()
        events = [torch.cuda.Event(enable_timing=True) for _ in range(replays + 1)]
        events[0].record()
        for i in range(replays):
            graph.replay()
            events[i + 1].record()
        torch.cuda.synchronize()
        ctx.comm.check()
        times = [events[i].elapsed_time(events[i + 1]) * 1000.0 for i in range(replays)]
    del graph, static_out, eager, caches
    gc.collect()
    torch.cuda.empty_cache()
    return times, matches


def run_timing(ctx, skip_variants: dict) -> dict:
    """Every timed variant of the plan at every shape. skip_variants: name -> reason (e.g. its
    gates errored). Returns the run's "timing" object (rows only complete on rank 0)."""
    plan, opts = ctx.plan, ctx.opts
    rows, skipped, pass_stats = [], {}, {}
    for name in plan.timed_variants:
        v = config.variant(name)
        if name in skip_variants:
            skipped[name] = skip_variants[name]
            continue
        if v.fp8 and ctx.fp8_mode is None:
            skipped[name] = f"no FP8 GEMM: {ctx.fp8_detail}"
            continue
        arfusion_carried = v.ar != "c10d" or v.fusion_pass
        for phase, sizes, n in (("decode", plan.decode_batches, opts.replays),
                                ("prefill", plan.prefill_tokens, opts.prefill_replays)):
            if not sizes:
                continue
            torch._dynamo.reset()
            runner = model.Runner(variant=v, phase=phase, weights=ctx.W, dims=ctx.dims,
                                  tp=ctx.world, rank=ctx.rank, comm_name=ctx.comm_name,
                                  ar_mode=model.ar_mode_of(v, ctx.nccl), fp8_mode=ctx.fp8_mode,
                                  layers=ctx.dims.layers)
            for size in sizes:
                t0 = time.time()
                ctx.log(f"timing: {name} {phase} {size}")
                err, times, matches = "", [], None
                try:
                    times, matches = measure(ctx, runner, phase, size, n, opts.warmup)
                    if runner.passes:
                        ok, detail = model.pass_check(runner)
                        if not ok:
                            err = f"pass: {detail}"
                except Exception as e:  # noqa: BLE001
                    err = f"{type(e).__name__}: {str(e)[:1500]}\n{traceback.format_exc(limit=5)}"
                got = ctx.gather((err, times, matches))
                errors = [f"rank {r}: {e}" for r, (e, _, _) in enumerate(got) if e]
                if ctx.rank == 0:
                    if errors:
                        row = report.timing_row(name, phase, size, None, error="; ".join(errors))
                    else:
                        all_match = all(m for _, _, m in got)
                        row = report.timing_row(name, phase, size, [t for _, t, _ in got],
                                                replay_matches_eager=all_match)
                    row["replay_check"] = "demanded" if arfusion_carried else "reported"
                    row["seconds"] = round(time.time() - t0, 1)
                    rows.append(row)
                if errors:
                    ctx.log(f"timing: {name} {phase} {size} failed: {errors[0][:300]}")
            if runner.passes:
                pass_stats.setdefault(name, {})[phase] = model.pass_summaries(runner)
            del runner
    torch._dynamo.reset()
    return {"rows": rows, "skipped_variants": skipped, "pass_stats": pass_stats}
