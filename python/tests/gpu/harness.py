"""Multi-process harness of the GPU tests: N rank processes (torch.multiprocessing, spawn) on the
visible GPUs (rank r on device r % count; one GPU: all ranks share it, time-sliced), a gloo
process group for bootstrap and result exchange, one arfusion Communicator per rank.

A scenario is a module-level function f(ctx) run on every rank; it calls ctx.check(name, fn) for
each check, which runs fn() and records pass/fail (with the exception text) for that rank. The
parent gathers every rank's records: a check passes when it passed on every rank. A rank that
exits or a run that outlives its deadline fails the scenario (never hangs the suite).
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import time
import traceback



class RankContext:
    def __init__(self, rank, world, out_path, device):
        self.rank = rank
        self.world = world
        self.device = device
        self.out_path = out_path
        self.records = []

    def log(self, msg):
        print(f"[rank {self.rank}/{self.world}] {msg}", flush=True)

    def barrier(self):
        import torch.distributed as dist

        dist.barrier()

    def gather(self, obj):
        import torch.distributed as dist

        out = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def check(self, name, fn):
        t0 = time.time()
        try:
            detail = fn()
            ok, text = True, "" if detail is None else str(detail)
        except Exception as e:  # noqa: BLE001 - recorded, reported by the parent
            ok, text = False, f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=6)}"
        self.records.append({"name": name, "ok": ok, "detail": text,
                             "seconds": round(time.time() - t0, 3)})
        self.flush()
        if not ok:
            self.log(f"FAIL {name}: {text.splitlines()[0] if text else ''}")
        return ok

    def skip(self, name, why):
        self.records.append({"name": name, "ok": None, "detail": why, "seconds": 0.0})
        self.flush()

    def flush(self):
        with open(self.out_path, "w") as f:
            json.dump(self.records, f)


def _rank_main(rank, world, port, scenario_module, scenario_name, out_dir, env):
    os.environ.update(env)
    import importlib

    import torch
    import torch.distributed as dist

    ndev = torch.cuda.device_count()
    device = torch.device("cuda", rank % ndev)
    torch.cuda.set_device(device)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    ctx = RankContext(rank, world, os.path.join(out_dir, f"rank{rank}.json"), device)
    try:
        mod = importlib.import_module(scenario_module)
        getattr(mod, scenario_name)(ctx)
    except Exception as e:  # noqa: BLE001
        ctx.records.append({"name": "<scenario>", "ok": False,
                            "detail": f"{type(e).__name__}: {e}\n{traceback.format_exc()}",
                            "seconds": 0.0})
        ctx.flush()
    finally:
        ctx.flush()
        try:
            dist.destroy_process_group()
        except Exception:  # noqa: BLE001
            pass


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_scenario(scenario_module, scenario_name, world, deadline_s, env=None):
    """Runs the scenario on `world` ranks; returns (records by check name, problems)."""
    import torch.multiprocessing as mp

    out_dir = tempfile.mkdtemp(prefix=f"arf_{scenario_name}_{world}_")
    env = dict(env or {})
    # the ranks import arfusion from where this process does (the installed package on PYTHONPATH)
    env.setdefault("PYTHONPATH", os.environ.get("PYTHONPATH", ""))
    ctx = mp.start_processes(_rank_main, args=(world, _free_port(), scenario_module, scenario_name,
                                               out_dir, env),
                             nprocs=world, join=False, start_method="spawn")
    problems = []
    t_end = time.time() + deadline_s
    while True:
        try:
            if ctx.join(timeout=1.0):
                break
        except Exception as e:  # noqa: BLE001 - a rank died
            problems.append(f"a rank process failed: {type(e).__name__}: {e}"[:2000])
            break
        if time.time() > t_end:
            problems.append(f"deadline of {deadline_s} s exceeded: rank processes killed")
            break
    for p in ctx.processes:
        if p.is_alive():
            p.kill()
    for p in ctx.processes:
        p.join(timeout=10)
    per_rank = []
    for r in range(world):
        path = os.path.join(out_dir, f"rank{r}.json")
        try:
            with open(path) as f:
                per_rank.append(json.load(f))
        except (OSError, ValueError):
            per_rank.append([])
            problems.append(f"rank {r} left no results")
    merged = {}
    order = []
    for r, recs in enumerate(per_rank):
        for rec in recs:
            name = rec["name"]
            if name not in merged:
                merged[name] = {"ok": True, "skipped": None, "details": [], "seconds": 0.0}
                order.append(name)
            m = merged[name]
            m["seconds"] = max(m["seconds"], rec["seconds"])
            if rec["ok"] is None:
                m["skipped"] = rec["detail"]
            elif not rec["ok"]:
                m["ok"] = False
                m["details"].append(f"rank {r}: {rec['detail']}")
    for name in order:
        seen = sum(1 for recs in per_rank if any(rec["name"] == name for rec in recs))
        if seen != world and merged[name]["skipped"] is None:
            merged[name]["ok"] = False
            merged[name]["details"].append(f"ran on {seen} of {world} ranks")
    return [(n, merged[n]) for n in order], problems
