#!/usr/bin/env bash
# compute-sanitizer over a short subset of the GPU suite on virtual ranks:
#   memcheck   out-of-bounds / misaligned global and shared accesses, device faults
#   racecheck  shared-memory hazards (CTA epoch broadcast, RMSNorm block reductions)
#   synccheck  barrier misuse (__syncthreads / __syncthreads_and on divergent paths)
# plus a short arfusion-stress run under memcheck (mixed algorithms back to back).
#
# Usage: bash dev/remote_gpu/sanitize_gpu.sh [LOG_DIR]          (default LOG_DIR: sanitize_logs)
#   BUILD_DIR=build        where arfusion_gpu_tests / arfusion-stress were built
#   ARF_TEST_DEVICES=0,1   ranks on distinct GPUs instead of virtual ranks on GPU 0 (harness.h)
#   ARF_SAN_MEMCHECK_FILTER / ARF_SAN_RACECHECK_FILTER / ARF_SAN_SYNCCHECK_FILTER override the
#   --gtest_filter of each tool (the defaults keep the whole script to minutes: the tools slow
#   kernels down 10-100x).
# Exit: 0 no sanitizer error and every test passed; 1 a sanitizer reported errors; 2 tests failed
# or timed out with no sanitizer error (see the note below); 77 skipped (no GPU, no build, or no
# compute-sanitizer), with the reason printed.
#
# Note: collective kernels spin until their peers' kernels run. If a tool serializes kernel
# launches, virtual ranks (and any multi-rank test) cannot meet: the bounded waits expire and those
# tests fail with arfTimeout, which this script reports as exit 2 ("tests failed, no sanitizer
# error"), not as a sanitizer finding. The world-1 and single-rank tests in each filter still run
# every kernel body under the tool.
set -uo pipefail
cd "$(dirname "$0")/../.."
logs=${1:-sanitize_logs}
build=${BUILD_DIR:-build}
tests=$build/arfusion_gpu_tests
stress=$build/arfusion-stress
mkdir -p "$logs"

skip() { echo "sanitize_gpu: SKIPPED: $*"; exit 77; }

[[ -x $tests ]] || skip "$tests not built (cmake --build $build --target arfusion_gpu_tests)"
"$tests" --gtest_filter='-*' >/dev/null 2>&1
[[ $? -eq 77 ]] && skip "no CUDA device visible"
sanitizer=$(command -v compute-sanitizer || true)
for candidate in "${CUDA_HOME:-/usr/local/cuda}/bin/compute-sanitizer" \
                 "${CUDA_HOME:-/usr/local/cuda}/compute-sanitizer/compute-sanitizer"; do
  [[ -z $sanitizer && -x $candidate ]] && sanitizer=$candidate
done
[[ -n $sanitizer ]] || skip "compute-sanitizer not found (CUDA toolkit's compute-sanitizer package)"

# Single-rank (world 1, bad calls) and small multi-rank cases of every algorithm and pattern; the
# widest rows (HugeRows: 1024-thread blocks, world 1 staging 192 KiB a CTA).
# Quantized patterns: every format x algorithm x level at world 1 and 2 (Quant/QuantMatrix), the
# FP8 edge values, and (memcheck) the programmatic-launch path at world 2.
memcheck_filter=${ARF_SAN_MEMCHECK_FILTER:-'Huge/HugeRows.*_ws1:Huge/HugeRows.*_ws2:*/Matrix.*/bf16_ws1_*:*/Matrix.*/bf16_ws2_*:*/Matrix.*/fp16_ws8_ResidualRmsNorm:Graph/GraphReplay.*/Auto_bf16_ws2:BadCalls.*:Quant/QuantMatrix.*/bf16_ws1:Quant/QuantMatrix.*/bf16_ws2:Quant/QuantEdge.*/bf16_ws2:Pdl/ProgrammaticLaunch.*/Auto_ws2'}
racecheck_filter=${ARF_SAN_RACECHECK_FILTER:-'Huge/HugeRows.*_ws1:*/Matrix.*/bf16_ws1_ResidualRmsNorm:*/Matrix.*/bf16_ws2_ResidualRmsNorm:Quant/QuantMatrix.*/bf16_ws1'}
synccheck_filter=${ARF_SAN_SYNCCHECK_FILTER:-'Huge/HugeRows.*_ws1:*/Matrix.*/bf16_ws1_*:*/Matrix.*/bf16_ws2_*:Quant/QuantMatrix.*/bf16_ws1'}

status=0
note() { echo "$*" | tee -a "$logs/summary.txt"; }
: > "$logs/summary.txt"
note "sanitize_gpu: $("$sanitizer" --version 2>/dev/null | tail -1); logs in $logs"

# run_tool NAME TOOL-ARGS... -- COMMAND...: one sanitizer run, classified from its log.
run_tool() {
  local name=$1; shift
  local tool_args=()
  while [[ $1 != -- ]]; do tool_args+=("$1"); shift; done
  shift
  local log=$logs/$name.log start=$SECONDS
  "$sanitizer" "${tool_args[@]}" --error-exitcode 99 --print-limit 200 --log-file "$log.tool" \
    "$@" > "$log" 2>&1
  local rc=$?
  local errors
  errors=$(sed -n 's/.*ERROR SUMMARY: \([0-9]*\) error.*/\1/p' "$log.tool" | tail -1)
  local verdict="clean"
  if [[ $rc -eq 99 || ${errors:-0} -gt 0 ]]; then
    verdict="SANITIZER ERRORS (${errors:-?})"; status=1
  elif [[ $rc -ne 0 ]]; then
    verdict="tests failed (exit $rc), no sanitizer error"; [[ $status -eq 0 ]] && status=2
  fi
  note "$(printf '%-18s %-45s %4ds  %s' "$name" "$verdict" $((SECONDS - start)) "$log")"
}

run_tool memcheck --tool memcheck -- "$tests" --gtest_filter="$memcheck_filter"
run_tool racecheck --tool racecheck --racecheck-report hazard -- "$tests" --gtest_filter="$racecheck_filter"
run_tool synccheck --tool synccheck -- "$tests" --gtest_filter="$synccheck_filter"
if [[ -x $stress ]]; then
  run_tool memcheck_stress --tool memcheck -- "$stress" --nranks 2 --calls 60 --max-tokens 96 \
    --max-hidden 4096 --skew-us 0 --progress 0 --timeout 60
fi
exit $status
