#!/usr/bin/env python3
"""Host overhead of one eager arfusion call from Python (GPU machine).

One process, a world-1 communicator (the kernel is the epilogue alone, a few microseconds), so the
host side dominates. Measured per call, median of --repeats batches of --calls calls each (host
time of the launches only; the GPU drains between batches and the launch queue never fills):

  ctypes_raw      arfFusedAllReduce through ctypes with a prepared arfFusedArgs_t (pointer
                  fields set per call): the floor of any Python binding
  ctypes_noop     the same call with num_tokens 0 (the library returns before launching): the
                  ctypes call itself plus the library's validation
  op_inplace      torch.ops.arfusion.fused_add_rms_norm (no allocation)
  op_out          torch.ops.arfusion.fused_add_rms_norm_out (allocates two outputs)
  comm_method     Communicator.fused_add_rms_norm_out (wrapper + op)
  torch_add_norm  for scale: x + r then F.rms_norm in eager torch (two-three kernels)
  aten_two_outputs  for scale: torch.ops.aten._fused_rms_norm (one kernel, two new tensors: what
                  any out-of-place op returning two outputs costs through the dispatcher)
The cases run round-robin (repeat i runs every case once), and the differences that matter
(op - ctypes call, out-of-place - in-place, ...) are taken per repeat: their median and p10/p90
are printed and kept under "paired_differences_us", robust to the host's drift between repeats.
plus gpu_us (CUDA-event time per fused call over a batch) and graph_replay_us (one CUDA graph of
--calls fused calls, per call).

    python3 dev/python/bench_op_overhead.py out.json [--tokens 1] [--hidden 4096]

with the package installed into the interpreter (or PYTHONPATH naming where
python/tests/install_package.sh put it).
"""

import argparse
import ctypes
import json
import os
import statistics
import sys
import tempfile
import time


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("json_out")
    ap.add_argument("--tokens", type=int, default=1)
    ap.add_argument("--hidden", type=int, default=4096)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--repeats", type=int, default=30)
    args = ap.parse_args()

    import torch
    import torch.distributed as dist
    import torch.nn.functional as F

    import arfusion
    import arfusion.torch as aft
    from arfusion import _lib

    if not torch.cuda.is_available():
        print("SKIPPED: no CUDA device visible")
        return 77
    torch.cuda.set_device(0)
    store = tempfile.mktemp(prefix="arf_bench_store_")
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=0, world_size=1)
    comm = aft.Communicator.from_group(max_tokens=max(64, args.tokens), max_hidden=args.hidden,
                                       dtype=torch.bfloat16, name="bench")
    t, h, dev = args.tokens, args.hidden, torch.device("cuda", 0)
    x = torch.randn(t, h, dtype=torch.bfloat16, device=dev)
    r = torch.randn(t, h, dtype=torch.bfloat16, device=dev)
    w = torch.ones(h, dtype=torch.bfloat16, device=dev)
    norm = torch.empty_like(x)
    res = torch.empty_like(x)
    c = _lib.library().lib
    handle = comm._handle
    cargs = comm.shape_args(arfusion.Pattern.ResidualRmsNorm, h, t)
    stream = torch.cuda.current_stream().cuda_stream
    ptrs = (x.data_ptr(), r.data_ptr(), res.data_ptr(), norm.data_ptr(), w.data_ptr())

    def ctypes_raw():
        cargs.num_tokens = t
        cargs.input, cargs.residual_in, cargs.residual_out, cargs.norm_out, cargs.gamma = ptrs
        st = c.arfFusedAllReduce(handle, ctypes.byref(cargs), stream)
        if st:
            raise RuntimeError(arfusion.status_name(st))

    noop_args = comm.shape_args(arfusion.Pattern.ResidualRmsNorm, h, 0)

    def ctypes_noop():
        noop_args.input, noop_args.residual_in, noop_args.residual_out, noop_args.norm_out, \
            noop_args.gamma = ptrs
        st = c.arfFusedAllReduce(handle, ctypes.byref(noop_args), stream)
        if st:
            raise RuntimeError(arfusion.status_name(st))

    op_inplace = torch.ops.arfusion.fused_add_rms_norm
    op_out = torch.ops.arfusion.fused_add_rms_norm_out
    xi, ri = x.clone(), r.clone()

    cases = {
        "ctypes_raw": ctypes_raw,
        "ctypes_noop": ctypes_noop,
        "op_inplace": lambda: op_inplace(xi, ri, w, 1e-6, "bench"),
        "op_out": lambda: op_out(x, r, w, 1e-6, "bench"),
        "comm_method": lambda: comm.fused_add_rms_norm_out(x, r, w, 1e-6),
        "torch_add_norm": lambda: F.rms_norm(x + r, (h,), w, 1e-6),
    }
    fused_norm = getattr(torch.ops.aten, "_fused_rms_norm", None)
    try:
        if fused_norm is not None and len(fused_norm(x, [h], w, 1e-6)) == 2:
            cases["aten_two_outputs"] = lambda: fused_norm(x, [h], w, 1e-6)
    except (RuntimeError, TypeError) as e:  # another signature in this torch: no such baseline
        print(f"aten._fused_rms_norm unusable here ({e}); no aten_two_outputs case", flush=True)
    results = {}
    per_call = {name: [] for name in cases}
    with torch.no_grad():
        for fn in cases.values():
            for _ in range(20):
                fn()
        torch.cuda.synchronize()
        # Round-robin: repeat i times every case once, so that the host's drift (clock, other
        # tenants) falls on all of them alike and differences can be taken per repeat.
        for _ in range(args.repeats):
            for name, fn in cases.items():
                t0 = time.perf_counter()
                for _ in range(args.calls):
                    fn()
                t1 = time.perf_counter()
                torch.cuda.synchronize()
                per_call[name].append((t1 - t0) / args.calls * 1e6)
        for name, times in per_call.items():
            results[name] = {"median_us": statistics.median(times), "min_us": min(times)}
            print(f"{name:16s} {results[name]['median_us']:8.2f} us/call (min {results[name]['min_us']:.2f})",
                  flush=True)

        def paired(a, b):
            d = sorted(x - y for x, y in zip(per_call[a], per_call[b]))
            return {"median_us": statistics.median(d), "p10_us": d[len(d) // 10],
                    "p90_us": d[(9 * len(d)) // 10]}

        pairs = {"op_inplace - ctypes_raw": paired("op_inplace", "ctypes_raw"),
                 "op_out - ctypes_raw": paired("op_out", "ctypes_raw"),
                 "op_out - op_inplace": paired("op_out", "op_inplace"),
                 "ctypes_raw - ctypes_noop": paired("ctypes_raw", "ctypes_noop")}
        if "aten_two_outputs" in cases:
            pairs["op_out - aten_two_outputs"] = paired("op_out", "aten_two_outputs")
        for k, v in pairs.items():
            print(f"{k:28s} {v['median_us']:+7.2f} us (p10 {v['p10_us']:+.2f}, p90 {v['p90_us']:+.2f})",
                  flush=True)

        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.calls):
            ctypes_raw()
        end.record()
        end.synchronize()
        gpu_us = start.elapsed_time(end) * 1000 / args.calls

        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            op_out(x, r, w, 1e-6, "bench")
        torch.cuda.current_stream().wait_stream(s)
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for _ in range(args.calls):
                op_out(x, r, w, 1e-6, "bench")
        g.replay()
        torch.cuda.synchronize()
        start.record()
        for _ in range(10):
            g.replay()
        end.record()
        end.synchronize()
        graph_us = start.elapsed_time(end) * 1000 / (10 * args.calls)
    comm.check()
    print(f"gpu_us {gpu_us:.2f}, graph_replay_us {graph_us:.2f}", flush=True)
    out = {
        "torch": torch.__version__, "cuda": torch.version.cuda,
        "device": torch.cuda.get_device_name(0), "library": arfusion.library_path,
        "tokens": t, "hidden": h, "calls_per_batch": args.calls, "repeats": args.repeats,
        "plan": str(comm.plan(t, h)), "host_us_per_call": results, "gpu_us": gpu_us,
        "graph_replay_us": graph_us, "op_library": aft.ops.library_path(),
        "python_overhead_us": {k: results[k]["median_us"] - results["ctypes_raw"]["median_us"]
                               for k in ("op_inplace", "op_out", "comm_method")},
        "paired_differences_us": pairs, "interleaved": True,
    }
    with open(args.json_out, "w") as f:
        json.dump(out, f, indent=1)
    print(f"wrote {args.json_out}")
    comm.destroy()
    dist.destroy_process_group()
    os.unlink(store) if os.path.exists(store) else None
    return 0


if __name__ == "__main__":
    sys.exit(main())
