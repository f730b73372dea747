#!/usr/bin/env python3
"""Merges `arfusion-bench --op quant --nranks 1 -J` and `torch_quant_baseline.py --json` into one
table per quant pattern (and hidden size).

Per token count: arfusion's 1_kernel us and 1_kernel+bf16 us (the same call also writing the bf16
norm), torch.compile us, ratio (arfusion 1_kernel / torch; below 1 is faster), arfusion's and
torch's % of the copy bandwidth measured in their own runs (both with arfusion-bench's byte count
for --op quant). Each torch pattern is compared with arfusion's row-major, fp32-scale variant of the
same pattern (fp8_tensor, fp8_token, fp8_group/row/fp32, nvfp4/row, mxfp4/row); arfusion's other
layouts and formats are listed as not compared. Then the two world-1 targets, each PASS or
MISS with the rows that miss it:
  A. per pattern, at every token count, arfusion's 1_kernel is at least as fast as torch.compile
     within the run's measured noise (timing_noise.py: ratio <= 1, or the two sides' ranges over
     their repeats overlapping; those rows are listed as within noise);
  B. per-group FP8 (fp8_group/row/fp32) reaches >= 85% of the copy bandwidth at >= 4096 tokens.
A 1_kernel cell arfusion could not time, or whose check found wrong elements, misses both; so does
a token count that only one of the two runs measured. Target B is NOT MEASURED (a miss) when no
fp8_group row has >= 4096 tokens.
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from timing_noise import fmt_range, span, speed_verdict  # noqa: E402

COPY_TARGET_PCT = 85.0
COPY_TARGET_MIN_TOKENS = 4096
COPY_TARGET_PATTERN = "fp8_group"
ONE_KERNEL = "1_kernel"
ONE_KERNEL_BF16 = "1_kernel+bf16"
# The layout and scale format of the arfusion variant a torch pattern is compared with: torch's
# functions write row-major scales, fp32 for fp8 per-group (torch_quant_baseline.py).
COMPARED_LAYOUT = "row"
COMPARED_FORMAT = "fp32"


def load(path):
    with open(path) as f:
        return json.load(f)


def split_label(label):
    """'fp8_group/row/fp32' -> ('fp8_group', 'row', 'fp32'); 'fp8_token' -> ('fp8_token', None,
    None). Tolerates surrounding spaces and case."""
    parts = [p.strip().lower() for p in str(label).split("/")]
    parts += [None] * (3 - len(parts))
    return parts[0], parts[1], parts[2]


def compared_variant(label):
    """The torch pattern an arfusion label is compared with, or None for another layout/format."""
    base, layout, fmt = split_label(label)
    if layout not in (None, COMPARED_LAYOUT) or fmt not in (None, COMPARED_FORMAT):
        return None
    return base


def cell_range(row, column):
    """(fastest, slowest) over the cell's repeats (arfusion-bench -R > 1), or None."""
    for cell in row.get("results") or []:
        if cell.get("column") == column:
            return span(cell.get("repeats_us"))
    return None


def cell_of(row, column):
    """(time_us or None, note): a time only when the cell ran, was checked clean and was timed."""
    for cell in row.get("results") or []:
        if cell.get("column") != column:
            continue
        if cell.get("skipped"):
            return None, "skipped: " + (cell.get("error") or "")
        if cell.get("unsupported"):
            return None, "unsupported: " + (cell.get("error") or "")
        if cell.get("error"):
            return None, cell["error"]
        if cell.get("wrong") not in (None, 0):
            return None, f"{cell['wrong']} wrong"
        if cell.get("time_us") is None:
            return None, "not timed"
        return cell["time_us"], ""
    us = (row.get("times_us") or {}).get(column)  # a row without per-cell results
    if us is None:
        return None, "not present"
    if row.get("failed") or row.get("wrong") not in (None, 0):
        return None, "row failed"
    return us, ""


def arfusion_rows(doc):
    """{(pattern, hidden, tokens): row figures} for the compared variants; and the labels of the
    variants left out."""
    rows, skipped = {}, []
    for row in doc["rows"]:
        label = row.get("quant")
        pattern = compared_variant(label)
        if pattern is None:
            if label not in skipped:
                skipped.append(label)
            continue
        us, note = cell_of(row, ONE_KERNEL)
        bf16_us, _ = cell_of(row, ONE_KERNEL_BF16)
        rows[(pattern, row["hidden"], row["tokens"])] = {
            "label": label, "us": us, "bf16_us": bf16_us, "note": note,
            "range": cell_range(row, ONE_KERNEL) if us is not None else None,
            "pct": row.get("pct_copy_bandwidth") if us is not None else None,
            "bytes_moved": row.get("bytes_moved")}
    return rows, skipped


def torch_rows(doc):
    rows = {}
    for row in doc["rows"]:
        pattern = row.get("pattern") or split_label(row.get("arfusion_label", ""))[0]
        rows[(pattern, row["hidden"], row["tokens"])] = row
    return rows


def fmt(value, spec):
    return "-" if value is None else format(value, spec)


def compare(arf_doc, torch_doc):
    arf, not_compared = arfusion_rows(arf_doc)
    tor = torch_rows(torch_doc)
    torch_patterns = torch_doc["header"].get("patterns") or {}
    groups = sorted({(p, h) for p, h, _ in set(arf) | set(tor)},
                    key=lambda ph: (pattern_order(arf_doc, ph[0]), ph[1]))
    tables, speed_misses, copy_misses, warnings, within_noise = [], [], [], [], []
    copy_measured = False
    for pattern, hidden in groups:
        tokens_all = sorted({t for p, h, t in set(arf) | set(tor) if (p, h) == (pattern, hidden)})
        table_rows, misses, byte_diffs, eager_diffs, noise = [], [], [], [], []
        label = next((arf[k]["label"] for k in arf if k[:2] == (pattern, hidden)), None)
        for tokens in tokens_all:
            a, t = arf.get((pattern, hidden, tokens)), tor.get((pattern, hidden, tokens))
            arf_us = a["us"] if a else None
            torch_us = t.get("time_us") if t else None
            ratio = arf_us / torch_us if arf_us and torch_us else None
            pct = a["pct"] if a else None
            arf_range = a["range"] if a else None
            torch_range = span(t.get("repeats_us")) if t else None
            speed = speed_verdict(arf_us, torch_us, arf_range, torch_range)
            if speed in ("slower", "unmeasured"):
                misses.append(tokens)
            elif speed == "within noise":
                noise.append(tokens)
            if pattern == COPY_TARGET_PATTERN and tokens >= COPY_TARGET_MIN_TOKENS:
                copy_measured = True
                if pct is None or pct < COPY_TARGET_PCT:
                    copy_misses.append(tokens if len(hidden_set(groups)) == 1
                                       else f"{tokens}@{hidden}")
            if a and t and a["bytes_moved"] is not None and t.get("bytes_moved") is not None \
                    and a["bytes_moved"] != t["bytes_moved"]:
                byte_diffs.append(tokens)
            if t and (t.get("residual_out_bitwise_equal_eager") is False
                      or (t.get("quant_max_steps_vs_eager") or 0) > 1):
                eager_diffs.append(f"{tokens} ({t.get('quant_max_steps_vs_eager')} steps"
                                   + ("" if t.get("residual_out_bitwise_equal_eager") is not False
                                      else ", residual_out not bitwise") + ")")
            note = a["note"] if a else "not measured by arfusion"
            if not t:
                note = (note + "; " if note else "") + "not measured by torch"
            table_rows.append({
                "tokens": tokens, "arfusion_1_kernel_us": arf_us,
                "arfusion_1_kernel_bf16_us": a["bf16_us"] if a else None,
                "torch_compile_us": torch_us, "ratio": ratio, "arfusion_range_us": arf_range,
                "torch_range_us": torch_range, "speed": speed, "arfusion_pct_copy": pct,
                "torch_pct_copy": t.get("pct_copy_bandwidth") if t else None, "note": note})
        if byte_diffs:
            warnings.append(f"{pattern} hidden {hidden}: arfusion's and torch's byte counts "
                            f"differ at tokens {', '.join(map(str, byte_diffs))} (%copy columns "
                            f"not comparable)")
        if eager_diffs:
            warnings.append(f"{pattern} hidden {hidden}: torch.compile's quant codes are more than "
                            f"one step from eager's at tokens {', '.join(eager_diffs)}")
        if misses:
            speed_misses.append({"pattern": pattern, "hidden": hidden, "tokens": misses})
        if noise:
            within_noise.append({"pattern": pattern, "hidden": hidden, "tokens": noise})
        tables.append({"pattern": pattern, "arfusion_label": label, "hidden": hidden,
                       "torch_approximation": bool(
                           (torch_patterns.get(pattern) or {}).get("approximation")),
                       "rows": table_rows,
                       "vs_torch_compile": {"pass": not misses, "miss": misses,
                                            "within_noise": noise}})
    if not copy_measured:
        copy_misses.insert(0, "not measured")
    return {"tables": tables, "not_compared": not_compared, "warnings": warnings,
            "targets": {"vs_torch_compile": {"pass": not speed_misses, "miss": speed_misses,
                                             "within_noise": within_noise},
                        "fp8_group_copy_bandwidth": {"pass": not copy_misses,
                                                     "miss": copy_misses}}}


def hidden_set(groups):
    return {h for _, h in groups}


def pattern_order(arf_doc, pattern):
    """arfusion's sweep order (header quant_variants), unknown patterns last."""
    order = [compared_variant(v) for v in arf_doc["header"].get("quant_variants") or []]
    return order.index(pattern) if pattern in order else len(order)


def verdict(misses):
    if not misses:
        return "PASS"
    if misses[0] == "not measured":
        return (f"NOT MEASURED (no {COPY_TARGET_PATTERN} row with >= {COPY_TARGET_MIN_TOKENS} "
                "tokens)")
    return "MISS at tokens " + ", ".join(map(str, misses))


def print_report(result, arf_doc, torch_doc):
    ah, th = arf_doc["header"], torch_doc["header"]
    device = ah["devices"][0]["name"] if ah.get("devices") else "?"
    shapes = th.get("shapes", "static" if th.get("dynamic") is False else "?")
    if shapes == "dynamic":
        shapes += f", compiled at {th.get('dynamic_hint')} tokens"
    print(f"# world-1 quantized epilogues: arfusion {ah.get('arfusion_version')} 1_kernel vs "
          f"torch.compile (mode={th.get('compile_mode')}, shapes {shapes}, "
          f"torch {th.get('torch_version')}) on {device}")
    print(f"# copy bandwidth: arfusion run {fmt(ah.get('copy_bandwidth_gbps'), '.1f')} GB/s, "
          f"torch run {fmt(th.get('copy_bandwidth_gbps'), '.1f')} GB/s; ratio = arfusion "
          f"1_kernel / torch (<= 1 meets target A)")
    for table in result["tables"]:
        approx = " (torch side approximate)" if table["torch_approximation"] else ""
        print(f"#\n# {table['pattern']} (arfusion {table['arfusion_label'] or '-'}), hidden "
              f"{table['hidden']}{approx}")
        print(f"#{'tokens':>8} {'1_kernel(us)':>13} {'+bf16(us)':>10} {'torch(us)':>10} "
              f"{'ratio':>7} {'arf range':>17} {'torch range':>17} {'arf %copy':>10} "
              f"{'torch %copy':>12}  speed; note")
        for r in table["rows"]:
            note = r["speed"] + (f"; {r['note']}" if r["note"] else "")
            print(f"{r['tokens']:>9} {fmt(r['arfusion_1_kernel_us'], '.2f'):>13} "
                  f"{fmt(r['arfusion_1_kernel_bf16_us'], '.2f'):>10} "
                  f"{fmt(r['torch_compile_us'], '.2f'):>10} {fmt(r['ratio'], '.3f'):>7} "
                  f"{fmt_range(r['arfusion_range_us']):>17} {fmt_range(r['torch_range_us']):>17} "
                  f"{fmt(r['arfusion_pct_copy'], '.1f'):>10} {fmt(r['torch_pct_copy'], '.1f'):>12}"
                  f"  {note}")
    print("#")
    if result["not_compared"]:
        print(f"# not compared (no torch function with that scale layout/format): "
              f"{', '.join(result['not_compared'])}")
    if th.get("stopped"):
        print(f"# warning: the torch run stopped early: {th['stopped']}")
    for w in result["warnings"]:
        print(f"# warning: {w}")
    hiddens = {t["hidden"] for t in result["tables"]}
    for table in result["tables"]:
        where = table["pattern"] + (f" hidden {table['hidden']}" if len(hiddens) > 1 else "")
        noise = table["vs_torch_compile"]["within_noise"]
        print(f"# target A, {where}: {verdict(table['vs_torch_compile']['miss'])}"
              + (f" (within noise at tokens {', '.join(map(str, noise))})" if noise else ""))
    a = result["targets"]["vs_torch_compile"]
    missed = sorted({m["pattern"] for m in a["miss"]}, key=lambda p: pattern_order(arf_doc, p))
    print(f"# target A (1_kernel at least as fast as torch.compile at every token count, within "
          f"noise, every pattern): {'PASS' if a['pass'] else 'MISS for ' + ', '.join(missed)}")
    b = result["targets"]["fp8_group_copy_bandwidth"]
    print(f"# target B ({COPY_TARGET_PATTERN} >= {COPY_TARGET_PCT:.0f}% of copy bandwidth at >= "
          f"{COPY_TARGET_MIN_TOKENS} tokens): {verdict(b['miss'])}")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("arfusion_json", help="arfusion-bench --op quant --nranks 1 -J output")
    p.add_argument("torch_json", help="torch_quant_baseline.py --json output")
    p.add_argument("--json", help="write the merged tables and verdicts here")
    args = p.parse_args(argv)
    arf_doc, torch_doc = load(args.arfusion_json), load(args.torch_json)
    if arf_doc["header"].get("op") != "quant":
        sys.exit(f"compare_world1_quant: {args.arfusion_json} is not an --op quant run")
    result = compare(arf_doc, torch_doc)
    print_report(result, arf_doc, torch_doc)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"arfusion_header": arf_doc["header"], "torch_header": torch_doc["header"],
                       **result}, f, indent=2)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
