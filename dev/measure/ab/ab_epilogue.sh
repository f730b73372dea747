#!/usr/bin/env bash
# A/B of the world-1 epilogues on one GPU: two builds of arfusion-bench (e.g. the commit before and
# after a kernel change), run alternately old/new for every sweep, REPEATS times each, then medians
# and spread (min..max over the repeats) side by side, per cell.
#   bash dev/measure/ab/ab_epilogue.sh OLD_BUILD_DIR NEW_BUILD_DIR [OUT_DIR]
# Sweeps (arfusion-bench, --nranks 1, CUDA graphs, checked once against the CPU reference):
#   --op epilogue (residual + RMSNorm): tokens 1..16384, hidden 8192 and 16384, bf16 and fp16
#   --op quant, every pattern: tokens 1..16384, hidden 7168 and 8192, bf16 (every kernel count)
# Knobs: REPEATS (default 3), TMAX (default 16384), ITERS (default 100), QUANT (patterns).
set -uo pipefail
old=${1:?old build dir}; new=${2:?new build dir}; out=${3:-bench/results/tmp-ab}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
repeats=${REPEATS:-3}; tmax=${TMAX:-16384}; iters=${ITERS:-100}
quant=${QUANT:-fp8_tensor,fp8_token,fp8_group,nvfp4,mxfp4}
run() {  # version dir name args...
  local v=$1 dir=$2 name=$3; shift 3
  LD_LIBRARY_PATH=$dir timeout 300 "$dir/arfusion-bench" --nranks 1 --devices 0 --tmin 1 --tmax "$tmax" \
    -n "$iters" -w 10 -G 10 -c 1 "$@" -J "$out/${name}_${v}.json" > "$out/${name}_${v}.txt" 2>&1 ||
    echo "ab_epilogue: $v $name failed (see $out/${name}_${v}.txt)" >&2
}
sweeps=()
for d in bf16 fp16; do for h in 8192 16384; do sweeps+=("norm_${d}_${h}|--op epilogue -d $d --hidden $h"); done; done
for q in ${quant//,/ }; do for h in 7168 8192; do sweeps+=("${q}_${h}|--op quant -d bf16 --quant $q --hidden $h"); done; done
for ((r = 0; r < repeats; ++r)); do
  for s in "${sweeps[@]}"; do
    name=${s%%|*}; args=${s#*|}
    # shellcheck disable=SC2086
    run old "$old" "${name}_r$r" $args
    # shellcheck disable=SC2086
    run new "$new" "${name}_r$r" $args
  done
done
python3 - "$out" "$repeats" <<'EOF'
import glob, json, os, statistics, sys
out, repeats = sys.argv[1], int(sys.argv[2])
cells = {}  # (sweep, tokens, column) -> {version: [us]}
for path in glob.glob(os.path.join(out, "*_r*_*.json")):
    base = os.path.basename(path)[:-5]
    sweep, version = base.rsplit("_r", 1)[0], base.rsplit("_", 1)[1]
    for row in json.load(open(path))["rows"]:
        if row.get("failed") or row.get("wrong"):
            print(f"WRONG or failed: {base} tokens {row.get('tokens')}")
        times = row.get("times_us") or {"norm": row.get("time_us")}
        for column, us in times.items():
            if us:
                cells.setdefault((sweep, row["tokens"], column), {}).setdefault(version, []).append(us)
print(f"{'sweep':<18} {'tokens':>6} {'column':<14} {'old us (min..max)':>26} {'new us (min..max)':>26} {'new/old':>8}")
for (sweep, tokens, column), v in sorted(cells.items()):
    if "old" not in v or "new" not in v:
        continue
    o, n = statistics.median(v["old"]), statistics.median(v["new"])
    fmt = lambda xs, m: f"{m:9.2f} ({min(xs):.2f}..{max(xs):.2f})"
    print(f"{sweep:<18} {tokens:>6} {column:<14} {fmt(v['old'], o):>26} {fmt(v['new'], n):>26} {n / o:8.3f}")
EOF
