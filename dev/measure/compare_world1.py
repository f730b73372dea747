#!/usr/bin/env python3
"""Merges `arfusion-bench --op epilogue -J` and `torch_baseline.py --json` into one table.

Per token count: arfusion us, torch.compile us (medians of each side's repeated timed regions),
ratio (arfusion / torch; below 1 is faster), each side's range over its repeats, and arfusion's %
of the copy bandwidth measured in its own run. Then the two world-1 targets, each PASS or MISS with
the rows that miss it:
  1. at every token count >= 2048, arfusion reaches >= 92% of the D2D copy bandwidth;
  2. at every token count, arfusion is at least as fast as torch.compile within the run's measured
     noise (timing_noise.py: faster, or ranges of the repeats overlapping); rows within noise are
     listed.
A row arfusion could not time, or whose check found wrong elements, misses both; so does a token
count that only one of the two runs measured. Target 1 is NOT MEASURED (a miss) when no row has
>= 2048 tokens. Two runs of different hidden sizes or dtypes are refused (exit 2): their rows
would be compared token count by token count as if they timed the same function.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing_noise import fmt_range, span, speed_verdict  # noqa: E402

COPY_TARGET_PCT = 92.0
COPY_TARGET_MIN_TOKENS = 2048


def load(path):
    with open(path) as f:
        return json.load(f)


def arfusion_rows(doc):
    rows = {}
    for row in doc["rows"]:
        ok = not row.get("failed") and (row.get("wrong") in (None, 0))
        rows[row["tokens"]] = {"us": row.get("time_us"), "pct": row.get("pct_copy_bandwidth"),
                               "algo": row.get("algorithm"), "ok": ok and row.get("time_us"),
                               "range": span(row.get("repeats_us"))}
    return rows


def shape_mismatch(arf_doc, torch_doc):
    """Why the two runs cannot be merged (different hidden size or dtype), or None."""
    ah, th = arf_doc.get("header", {}), torch_doc.get("header", {})
    for key in ("hidden", "dtype"):
        if ah.get(key) != th.get(key):
            return f"{key} differs: arfusion run {ah.get(key)!r}, torch run {th.get(key)!r}"
    return None


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def compare(arf_doc, torch_doc):
    arf = arfusion_rows(arf_doc)
    torch_rows = {r["tokens"]: r for r in torch_doc["rows"]}
    table, copy_misses, speed_misses, within_noise = [], [], [], []
    if not any(tokens >= COPY_TARGET_MIN_TOKENS for tokens in arf):
        copy_misses.append("not measured")
    for tokens in sorted(set(arf) | set(torch_rows)):
        a, t = arf.get(tokens), torch_rows.get(tokens)
        arf_us = a["us"] if a and a["ok"] else None
        torch_us = t["time_us"] if t else None
        ratio = arf_us / torch_us if arf_us and torch_us else None
        pct = a["pct"] if a and a["ok"] else None
        if tokens >= COPY_TARGET_MIN_TOKENS and (pct is None or pct < COPY_TARGET_PCT):
            copy_misses.append(tokens)
        arf_range = a["range"] if a and a["ok"] else None
        torch_range = span(t.get("repeats_us")) if t else None
        speed = speed_verdict(arf_us, torch_us, arf_range, torch_range)
        if speed in ("slower", "unmeasured"):
            speed_misses.append(tokens)
        elif speed == "within noise":
            within_noise.append(tokens)
        table.append({"tokens": tokens, "arfusion_us": arf_us, "torch_compile_us": torch_us,
                      "ratio": ratio, "arfusion_range_us": arf_range, "torch_range_us": torch_range,
                      "speed": speed, "arfusion_pct_copy": pct,
                      "torch_pct_copy": t.get("pct_copy_bandwidth") if t else None,
                      "arfusion_algorithm": a["algo"] if a else None})
    return table, copy_misses, speed_misses, within_noise


def print_report(table, copy_misses, speed_misses, within_noise, arf_doc, torch_doc):
    ah, th = arf_doc["header"], torch_doc["header"]
    device = ah["devices"][0]["name"] if ah.get("devices") else "?"
    print(f"# world-1 epilogue: arfusion {ah.get('arfusion_version')} vs torch.compile "
          f"(mode={th.get('compile_mode')}, torch {th.get('torch_version')}) on {device}")
    print(f"# copy bandwidth: arfusion run {fmt(ah.get('copy_bandwidth_gbps'), '.1f')} GB/s, "
          f"torch run {fmt(th.get('copy_bandwidth_gbps'), '.1f')} GB/s")
    print(f"#{'tokens':>8} {'arfusion(us)':>13} {'torch(us)':>10} {'ratio':>7} "
          f"{'arf range':>17} {'torch range':>17} {'arf %copy':>10} {'torch %copy':>12}  speed")
    for r in table:
        print(f"{r['tokens']:>9} {fmt(r['arfusion_us'], '.2f'):>13} "
              f"{fmt(r['torch_compile_us'], '.2f'):>10} {fmt(r['ratio'], '.3f'):>7} "
              f"{fmt_range(r['arfusion_range_us']):>17} {fmt_range(r['torch_range_us']):>17} "
              f"{fmt(r['arfusion_pct_copy'], '.1f'):>10} {fmt(r['torch_pct_copy'], '.1f'):>12}  "
              f"{r['speed']}")
    def verdict(misses):
        if not misses:
            return "PASS"
        if misses == ["not measured"]:
            return f"NOT MEASURED (no row with >= {COPY_TARGET_MIN_TOKENS} tokens)"
        return "MISS at tokens " + ", ".join(map(str, misses))
    print(f"# target 1 (>= {COPY_TARGET_PCT:.0f}% of copy bandwidth at >= {COPY_TARGET_MIN_TOKENS} "
          f"tokens): {verdict(copy_misses)}")
    noise = f" (within noise at tokens {', '.join(map(str, within_noise))})" if within_noise else ""
    print(f"# target 2 (at least as fast as torch.compile at every token count, within noise): "
          f"{verdict(speed_misses)}{noise}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("arfusion_json")
    p.add_argument("torch_json")
    p.add_argument("--json", help="write the merged table and verdicts here")
    args = p.parse_args()
    arf_doc, torch_doc = load(args.arfusion_json), load(args.torch_json)
    mismatch = shape_mismatch(arf_doc, torch_doc)
    if mismatch:
        print(f"compare_world1: the two runs time different functions: {mismatch}", file=sys.stderr)
        return 2
    table, copy_misses, speed_misses, within_noise = compare(arf_doc, torch_doc)
    print_report(table, copy_misses, speed_misses, within_noise, arf_doc, torch_doc)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"arfusion_header": arf_doc["header"], "torch_header": torch_doc["header"],
                       "rows": table,
                       "targets": {"copy_bandwidth": {"pass": not copy_misses, "miss": copy_misses},
                                   "vs_torch_compile": {"pass": not speed_misses,
                                                        "miss": speed_misses,
                                                        "within_noise": within_noise}}}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
