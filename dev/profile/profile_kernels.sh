#!/usr/bin/env bash
# Where the time of the world-1 epilogue kernels goes, for the next optimisation (run on the GPU
# machine: it has ncu and cuobjdump; this one has neither). Writes to OUT_DIR:
#   res_usage.txt          registers, stack (spills) and shared memory of every kernel in libarfusion
#   sass_sizes.txt         code size of every kernel (instruction fetch matters at one token)
#   ncu_<case>.txt         Nsight Compute details (launch stats, occupancy, warp states, memory)
#   ncu_<case>_source.csv  per-SASS-instruction stall samples, when this ncu can print them
#   sass_world1_*.txt      SASS of the world-1 kernels profiled (hidden 8192: 2 vectors per thread)
# Cases: one token and 4096 tokens of residual_rmsnorm and of fp8 per-tensor / per-token /
# per-group at world 1, hidden 8192 bf16: the shapes of the world-1 targets (docs/performance.md).
# Usage: bash dev/profile/profile_kernels.sh [OUT_DIR]   (default: profile_out; needs ./build from
# dev/remote_gpu/pack_for_device.sh or a local build). Clocks are left alone (--clock-control none): the
# kernels are profiled at the clocks the benchmarks run at, not at ncu's locked base clock. Takes
# about two minutes. Everything ends up in OUT_DIR.tar.gz (the folder is removed): one archive to
# bring back.
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${1:-profile_out}
mkdir -p "$out"
lib=build/libarfusion.so
[[ -e $lib ]] || lib=build/libarfusion.a

if command -v cuobjdump > /dev/null; then
  cuobjdump -res-usage "$lib" 2>&1 | c++filt > "$out/res_usage.txt"
  # "Function name:" lines followed by the .text size come from -elf; keep it short.
  cuobjdump -elf "$lib" 2>/dev/null | awk '/\.text\./ && /PROGBITS/ {print}' | c++filt \
    > "$out/sass_sizes.txt"
  # One disassembly of the whole library, split by epilogue type.
  cuobjdump -sass "$lib" 2>/dev/null | c++filt | awk -v out="$out" '
    BEGIN { n = split("ResidualRmsNormEpilogue ResidualRmsNormQuantEpilogue", kinds, " ") }
    /Function :/ {
      file = ""
      for (i = 1; i <= n; ++i) {
        if (index($0, "oneshot_lamport_kernel<__nv_bfloat16, 1, arf::" kinds[i] "<__nv_bfloat16, 2") > 0)
          file = out "/sass_world1_" kinds[i] ".txt"
      }
    }
    file != "" { print > file }'
else
  echo "profile_kernels: no cuobjdump here" > "$out/res_usage.txt"
fi

command -v ncu > /dev/null || { echo "profile_kernels: no ncu here"; exit 0; }
bench=(./build/arfusion-bench --devices 0 --hidden 8192 -d bf16 -n 3 -w 1 -G 0 -c 0)
profile() {  # name, kernel regex, bench arguments...
  local name=$1 kernel=$2
  shift 2
  ncu --clock-control none --kernel-name-base demangled --kernel-name "regex:$kernel" \
    --launch-skip 2 --launch-count 1 \
    --set full --import-source yes -f -o "$out/ncu_$name" "${bench[@]}" "$@" > "$out/ncu_$name.log" 2>&1
  ncu -i "$out/ncu_$name.ncu-rep" --page details > "$out/ncu_$name.txt" 2>&1
  ncu -i "$out/ncu_$name.ncu-rep" --page source --csv --print-source sass \
    > "$out/ncu_${name}_source.csv" 2>/dev/null || rm -f "$out/ncu_${name}_source.csv"
  grep -E "Duration|Registers Per Thread|Achieved Occupancy|Memory Throughput|Local Memory" \
    "$out/ncu_$name.txt" | head -8 | sed "s/^/$name: /"
}
for t in 1 4096; do
  # The fused one-kernel path only (the quant op also times levels 2 and 3).
  profile "norm_t$t" "oneshot_lamport_kernel<.*ResidualRmsNormEpilogue<" --op epilogue --tokens "$t"
  profile "fp8_tensor_t$t" "oneshot_lamport_kernel<.*ResidualRmsNormQuantEpilogue<" --op quant \
    --quant fp8_tensor --tokens "$t"
  profile "fp8_token_t$t" "oneshot_lamport_kernel<.*ResidualRmsNormQuantEpilogue<" --op quant \
    --quant fp8_token --tokens "$t"
  profile "fp8_group_t$t" "oneshot_lamport_kernel<.*ResidualRmsNormQuantEpilogue<" --op quant \
    --quant fp8_group --tokens "$t"
done
rm -f "$out"/*.ncu-rep  # large; the text pages above hold what is needed
tar -czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")" && rm -rf "$out"
echo "profile_kernels: $out.tar.gz"
exit 0
