#!/usr/bin/env bash
# Nsight Compute profiles of the world-1 epilogue kernels at one shape, arfusion's and torch.compile's
# (Triton) side by side, for the kernel-performance work: where each spends its time (DRAM
# throughput, bytes in flight, stall reasons, occupancy). One report per kernel, plus its details
# page as text:
#   dev/profile/profile_world1.sh OUT_DIR [TOKENS] [HIDDEN]     (default 4096 tokens, hidden 8192, bf16)
# ARF_PROFILE_QUANT: also the quantized patterns named (e.g. "fp8_group,fp8_tensor"), both sides.
# ARF_NCU_SET: the ncu section set (default full). Clocks are left alone (--clock-control none: the
# machine's clocks are not ours to lock). Needs ./build/arfusion-bench, ncu and PyTorch.
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 2
out=${1:?usage: profile_world1.sh OUT_DIR [TOKENS] [HIDDEN]}
tokens=${2:-4096}
hidden=${3:-8192}
mkdir -p "$out"
export NCCL_NVLS_ENABLE=0
ncu_args=(--clock-control none --set "${ARF_NCU_SET:-full}" --launch-skip 3 -f)
bench=${ARF_BENCH:-build/arfusion-bench}

report() {  # name: the .ncu-rep to text
  ncu -i "$out/$1.ncu-rep" --page details > "$out/$1.txt" 2>&1
  echo "$1: $(grep -E "Duration|DRAM Throughput|Memory Throughput" "$out/$1.txt" | tr -s ' ' | head -3 | paste -sd';')"
}

# arfusion's world-1 kernel: the Lamport kernel instantiated for world 1 (streaming rows).
ncu "${ncu_args[@]}" -c 1 -k regex:oneshot_lamport_kernel -o "$out/arfusion_epilogue" \
  "$bench" --op epilogue --devices 0 --tokens "$tokens" --hidden "$hidden" -d bf16 -n 8 -w 2 -G 0 -c 0 \
  > "$out/arfusion_epilogue.log" 2>&1
report arfusion_epilogue
ncu "${ncu_args[@]}" -c 1 -k regex:triton -o "$out/torch_epilogue" \
  python3 dev/measure/torch_baseline.py --tmin "$tokens" --tmax "$tokens" --hidden "$hidden" -n 8 -G 1 \
  --repeats 1 --mode "${ARF_TORCH_MODE:-default}" > "$out/torch_epilogue.log" 2>&1
report torch_epilogue

IFS=, read -r -a patterns <<< "${ARF_PROFILE_QUANT:-}"
for q in "${patterns[@]}"; do
  # the one-kernel column (the bench times the 3- and 2-kernel chains first, other epilogue types);
  # torch's function may compile to two kernels (amax, then quantize): both are profiled
  ncu "${ncu_args[@]}" -c 1 --kernel-name-base demangled \
    -k regex:'oneshot_lamport_kernel.*ResidualRmsNormQuantEpilogue' -o "$out/arfusion_$q" \
    "$bench" --op quant --quant "$q" --devices 0 --tokens "$tokens" --hidden "$hidden" -d bf16 -n 8 -w 2 -G 0 -c 0 \
    > "$out/arfusion_$q.log" 2>&1
  report "arfusion_$q"
  ncu "${ncu_args[@]}" -c 2 -k regex:triton -o "$out/torch_$q" \
    python3 dev/measure/torch_quant_baseline.py --patterns "$q" --tmin "$tokens" --tmax "$tokens" --hidden "$hidden" \
    -n 8 -G 1 --repeats 1 --mode "${ARF_TORCH_MODE:-default}" > "$out/torch_$q.log" 2>&1
  report "torch_$q"
done
