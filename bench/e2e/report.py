"""Results of the end-to-end benchmark: timing aggregation, per-layer differences, the JSON
document (keys in bench/e2e/README.md, checked by `validate_document`), the text table and the plot.

Pure Python (matplotlib only for the plot, imported when plotting); tested on the CPU.

Time definition: every rank records a CUDA event between consecutive replays of the captured step
graph (back to back on its stream); replay i's time on a rank is the event interval around it.
The step time of replay i is the MAXIMUM over ranks of those intervals; p50 / p90 / mean / min /
max are over the replays (percentiles with linear interpolation, numerics.percentile).
"""

from __future__ import annotations

import json
import math

from config import sharing_words
from numerics import percentile

SCHEMA_VERSION = 1
TOOL = "bench/e2e/tp_decoder.py"
TIME_DEFINITION = ("per replay: max over ranks of the CUDA-event interval around that replay of the "
                   "captured step graph (replays back to back); p50/p90/mean/min/max over replays; "
                   "microseconds")

# (variant, baseline): fused - unfused, the pairs the table and the JSON report per layer.
DELTA_PAIRS = [("b", "a"), ("c", "a"), ("c", "b"), ("c", "c@unfused"), ("d", "d0"), ("d", "a"),
               ("e_c", "e_a"), ("e_d", "e_d0"), ("e_d", "e_a")]


def aggregate_replays(per_rank_us: list[list[float]]) -> dict:
    """Step time statistics from every rank's per-replay times (same replay count on every rank)."""
    if not per_rank_us or not per_rank_us[0]:
        raise ValueError("no replay times")
    n = len(per_rank_us[0])
    for r, times in enumerate(per_rank_us):
        if len(times) != n:
            raise ValueError(f"rank {r} has {len(times)} replay times, rank 0 has {n}")
        for t in times:
            if not (isinstance(t, (int, float)) and math.isfinite(t) and t >= 0):
                raise ValueError(f"rank {r}: replay time {t!r} is not a finite non-negative number")
    steps = [max(times[i] for times in per_rank_us) for i in range(n)]
    return {
        "replays": n,
        "p50_us": percentile(steps, 50),
        "p90_us": percentile(steps, 90),
        "mean_us": sum(steps) / n,
        "min_us": min(steps),
        "max_us": max(steps),
        "per_rank_p50_us": [percentile(t, 50) for t in per_rank_us],
    }


def timing_row(variant: str, phase: str, size: int, per_rank_us, *, replay_matches_eager=None,
               error: str | None = None) -> dict:
    """One (variant, shape) cell. phase 'decode': size = batch (one token per sequence);
    'prefill': size = tokens of one sequence. tokens_per_s from the p50 step time."""
    if phase not in ("decode", "prefill"):
        raise ValueError(f"phase {phase!r}")
    row = {"variant": variant, "phase": phase, "batch": size if phase == "decode" else 1,
           "tokens": size, "replay_matches_eager": replay_matches_eager, "error": error}
    if error is None:
        row.update(aggregate_replays(per_rank_us))
        row["tokens_per_s"] = size / (row["p50_us"] * 1e-6) if row["p50_us"] > 0 else None
    else:
        row.update({"replays": 0, "p50_us": None, "p90_us": None, "mean_us": None, "min_us": None,
                    "max_us": None, "per_rank_p50_us": None, "tokens_per_s": None})
    return row


def compute_deltas(rows: list[dict], layers: int, pairs=DELTA_PAIRS) -> list[dict]:
    """p50(variant) - p50(baseline) per step and per layer, for every shape both were timed at."""
    cell = {(r["variant"], r["phase"], r["tokens"]): r for r in rows if r.get("p50_us") is not None}
    out = []
    for v, base in pairs:
        for (name, phase, size), r in sorted(cell.items(), key=lambda kv: (kv[0][1], kv[0][2])):
            if name != v:
                continue
            b = cell.get((base, phase, size))
            if b is None:
                continue
            d = r["p50_us"] - b["p50_us"]
            out.append({"variant": v, "baseline": base, "phase": phase, "size": size,
                        "delta_step_us": d, "delta_per_layer_us": d / layers,
                        "relative": d / b["p50_us"] if b["p50_us"] else None})
    return out


# ---- the document ----------------------------------------------------------------------------------

REQUIRED_TOP = {"tool": str, "schema_version": int, "date": str, "command_line": list,
                "options": dict, "environment": dict, "model": dict, "variants": dict,
                "time_definition": str, "runs": list, "verdict": dict}
REQUIRED_RUN = {"tp": int, "plan": dict, "status": str, "errors": list, "fp8": dict, "comm": dict,
                "gates": dict, "timing": dict, "pass_stats": dict}
REQUIRED_ROW = {"variant": str, "phase": str, "batch": int, "tokens": int, "replays": int}
RUN_STATUSES = ("ok", "failed", "crashed")


def make_document(*, date: str, git_commit, command_line, options: dict, environment: dict,
                  model: dict, variants: dict, runs: list[dict]) -> dict:
    doc = {"tool": TOOL, "schema_version": SCHEMA_VERSION, "date": date, "git_commit": git_commit,
           "command_line": list(command_line), "options": options, "environment": environment,
           "model": model, "variants": variants, "time_definition": TIME_DEFINITION,
           "runs": runs}
    doc["verdict"] = verdict(doc)
    return doc


def verdict(doc: dict) -> dict:
    failures = []
    for run in doc.get("runs", []):
        tp = run.get("tp")
        if run.get("status") != "ok":
            failures.append(f"TP {tp}: run {run.get('status')}: "
                            + ("; ".join(run.get("errors", [])) or "a demanded gate failed (below)"))
        for g in run.get("gates", {}).get("demanded", []):
            if not g.get("ok"):
                failures.append(f"TP {tp}: gate {g.get('name')}: {g.get('detail', '')}")
        for r in run.get("timing", {}).get("rows", []):
            if r.get("error"):
                failures.append(f"TP {tp}: timing {r['variant']} {r['phase']} {r['tokens']}: "
                                f"{r['error']}")
            elif r.get("replay_matches_eager") is False and r.get("replay_check") == "demanded":
                failures.append(f"TP {tp}: {r['variant']} {r['phase']} {r['tokens']}: the CUDA-graph "
                                "replay's output differs from the eager run's (bitwise)")
    if not doc.get("runs"):
        failures.append("no run")
    return {"passed": not failures, "failures": failures}


def validate_document(doc: dict) -> list[str]:
    """Problems with the document's shape (empty: it is what README.md documents)."""
    problems = []

    def need(obj, spec, where):
        if not isinstance(obj, dict):
            problems.append(f"{where}: not an object")
            return
        for key, kind in spec.items():
            if key not in obj:
                problems.append(f"{where}: missing {key!r}")
            elif not isinstance(obj[key], kind) or (kind is int and isinstance(obj[key], bool)):
                problems.append(f"{where}.{key}: {type(obj[key]).__name__}, expected {kind.__name__}")

    need(doc, REQUIRED_TOP, "document")
    if problems:
        return problems
    if doc["schema_version"] != SCHEMA_VERSION:
        problems.append(f"schema_version {doc['schema_version']} != {SCHEMA_VERSION}")
    for i, run in enumerate(doc["runs"]):
        where = f"runs[{i}]"
        need(run, REQUIRED_RUN, where)
        if not isinstance(run, dict):
            continue
        if run.get("status") not in RUN_STATUSES:
            problems.append(f"{where}.status {run.get('status')!r} not in {RUN_STATUSES}")
        for j, g in enumerate(run.get("gates", {}).get("demanded", [])):
            if not isinstance(g, dict) or not isinstance(g.get("name"), str) or not isinstance(g.get("ok"), bool):
                problems.append(f"{where}.gates.demanded[{j}]: needs name (str) and ok (bool)")
        timing = run.get("timing", {})
        for key in ("skipped", "rows", "deltas"):
            if key not in timing:
                problems.append(f"{where}.timing: missing {key!r}")
        for j, row in enumerate(timing.get("rows", [])):
            need(row, REQUIRED_ROW, f"{where}.timing.rows[{j}]")
            if isinstance(row, dict) and row.get("error") is None:
                for key in ("p50_us", "p90_us", "tokens_per_s"):
                    if not isinstance(row.get(key), (int, float)):
                        problems.append(f"{where}.timing.rows[{j}].{key}: not a number")
    v = doc["verdict"]
    if not isinstance(v.get("passed"), bool) or not isinstance(v.get("failures"), list):
        problems.append("verdict: needs passed (bool) and failures (list)")
    try:
        json.dumps(doc, allow_nan=False)
    except (TypeError, ValueError) as e:
        problems.append(f"not strict JSON: {e}")
    return problems


def sanitize(obj):
    """NaN/inf -> None (strict JSON), tuples -> lists, recursively."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {str(k): sanitize(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [sanitize(v) for v in obj]
    return obj


# ---- text ------------------------------------------------------------------------------------------


def _fmt_us(v) -> str:
    if v is None:
        return "-"
    return f"{v / 1000:.3f}" if v >= 10000 else f"{v:.1f}"


def _variant_label(run: dict, name: str) -> str:
    if name in ("a", "e_a") and run.get("plan", {}).get("baseline_allreduce") == "gloo_cpu_copy":
        return name + "'"
    return name


def _timing_table(run: dict, phase: str) -> list[str]:
    rows = [r for r in run["timing"]["rows"] if r["phase"] == phase]
    if not rows:
        return []
    variants = sorted({r["variant"] for r in rows}, key=_order)
    sizes = sorted({r["tokens"] for r in rows})
    cell = {(r["variant"], r["tokens"]): r for r in rows}
    unit_ms = any((r.get("p50_us") or 0) >= 10000 for r in rows)
    unit = "ms" if unit_ms else "us"
    head = "batch" if phase == "decode" else "tokens"
    lw = 11
    lines = [f"{phase} step time, p50 / p90 ({unit}; max over ranks; "
             f"{rows[0].get('replays') or '?'} replays), then tokens/s at p50:"]
    width = 19
    lines.append(f"{head:>{lw}} | " + " | ".join(f"{_variant_label(run, v):>{width}}" for v in variants))
    for s in sizes:
        cells = []
        for v in variants:
            r = cell.get((v, s))
            if r is None:
                cells.append(f"{'':>{width}}")
            elif r.get("error"):
                cells.append(f"{'error':>{width}}")
            else:
                f = (lambda x: f"{x / 1000:.3f}") if unit_ms else (lambda x: f"{x:.1f}")
                cells.append(f"{f(r['p50_us']) + ' / ' + f(r['p90_us']):>{width}}")
        lines.append(f"{s:>{lw}} | " + " | ".join(cells))
    for s in sizes:
        cells = []
        for v in variants:
            r = cell.get((v, s))
            tps = r.get("tokens_per_s") if r else None
            cells.append(f"{(f'{tps:,.0f}' if tps else ''):>{width}}")
        lines.append(f"{'tok/s ' + str(s):>{lw}} | " + " | ".join(cells))
    bad = [r for r in rows if r.get("replay_matches_eager") is False]
    for r in bad:
        what = "FAILURE" if r.get("replay_check") == "demanded" else "note (not promised)"
        lines.append(f"  {what}: {r['variant']} {phase} {r['tokens']}: graph replay output "
                     "differs from the eager run")
    return lines


def _order(name: str):
    import config

    if name in config.DEFAULT_ORDER:
        return (config.DEFAULT_ORDER.index(name), name)
    return (len(config.DEFAULT_ORDER), name)


def _delta_table(run: dict) -> list[str]:
    deltas = run["timing"]["deltas"]
    if not deltas:
        return []
    lines = ["fused - unfused, p50, per layer (us/layer; step difference / L):"]
    for d in deltas:
        rel = f" ({d['relative'] * 100:+.1f}% of the step)" if d.get("relative") is not None else ""
        lines.append(f"  {_variant_label(run, d['variant']):>6} - {_variant_label(run, d['baseline']):<6}"
                     f" {d['phase']:>7} {d['size']:>5}: {d['delta_per_layer_us']:+9.2f} us/layer, "
                     f"{d['delta_step_us']:+10.1f} us/step{rel}")
    return lines


def _gate_lines(run: dict) -> list[str]:
    g = run["gates"]
    demanded = g.get("demanded", [])
    failed = [x for x in demanded if not x["ok"]]
    head = "PASSED" if demanded and not failed else "FAILED" if failed else "NOT RUN"
    lines = [f"gates: {head} ({len(demanded) - len(failed)} of {len(demanded)} demanded checks)"]
    for x in demanded:
        mark = "ok  " if x["ok"] else "FAIL"
        detail = x.get("detail") or ""
        lines.append(f"  [{mark}] {x['name']}" + (f": {detail}" if detail else ""))
    rep = g.get("reported", {})
    comps = rep.get("comparisons", [])
    if comps:
        lines.append("  reported (measured, not promised):")
        for c in comps:
            u = c.get("hidden_ulp", {})
            cs = c.get("logits_cosine", {})
            ag = c.get("agreement", {})
            lines.append(
                f"    {_variant_label(run, c['variant']):>12} vs {_variant_label(run, c['against']):<6}"
                f" bitwise={'yes' if c.get('bitwise') else 'no ':3} hidden max ulp "
                f"{u.get('max_ulp', '-')}, equal {_pct(u.get('fraction_equal'))}; logits cos min "
                f"{_f6(cs.get('min'))} mean {_f6(cs.get('mean'))}; greedy agreement "
                f"{ag.get('agree', '-')}/{ag.get('predictions', '-')}"
                + (f" (first at {ag['first_disagreement']})" if ag.get("first_disagreement") is not None else ""))
    for s in rep.get("sites", []):
        lines.append(f"    site {s['site']}: baseline all-reduce vs rank-order fp32 sum: max ulp "
                     f"{s.get('baseline_ar_max_ulp', '-')}, differing {_pct(s.get('baseline_ar_fraction_differing'))};"
                     f" fused norm vs torch LlamaRMSNorm: max ulp {s.get('norm_max_ulp', '-')}, "
                     f"equal {_pct(s.get('norm_fraction_equal'))}")
    return lines


def _pct(x) -> str:
    return "-" if x is None else f"{x * 100:.4g}%"


def _f6(x) -> str:
    return "-" if x is None else f"{x:.6f}"


def format_text(doc: dict) -> str:
    out = [f"arfusion end-to-end TP decoder ({doc['model'].get('description', '')})",
           f"date {doc['date']}, commit {doc.get('git_commit')}, preset "
           f"{doc['options'].get('preset')}, L = {doc['model'].get('layers')}"]
    env = doc.get("environment", {})
    out.append(f"torch {env.get('torch')}, CUDA {env.get('cuda')}, {env.get('gpu_count')} x "
               f"{env.get('gpu_name')}; library {env.get('arfusion_library')}")
    if not doc["options"].get("for_the_record", False):
        out.append("NOTE: short timing (quick preset or fewer than 200 replays): not for the record.")
    for run in doc["runs"]:
        plan = run["plan"]
        out.append("")
        where = (f"{plan['tp']} ranks on {plan['gpus_used']} GPU(s), {plan['ranks_per_gpu']} per GPU"
                 + ("; SHARED GPU" if plan["shared_gpu"] else "; one GPU per rank"))
        out.append(f"== TP {run['tp']}: {where}; baseline all-reduce "
                   f"{'NCCL' if plan['baseline_allreduce'] == 'nccl' else 'gloo on CPU copies (a)'}"
                   f"{' over loopback sockets (--nccl-shared-gpu)' if plan.get('nccl_over_loopback') else ''}"
                   f"; status {run['status']} ==")
        if plan.get("time_sliced"):
            how = sharing_words(plan.get("sharing") or "time-sliced")
            out.append(f"WARNING: ranks share a GPU ({how}): the times below are MEANINGLESS "
                       "(they exercise the code path only).")
        for e in run.get("errors", []):
            out.append(f"error: {e}")
        fp8 = run.get("fp8", {})
        out.append(f"FP8 (e variants): {fp8.get('mode') or 'not available'}"
                   + (f" - {fp8['detail']}" if fp8.get("detail") else ""))
        for name, why in plan.get("skipped", {}).items():
            out.append(f"skipped {name}: {why}")
        out += _gate_lines(run)
        t = run["timing"]
        if t.get("skipped"):
            out.append(f"timing skipped: {t['skipped']}")
        else:
            out += _timing_table(run, "decode")
            out += _timing_table(run, "prefill")
            out += _delta_table(run)
            for r in t.get("rows", []):
                if r.get("error"):
                    out.append(f"timing error {r['variant']} {r['phase']} {r['tokens']}: {r['error']}")
    v = doc["verdict"]
    out.append("")
    out.append("VERDICT: " + ("PASSED" if v["passed"] else "FAILED"))
    for f in v["failures"]:
        out.append(f"  - {f}")
    return "\n".join(out) + "\n"


# ---- plot ------------------------------------------------------------------------------------------


def plot(doc: dict, path: str) -> str | None:
    """Step time (p50) against batch for every variant, one panel per TP (decode), plus prefill
    panels when there are prefill rows. Returns None, or why no plot was written."""
    runs = [r for r in doc["runs"] if r["timing"].get("rows")]
    if not runs:
        return "no timing rows"
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        return f"matplotlib unavailable ({e})"
    has_prefill = any(r["phase"] == "prefill" for run in runs for r in run["timing"]["rows"])
    nrows = 2 if has_prefill else 1
    fig, axes = plt.subplots(nrows, len(runs), figsize=(5.5 * len(runs), 4.2 * nrows), squeeze=False)
    for col, run in enumerate(runs):
        for row_i, phase in enumerate(["decode", "prefill"][:nrows]):
            ax = axes[row_i][col]
            rows = [r for r in run["timing"]["rows"] if r["phase"] == phase and r.get("p50_us")]
            names = sorted({r["variant"] for r in rows}, key=_order)
            for name in names:
                pts = sorted((r["tokens"], r["p50_us"] / 1000.0) for r in rows if r["variant"] == name)
                ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o",
                        label=_variant_label(run, name))
            ax.set_xscale("log", base=2)
            ax.set_xlabel("batch (sequences, 1 token each)" if phase == "decode" else "prefill tokens")
            ax.set_ylabel("step time p50 (ms, max over ranks)")
            title = f"TP {run['tp']} {phase}"
            if run["plan"].get("time_sliced"):
                title += " (SHARED GPU: meaningless)"
            ax.set_title(title)
            ax.grid(True, which="both", alpha=0.3)
            if names:
                ax.legend(fontsize=8)
    fig.suptitle(f"arfusion e2e decoder, L={doc['model'].get('layers')}, commit {doc.get('git_commit')}")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return None
