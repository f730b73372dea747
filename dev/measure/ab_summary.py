#!/usr/bin/env python3
"""Tabulates a candidate A/B of `dev/remote_gpu/gpu_acceptance.sh candidate` (or `world1_candidate`):
arfusion-bench JSONs named ab_<op>_<world>_<library>.<round>.json, or
ab_<op>_<world>_<library>_h<hidden>.<round>.json where one run times several hidden sizes (so a
library's name must not end in _h and digits), one per library and round, libraries alternating
within a round. Quantized rows (--op quant) are told apart by their pattern: the cell's column is
<pattern>/<column>. Per cell (op, world, tokens, column) each library's figure is the median over
rounds of the cell's time (itself a median of timed regions). A candidate's difference counts
only beyond the A/A control, a copy of the base library timed in the same rounds: a cell is
"slower" (or "faster") when the candidate's relative difference from the base exceeds the A/A
copy's at that cell and the candidate's repeats do not overlap the base's (dev/measure/timing_noise.py);
otherwise it is "within A/A". Without an A/A copy only the overlap rule applies.

Usage: ab_summary.py DIR [--base base] [--aa base_copy] [--json OUT]"""
import argparse
import collections
import glob
import json
import os
import re
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import timing_noise  # noqa: E402

NAME = re.compile(r"^ab_(?P<op>[a-z0-9]+)_(?P<world>\d+)_(?P<lib>[A-Za-z0-9_.-]+?)(?:_h(?P<hidden>\d+))?"
                  r"\.(?P<round>\d+)\.json$")


def load(directory):
    """{lib: {(op, world, tokens, column): {"rounds": [us...], "repeats": [us...]}}}"""
    libs = collections.defaultdict(lambda: collections.defaultdict(lambda: {"rounds": [], "repeats": []}))
    for path in sorted(glob.glob(os.path.join(directory, "ab_*.json"))):
        m = NAME.match(os.path.basename(path))
        if not m:
            continue
        with open(path) as f:
            doc = json.load(f)
        op = m["op"] + (f" h{m['hidden']}" if m["hidden"] else "")
        for row in doc.get("rows", []):
            for res in row.get("results", []):
                if res.get("skipped") or res.get("failed") or res.get("time_us") is None:
                    continue
                column = f"{row['quant']}/{res['column']}" if row.get("quant") else res["column"]
                cell = libs[m["lib"]][(op, int(m["world"]), row["tokens"], column)]
                cell["rounds"].append(res["time_us"])
                cell["repeats"].extend(res.get("repeats_us") or [res["time_us"]])
    return libs


def relative(us, base_us):
    return us / base_us - 1.0


def verdict(cand, base, aa):
    """slower | faster | within A/A, for one cell (each a load() cell; aa may be None)."""
    c, b = statistics.median(cand["rounds"]), statistics.median(base["rounds"])
    allowance = abs(relative(statistics.median(aa["rounds"]), b)) if aa else 0.0
    d = relative(c, b)
    if abs(d) <= allowance:
        return "within A/A"
    cr, br = timing_noise.span(cand["repeats"]), timing_noise.span(base["repeats"])
    if d > 0:
        return "slower" if timing_noise.speed_verdict(c, b, cr, br) == "slower" else "within A/A"
    return "faster" if timing_noise.speed_verdict(b, c, br, cr) == "slower" else "within A/A"


def summarize(libs, base="base", aa="base_copy"):
    if base not in libs:
        raise SystemExit(f"ab_summary: no files of the base library {base!r} (found: {sorted(libs)})")
    cands = sorted(lib for lib in libs if lib not in (base, aa))
    rows = []
    for key in sorted(libs[base]):
        b = libs[base][key]
        a = libs[aa].get(key) if aa in libs else None
        row = {"op": key[0], "world": key[1], "tokens": key[2], "column": key[3],
               "base_us": statistics.median(b["rounds"]),
               "aa_relative": relative(statistics.median(a["rounds"]), statistics.median(b["rounds"])) if a else None}
        for lib in cands:
            c = libs[lib].get(key)
            if c:
                row[lib] = {"us": statistics.median(c["rounds"]),
                            "relative": relative(statistics.median(c["rounds"]), row["base_us"]),
                            "verdict": verdict(c, b, a)}
        rows.append(row)
    return cands, rows


def render(cands, rows):
    out = []
    group = None
    for r in rows:
        if (r["op"], r["world"]) != group:
            group = (r["op"], r["world"])
            out.append(f"== {r['op']}, {r['world']} ranks (median of rounds, us; % vs base)")
        line = f"{r['tokens']:>7} {r['column']:<22} base {r['base_us']:9.2f}"
        if r["aa_relative"] is not None:
            line += f"  A/A {100 * r['aa_relative']:+6.1f}%"
        for lib in cands:
            if lib in r:
                c = r[lib]
                line += f"  {lib} {c['us']:9.2f} {100 * c['relative']:+6.1f}% {c['verdict']}"
        out.append(line)
    for lib in cands:
        counts = collections.Counter(r[lib]["verdict"] for r in rows if lib in r)
        auto = collections.Counter(r[lib]["verdict"] for r in rows if lib in r and r["column"] == "auto")
        out.append(f"{lib}: {dict(sorted(counts.items()))}; auto column only: {dict(sorted(auto.items()))}")
    return "\n".join(out)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dir")
    ap.add_argument("--base", default="base")
    ap.add_argument("--aa", default="base_copy")
    ap.add_argument("--json", help="write the rows as JSON too")
    ns = ap.parse_args(argv)
    cands, rows = summarize(load(ns.dir), ns.base, ns.aa)
    print(render(cands, rows))
    if ns.json:
        with open(ns.json, "w") as f:
            json.dump({"candidates": cands, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
