#!/usr/bin/env python3
"""Tally of the soak (arfusion-stress) toward its target, across runs.

    python3 dev/measure/soak_tally.py [PATH ...] [--json OUT]

PATH: the soak's JSON reports (`arfusion-stress -J`) or directories searched for `stress*.json`
and `churn*.json` (default: bench/results). A report is one of format 2 (bench/results/SCHEMA.md):
`"tool": "arfusion-stress"` with `"format": 2`, or `"tool": "arfusion-stress churn"` (the same
keys); any other file is left out. Runs are pooled only where they soaked the same library: the same git
objects of src/, include/ and the kernel-unit CMake files at the run's commit (the JSON's `git_commit`, or
for older files the commit suffix of the results folder, `<date>-<purpose>-<commit>/`). A commit
git does not know pools under its own name.

Per (library, world, transport, mode): the calls that ran per algorithm (`per_plan_algorithm`: what the
plan launched, forced or chosen by auto), against the target (>= 10^6 per algorithm at 2, 4 and 8
virtual ranks; >= 10^5 as processes over ipc), and whether every pooled run was clean (0 wrong
elements, no rank failure, no cross-rank difference, exit 0). A run that was not clean is counted
in `unclean_runs` and its calls are not added: the target is calls with 0 wrong and 0 timeouts.
Under arfusion-run each rank writes its own file; only rank 0's counts are added. Negative controls
(another `library_variant`, or --expect-failure) and replays of a recorded sequence are not soak
volume and are left out.

The target is calls WITH the soak's coverage, so each run is also classified by what it drew: every
pattern of PATTERNS, a hidden above 8192, full-capacity calls and tiny-after-large transitions. Runs
missing any of these pool in a group of their own ("partial coverage: ..." names what is missing),
which never meets the target; runs from before the soak drew them (hidden <= 8192, five patterns)
land there.

Runs in the co-resident test mode (`co_resident`: no shared-device gate, no return wait; the mode
where a peer can run a call ahead on one GPU) pool apart from the normal mode's, against the same
target.

Both token mixes (`token_mix`: engine, or volume: fewer bytes per call, the same kinds of call;
files from before the option are engine) pool together, with the calls of each shown: the
full-capacity and tiny-after-large counts say what the pooled calls covered. Only `stress*.json` and
`churn*.json` files count: runs kept for the record that broke the header's usage rules (e.g. two
worlds' soaks at once on one GPU, `rule_break_*`) are not soak volume.
"""
import argparse
import json
import os
import re
import subprocess
import sys

ALGORITHMS = ("oneshot_lamport", "oneshot_pull", "twoshot", "unfused")
PATTERNS = ("allreduce", "flat", "residual_rmsnorm", "fp8_tensor", "fp8_token", "fp8_group", "nvfp4", "mxfp4")
TARGET_THREADS = 1_000_000
TARGET_PROCESSES = 100_000
# What the library is built from: its sources and the CMake files that generate its kernel units.
# CMakeLists.txt is left out: it changes with every test or tool target, the library's flags rarely.
LIBRARY_PATHS = ("src", "include", "cmake/kernels.cmake", "cmake/kernel_rows.cmake")
REPO = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))


def library_identity(commit, repo=REPO):
    """The git objects of the library's sources at `commit` (short), or None if git lacks it."""
    if not commit:
        return None
    ids = []
    for path in LIBRARY_PATHS:
        done = subprocess.run(["git", "-C", repo, "rev-parse", "--verify", "--quiet", f"{commit}:{path}"],
                              capture_output=True, text=True)
        if done.returncode != 0:
            return None
        ids.append(done.stdout.strip()[:12])
    return "-".join(ids)


def commit_of(path, doc):
    commit = doc.get("git_commit") or ""
    if commit:
        return commit
    m = re.search(r"-([0-9a-f]{7,40})$", os.path.basename(os.path.dirname(os.path.abspath(path))))
    return m.group(1) if m else ""


def is_soak_report(doc):
    """A report of format 2: the soak's (`arfusion-stress` with "format": 2, or the same keys under
    the tool name `arfusion-stress churn`)."""
    tool = doc.get("tool")
    return tool == "arfusion-stress churn" or (tool == "arfusion-stress" and doc.get("format") == 2)


def run_is_clean(doc, rep):
    if doc.get("exit_code", 1) != 0 or doc.get("setup_error"):
        return False
    for r in rep.get("ranks", []):
        if r.get("wrong_elements", 0) != 0 or r.get("failure", "none") != "none":
            return False
    cross = rep.get("cross_rank", {})
    return not cross.get("error") and cross.get("mismatched_calls", 0) == 0


def coverage_of(rep):
    """"full coverage", or "partial coverage: <what is missing>", from one repeat's counters."""
    missing = []
    patterns = {k for k, v in rep.get("per_pattern", {}).items() if v > 0}
    absent = [p for p in PATTERNS if p not in patterns]
    if absent:
        missing.append("patterns " + ", ".join(absent))
    hiddens = [int(k) for k, v in rep.get("per_hidden", {}).items() if v > 0]
    if not hiddens or max(hiddens) <= 8192:
        missing.append("no hidden above 8192")
    if rep.get("full_capacity_calls", 0) == 0:
        missing.append("no full-capacity call")
    if rep.get("tiny_after_large_transitions", 0) == 0:
        missing.append("no tiny-after-large transition")
    return "full coverage" if not missing else "partial coverage: " + "; ".join(missing)


def find_files(paths):
    for p in paths:
        if os.path.isdir(p):
            for root, _, names in os.walk(p):
                for n in sorted(names):
                    if n.startswith(("stress", "churn")) and n.endswith(".json"):
                        yield os.path.join(root, n)
        else:
            yield p


def tally(files, identity=library_identity):
    groups = {}
    for path in files:
        with open(path) as f:
            doc = json.load(f)
        if not is_soak_report(doc):
            continue
        if doc.get("processes") and doc.get("rank", 0) not in (0, -1):
            continue  # another rank's copy of the same calls
        if doc.get("library_variant", "release") != "release" or "--expect-failure" in doc.get("command_line", ""):
            continue  # a negative control's library (older files name no variant: its flag tells)
        if doc.get("replay"):
            continue  # a replayed sequence is a regression check, not soak volume
        commit = commit_of(path, doc)
        lib = identity(commit) or f"commit {commit or 'unknown'}"
        transport = "ipc processes" if doc.get("processes") else "threads"
        if doc.get("mps") and doc.get("processes"):
            transport += " (MPS)"  # processes share the GPU concurrently, not time-sliced: pooled apart
        if doc.get("co_resident"):
            transport += ", co-resident test mode"  # no gate, no return wait (docs/protocol.md): pooled apart
        for rep in doc.get("repeats", []):
            coverage = coverage_of(rep)
            key = (lib, doc.get("world"), transport, coverage)
            g = groups.setdefault(key, {"library": lib, "world": doc.get("world"), "transport": transport,
                                        "coverage": coverage, "commits": [], "files": [],
                                        "calls": {a: 0 for a in ALGORITHMS}, "runs": 0, "unclean_runs": 0,
                                        "seconds": 0.0, "full_capacity_calls": 0, "tiny_after_large": 0,
                                        "calls_per_mix": {}})
            if commit and commit not in g["commits"]:
                g["commits"].append(commit)
            rel = os.path.relpath(path, REPO)
            if rel not in g["files"]:
                g["files"].append(rel)
            g["runs"] += 1
            if not run_is_clean(doc, rep):
                g["unclean_runs"] += 1
                continue
            g["seconds"] += rep.get("seconds", 0.0)
            g["full_capacity_calls"] += rep.get("full_capacity_calls", 0)
            g["tiny_after_large"] += rep.get("tiny_after_large_transitions", 0)
            ran = 0
            for a in ALGORITHMS:
                n = rep.get("per_plan_algorithm", {}).get(a, 0)
                g["calls"][a] += n
                ran += n
            mix = doc.get("token_mix", "engine")
            g["calls_per_mix"][mix] = g["calls_per_mix"].get(mix, 0) + ran
    out = []
    for g in groups.values():
        target = TARGET_THREADS if g["transport"].startswith("threads") else TARGET_PROCESSES
        g["target_per_algorithm"] = target
        g["met"] = (g["coverage"] == "full coverage" and g["unclean_runs"] == 0 and
                    all(g["calls"][a] >= target for a in ALGORITHMS))
        g["seconds_left_at_pooled_rate"] = seconds_left(g, target)
        out.append(g)
    out.sort(key=lambda g: (g["library"], g["transport"], g["world"] or 0, g["coverage"]))
    return out


def seconds_left(g, target):
    """Device seconds until every algorithm reaches the target at the pooled runs' rate (calls of
    the algorithm / seconds of the clean runs, whatever their mix); None where that says nothing:
    the target met, partial coverage (never meets it), or an algorithm short of it that never ran."""
    if g["met"] or g["coverage"] != "full coverage" or g["seconds"] <= 0:
        return None
    left = 0.0
    for a in ALGORITHMS:
        short = target - g["calls"][a]
        if short <= 0:
            continue
        if g["calls"][a] == 0:
            return None
        left = max(left, short * g["seconds"] / g["calls"][a])
    return left


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("paths", nargs="*", default=[os.path.join(REPO, "bench", "results")])
    ap.add_argument("--json", help="write the tally here")
    args = ap.parse_args(argv)
    groups = tally(list(find_files(args.paths)))
    for g in groups:
        calls = ", ".join(f"{a} {g['calls'][a]:,}" for a in ALGORITHMS)
        state = "MET" if g["met"] else "not met"
        if g["seconds_left_at_pooled_rate"] is not None:
            state += f", ~{g['seconds_left_at_pooled_rate']:,.0f} device s left at the pooled rate"
        mixes = ", ".join(f"{m} {n:,}" for m, n in sorted(g["calls_per_mix"].items()))
        print(f"{g['library']}  world {g['world']} {g['transport']}, {g['coverage']}: {calls} "
              f"(target {g['target_per_algorithm']:,} each: {state}); {g['runs']} run(s), "
              f"{g['unclean_runs']} unclean, {g['seconds']:.0f} s, {g['full_capacity_calls']:,} full-capacity "
              f"calls, {g['tiny_after_large']:,} tiny-after-large; calls by mix: {mixes or 'none'}; "
              f"commits {', '.join(g['commits'])}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(groups, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
