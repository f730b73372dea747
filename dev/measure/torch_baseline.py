#!/usr/bin/env python3
"""torch.compile baseline for arfusion's world-1 epilogue (`arfusion-bench --op epilogue`).

Times the same function arfusion's epilogue computes, with the bf16 rounding of the unfused
contract (docs/architecture.md, "Numerics"):

    residual_out = bf16(fp32(x) + fp32(residual))
    norm_out     = bf16(fp32(residual_out) * rsqrt(mean(fp32(residual_out)^2) + eps) * fp32(gamma))

compiled by torch.compile (mode printed in the header; default max-autotune-no-cudagraphs, the
strongest mode that leaves graph capture to us), hidden 8192 bf16 unless --hidden / --dtype say
otherwise (the activation dtype stands for bf16 above), tokens 1..16384 by powers of two. Timing: `iters` calls captured in one torch.cuda.CUDAGraph, replayed `replays` times per
repeat; the reported time is the median over repeats of elapsed / (iters * replays). Inputs rotate
among `sets` buffer sets as in arfusion-bench, so timed calls do not re-read the last call's input
out of L2. Also measures the device-to-device copy bandwidth the same way arfusion-bench does
(median of 5 copies of 1 GiB, read + write bytes counted).
"""
import argparse
import datetime
import json
import os
import statistics
import sys

try:
    import torch
except ImportError:
    sys.exit("torch_baseline: PyTorch is not installed")

COPY_BYTES = 1 << 30
DTYPES = {"bf16": "bfloat16", "fp16": "float16"}  # arfusion-bench's -d names -> torch's


def epilogue(x, residual, gamma, eps: float):
    """The unfused contract: round the sum to the activation dtype, then norm from that value."""
    residual_out = (x.float() + residual.float()).to(x.dtype)
    r = residual_out.float()
    inv_rms = torch.rsqrt(r.pow(2).mean(dim=-1, keepdim=True) + eps)
    norm_out = (r * inv_rms * gamma.float()).to(x.dtype)
    return residual_out, norm_out


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--hidden", type=int, default=8192)
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bf16", help="activation dtype")
    p.add_argument("--tmin", type=int, default=1)
    p.add_argument("--tmax", type=int, default=16384)
    p.add_argument("--mode", default="max-autotune-no-cudagraphs",
                   help="torch.compile mode (default, max-autotune-no-cudagraphs, ...)")
    p.add_argument("-n", "--iters", type=int, default=100, help="calls captured per graph")
    p.add_argument("-G", "--replays", type=int, default=10, help="graph replays per repeat")
    p.add_argument("--repeats", type=int, default=5, help="timed repeats; the median is reported")
    p.add_argument("--sets", type=int, default=4, help="input buffer sets to rotate among")
    p.add_argument("--eps", type=float, default=1e-6)
    p.add_argument("--json", help="write the rows and a header object here")
    return p.parse_args()


def copy_bandwidth_gbps():
    src = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    src.zero_()
    dst.copy_(src)  # untimed: first touch
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(5):
        start.record()
        dst.copy_(src)
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop))
    del src, dst
    return 2 * COPY_BYTES / (statistics.median(times) * 1e-3) / 1e9


def make_inputs(tokens, hidden, sets, gen, dtype):
    def randn(*shape):
        return torch.randn(*shape, generator=gen, device="cuda").to(dtype)
    xs = [randn(tokens, hidden) for _ in range(sets)]
    residuals = [randn(tokens, hidden) for _ in range(sets)]
    return xs, residuals, randn(hidden)


def check_compiled(fn, x, residual, gamma, eps):
    """The compiled function must compute the contract: residual_out bitwise, norm close."""
    got_res, got_norm = fn(x, residual, gamma, eps)
    want_res, want_norm = epilogue(x, residual, gamma, eps)
    residual_equal = torch.equal(got_res, want_res)
    norm_diff = (got_norm.float() - want_norm.float()).abs().max().item()
    return residual_equal, norm_diff


def time_graph(fn, call_sets, args):
    """Median over repeats of elapsed / calls, in microseconds, for `iters` calls per graph; call i
    gets the arguments call_sets[i % len(call_sets)] (rotating inputs, as arfusion-bench does)."""
    for i in range(3):  # compile and autotune outside the capture
        fn(*call_sets[i % len(call_sets)])
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for i in range(args.iters):
            fn(*call_sets[i % len(call_sets)])
    graph.replay()  # untimed: uploads the graph
    torch.cuda.synchronize()
    start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    samples = []
    for _ in range(args.repeats):
        start.record()
        for _ in range(args.replays):
            graph.replay()
        stop.record()
        stop.synchronize()
        samples.append(1e3 * start.elapsed_time(stop) / (args.iters * args.replays))
    del graph
    return statistics.median(samples), samples


def token_sweep(tmin, tmax):
    t, out = tmin, []
    while t <= tmax:
        out.append(t)
        t *= 2
    return out


def raise_recompile_limit(shapes):
    """Each token count is a new static shape: without this, dynamo falls back to eager after 8."""
    for name in ("recompile_limit", "cache_size_limit"):
        if hasattr(torch._dynamo.config, name):
            setattr(torch._dynamo.config, name, max(64, 2 * shapes))


def main():
    args = parse_args()
    if not torch.cuda.is_available():
        sys.exit("torch_baseline: no CUDA device visible")
    tokens_list = token_sweep(args.tmin, args.tmax)
    raise_recompile_limit(len(tokens_list))
    prop = torch.cuda.get_device_properties(0)
    copy_gbps = copy_bandwidth_gbps()
    fn = torch.compile(epilogue, mode=args.mode, dynamic=False)
    dtype = getattr(torch, DTYPES[args.dtype])
    header = {
        "tool": "torch_baseline.py", "date": datetime.datetime.now().astimezone().isoformat(),
        "device": prop.name, "sm_count": prop.multi_processor_count,
        "torch_version": torch.__version__, "compile_mode": args.mode, "dynamic": False,
        "hidden": args.hidden, "dtype": args.dtype, "eps": args.eps, "iters": args.iters,
        "graph_replays": args.replays, "repeats": args.repeats, "input_sets": args.sets,
        "copy_bandwidth_gbps": copy_gbps, "copy_bytes": COPY_BYTES,
        "time_definition": "median over repeats of elapsed / (iters * replays), microseconds",
        "git_commit": os.environ.get("ARF_GIT_COMMIT") or None, "command_line": " ".join(sys.argv),
    }
    print(f"# torch_baseline: torch {torch.__version__}, torch.compile mode={args.mode}, "
          f"dynamic=False, device {prop.name} ({prop.multi_processor_count} SMs)")
    print(f"# hidden {args.hidden} {args.dtype}, CUDA graph of {args.iters} calls x {args.replays} replays, "
          f"median of {args.repeats} repeats, {args.sets} input sets")
    print(f"# D2D copy bandwidth: {copy_gbps:.1f} GB/s (copy of 1.00 GiB, read + write counted, "
          f"median of 5)")
    print(f"#{'tokens':>8} {'time(us)':>10} {'GB/s':>9} {'%copy':>7} {'res_bitwise':>12} "
          f"{'norm_maxdiff':>13}")
    rows = []
    gen = torch.Generator(device="cuda").manual_seed(1234)
    for tokens in tokens_list:
        xs, residuals, gamma = make_inputs(tokens, args.hidden, args.sets, gen, dtype)
        residual_equal, norm_diff = check_compiled(fn, xs[0], residuals[0], gamma, args.eps)
        call_sets = [(x, r, gamma, args.eps) for x, r in zip(xs, residuals)]
        us, samples = time_graph(fn, call_sets, args)
        moved = (4 * tokens * args.hidden + args.hidden) * 2
        gbps = moved / us / 1e3
        rows.append({"tokens": tokens, "hidden": args.hidden, "time_us": us,
                     "repeats_us": samples, "bytes_moved": moved, "achieved_gbps": gbps,
                     "pct_copy_bandwidth": 100 * gbps / copy_gbps,
                     "residual_out_bitwise_equal_eager": residual_equal,
                     "norm_out_max_abs_diff_eager": norm_diff})
        print(f"{tokens:>9} {us:>10.2f} {gbps:>9.1f} {100 * gbps / copy_gbps:>7.1f} "
              f"{str(residual_equal):>12} {norm_diff:>13.3g}", flush=True)
        del xs, residuals, gamma
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"header": header, "rows": rows}, f, indent=2)
            f.write("\n")


if __name__ == "__main__":
    main()
