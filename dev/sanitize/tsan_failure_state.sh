#!/usr/bin/env bash
# ThreadSanitizer over the pieces arfCommGetAsyncError composes when a watchdog thread polls while
# calls run (tests/cpu/test_failure_state.cc: FailureState, the error-record reader, the local
# group's failure marks) and over the same-call logs (tests/cpu/test_call_refusal.cc). Only those
# sources are instrumented; the rest comes uninstrumented from ./build's libarfusion.a (build it
# first). A whole CPU-test build under -fsanitize=thread is ARF_SANITIZE=thread
# (cmake/sanitizers.cmake); this is the quick form: about 30 s, no GPU.
#   bash dev/sanitize/tsan_failure_state.sh        exit 0: no report, tests passed
set -euo pipefail
cd "$(dirname "$0")/../.."
cuda=${CUDA_HOME:-/usr/local/cuda}
bin=${TMPDIR:-/tmp}/arfusion_tsan_failure_state
[[ -f build/libarfusion.a ]] || { echo "build ./build first (libarfusion.a)"; exit 1; }
"${CXX:-g++}" -std=c++20 -O1 -g -fsanitize=thread -I src -I include -I tests -I "$cuda/include" \
  tests/cpu/test_failure_state.cc tests/cpu/test_call_refusal.cc src/core/failure_state.cc \
  src/transport/local.cc src/transport/call_signature.cc src/transport/agreement.cc \
  src/transport/shared_call_log.cc build/libarfusion.a -L "$cuda/lib64" -lcudart_static -ldl -lrt \
  -lgtest -lgtest_main -pthread -o "$bin"
TSAN_OPTIONS=halt_on_error=1 "$bin"
