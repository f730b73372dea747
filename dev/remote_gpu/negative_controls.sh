#!/usr/bin/env bash
# Builds the debug-stall and negative-control variants of the library (cmake/stress.cmake) into
# ./build-nc and runs them: the debug-stall soaks must find ZERO wrong elements, and each negative
# control must be DETECTED by arfusion-stress (exit 0 of --expect-failure: a wrong element, an
# expired wait or an asynchronous error); a crash or a setup error never counts as a detection.
# Each run's JSON report (first bad call, rank, row, element; errors) lands in OUT_DIR.
#
# Usage: bash dev/remote_gpu/negative_controls.sh [OUT_DIR]      (default: negative_controls_out)
#   JOBS=N                 build parallelism (default: nproc)
#   ARF_CMAKE_ARGS="..."   extra configure arguments, e.g. -DARF_DEBUG_STALL_NS=500000
# Exit: ctest's (0: every control behaved as required); 77 from the tests means no GPU (skipped).
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-negative_controls_out}
mkdir -p "$out"
nvcc_path=$(command -v nvcc || echo /usr/local/cuda/bin/nvcc)

# ARF_NC_BUILD=DIR: use a build already configured with -DARF_BUILD_NEGATIVE_CONTROLS=ON (e.g. one
# made elsewhere and shipped by dev/remote_gpu/pack_for_device.sh) instead of building ./build-nc here.
nc_build=${ARF_NC_BUILD:-build-nc}
if [[ -z ${ARF_NC_BUILD:-} ]]; then
  cmake -S . -B build-nc -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_COMPILER="$nvcc_path" \
    -DARF_BUILD_NEGATIVE_CONTROLS=ON ${ARF_CMAKE_ARGS:-} > "$out/configure.log" 2>&1 ||
    { tail -20 "$out/configure.log"; exit 1; }
  targets=(arfusion-stress arfusion-stress-debug_stall arfusion-stress-no_end_barrier
           arfusion-stress-relaxed_flags arfusion-stress-no_lamport_clear
           arfusion-stress-two_lamport_buffers arfusion-stress-no_shared_device_gate
           arfusion-stress-no_return_wait arfusion_gpu_tests_no_shared_device_gate
           arfusion_gpu_tests_no_return_wait)
  start=$SECONDS
  cmake --build build-nc -j "${JOBS:-$(nproc)}" --target "${targets[@]}" > "$out/build.log" 2>&1 ||
    { grep -E "error|FAILED" "$out/build.log" | head -20; exit 1; }
  echo "negative_controls: built ${#targets[@]} binaries in $((SECONDS - start)) s"
fi
# ctest files name the configuring machine's build path (device_run.sh links it when shipped).
test_dir=$(sed -n 's/^# Build directory: //p' "$nc_build/CTestTestfile.cmake" 2>/dev/null)
[[ -n $test_dir && -e $test_dir ]] || test_dir=$nc_build

ctest --test-dir "$test_dir" -R '^(negative_|stress_debug_stall)' --output-on-failure 2>&1 |
  tee "$out/ctest.log"
rc=${PIPESTATUS[0]}
cp "$test_dir"/negative_*.json "$test_dir"/stress_debug_stall*.json "$out/" 2>/dev/null
for f in "$out"/negative_*.json "$out"/stress_debug_stall*.json; do
  [[ -f $f ]] || continue
  python3 - "$f" <<'EOF' 2>/dev/null || true
import json, sys
j = json.load(open(sys.argv[1]))
for rep in j.get("repeats", []):
    ranks = rep.get("ranks", [])
    fails = [f"rank {r['rank']} {r['failure']}: {r.get('message', '')[:120]}" for r in ranks if r.get("failure") != "none"]
    bad = next((r for r in ranks if r.get("first_bad")), None)
    first = (f", first bad call {bad['first_bad']['call']} rank {bad['rank']} {bad['first_bad']['output']} "
             f"row {bad['first_bad']['row']} col {bad['first_bad']['col']}" if bad else "")
    print(f"{sys.argv[1]}: library {j.get('library_variant')}, calls {rep.get('issued_calls')}, "
          f"wrong {rep.get('wrong_elements')} ({rep.get('wrong_before_first_lost_call')} before the first "
          f"lost call), cross-rank {rep.get('cross_rank', {})}, exit {j.get('exit_code')}{first}"
          + ("; " + "; ".join(fails) if fails else ""))
EOF
done
exit "$rc"
