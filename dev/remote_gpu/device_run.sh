#!/usr/bin/env bash
# One run on the GPU host: runs the named stages against a build made elsewhere
# (dev/remote_gpu/pack_for_device.sh; copy .devpack there and `tar -xJf .devpack/build.tar.xz` first).
# Logs and JSON go to $OUT/run (default ./device_out/run), packed into $OUT/results.tar.gz at the
# end, with short summaries copied to $OUT. dev/README.md says how a run is made and filed.
# Stages (default: env gpu bench world1 allreduce):
#   env           machine facts: date, commit, nvidia-smi, topology, nvcc version -> env.txt
#   gpu           ctest -L gpu: the GPU suite, short soaks, negative controls, ipc tests
#   bench         the README's default fused sweep (8 virtual ranks when one GPU is visible)
#   world1        world-1 residual + RMSNorm against torch.compile (dev/measure/bench_world1.sh)
#   allreduce     the plain all-reduce, 32 KiB..64 MiB
#   quant         each quantized pattern as 3 kernels, 2 kernels and 1 kernel; 8 virtual ranks, world 1
#   quant7168     the same at hidden 7168 (DeepSeek-V3's), 8 virtual ranks
#   world1_quant  world-1 norm + quantization against torch.compile (dev/measure/bench_world1_quant.sh)
#   profile       ncu and cuobjdump of the world-1 kernels (dev/profile/profile_kernels.sh)
#   stress        the soak at 8 virtual ranks, eager and with CUDA graphs (ARF_SOAK_SECONDS each, default 60)
#   soak          the long soak, one chunk per visible GPU (ARF_SOAK_CPA, ARF_SOAK_SEED)
#   negative      negative controls must be detected, the debug-stall soak must pass
#                 (dev/remote_gpu/negative_controls.sh)
#   multi         one GPU per rank: ctest, then per TP size 2/4/8 the fused sweep writing a tuned
#                 table, the sweep again with that table, the all-reduce, the sweep as processes
#   procs         the tools as one process per rank under arfusion-run (ipc transport)
# ARF_LIMIT_<stage>=SECONDS bounds one stage's commands (bounded() below).
# Usage: bash dev/remote_gpu/device_run.sh [stage...]
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-device_out}
mkdir -p "$out/run"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export ARF_GIT_COMMIT=${ARF_GIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
stages=("$@")
((${#stages[@]})) || stages=(env gpu bench world1 allreduce)
num_gpus=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')

# NCCL is loaded with dlopen (bench column): the device image ships it in the nvidia-nccl wheel.
if [[ -z ${ARF_NCCL_LIBRARY:-} ]]; then
  nccl_dir=$(python3 -c 'import nvidia.nccl, os; print(os.path.join(list(nvidia.nccl.__path__)[0], "lib"))' 2>/dev/null)
  [[ -n $nccl_dir && -e $nccl_dir/libnccl.so.2 ]] && export ARF_NCCL_LIBRARY=$nccl_dir/libnccl.so.2
fi

# ctest files hold the absolute build and source paths of the machine that configured them (a
# worktree's build names the worktree: its tests read scripts and data from there).
configured=$(sed -n 's/^# Build directory: //p' build/CTestTestfile.cmake 2>/dev/null)
configured_source=$(sed -n 's/^# Source directory: //p' build/CTestTestfile.cmake 2>/dev/null)
if [[ -n $configured_source && ! -e $configured_source ]]; then
  mkdir -p "$(dirname "$configured_source")" && ln -s "$PWD" "$configured_source"
fi
if [[ -n $configured && ! -e $configured ]]; then
  mkdir -p "$(dirname "$configured")" && ln -s "$PWD/build" "$configured"
fi

# A stage's commands may be bounded so the run fits a time limit: ARF_LIMIT_<stage>=SECONDS
# (e.g. ARF_LIMIT_gpu=300) stops that stage's commands after so many seconds (SIGINT, then KILL).
bounded() {
  local limit_var="ARF_LIMIT_$stage"
  if [[ -n ${!limit_var:-} ]]; then timeout --signal=INT --kill-after=15 "${!limit_var}" "$@"; else "$@"; fi
}

for stage in "${stages[@]}"; do
  echo "=== stage $stage ($(date -u +%H:%M:%S))"
  case $stage in
    env)
      { date -u; echo "commit $ARF_GIT_COMMIT"; nvidia-smi; nvidia-smi topo -m; nvcc --version 2>/dev/null | tail -1; } \
        > "$out/run/env.txt" 2>&1
      head -20 "$out/run/env.txt" ;;
    gpu)
      bounded ctest --test-dir "${configured:-build}" -L gpu --output-on-failure 2>&1 | tee "$out/run/ctest_gpu.log" | tail -15
      grep -E "PASSED|FAILED|tests passed" "$out/run/ctest_gpu.log" | tail -3 ;;
    bench)
      bounded ./build/arfusion-bench -J "$out/run/fused_default.json" 2>&1 | tee "$out/run/fused_default.txt" | tail -30 ;;
    world1)
      bounded bash dev/measure/bench_world1.sh "$out/run/world1" > "$out/run/world1.log" 2>&1
      tail -n 12 "$out"/run/world1/compare_world1_*.txt 2>/dev/null || tail -30 "$out/run/world1.log" ;;
    allreduce)
      bounded ./build/arfusion-bench --op allreduce -b 32K -e 64M -f 2 -G 1 -c 1 -J "$out/run/allreduce.json" 2>&1 \
        | tee "$out/run/allreduce.txt" | tail -25 ;;
    quant)
      # Per quantized pattern the fallback chain a caller would otherwise run (all-reduce, norm,
      # quantize as 3 kernels; 2; 1; 1 + bf16 output), at 8 virtual ranks and at world 1.
      bounded ./build/arfusion-bench --op quant -J "$out/run/quant.json" 2>&1 | tee "$out/run/quant.txt" | tail -30
      bounded ./build/arfusion-bench --op quant --nranks 1 -J "$out/run/quant_w1.json" 2>&1 \
        | tee "$out/run/quant_w1.txt" | tail -30 ;;
    quant7168)
      # The same at hidden 7168 (DeepSeek-V3's hidden size), 8 virtual ranks.
      bounded ./build/arfusion-bench --op quant --hidden 7168 -J "$out/run/quant_h7168.json" 2>&1 \
        | tee "$out/run/quant_h7168.txt" | tail -12 ;;
    world1_quant)
      # World-1 norm + quantization against torch.compile of the same function, hidden 8192 and 7168.
      bounded bash dev/measure/bench_world1_quant.sh "$out/run/world1_quant" > "$out/run/world1_quant.log" 2>&1
      tail -n 14 "$out"/run/world1_quant/compare_world1_quant_h*.txt 2>/dev/null || tail -30 "$out/run/world1_quant.log" ;;
    profile)
      # Where the time of the missed world-1 targets goes (ncu, cuobjdump): dev/profile/profile_kernels.sh.
      bounded bash dev/profile/profile_kernels.sh "$out/run/profile" 2>&1 | tail -30 ;;
    stress)
      # The soak (every algorithm, pattern and shape mixed, every output checked), eager and with
      # graphs (tools/stress/README.md).
      bounded ./build/arfusion-stress --nranks 8 --seconds "${ARF_SOAK_SECONDS:-60}" -J "$out/run/stress_8.json" 2>&1 \
        | tee "$out/run/stress_8.txt" | tail -15
      bounded ./build/arfusion-stress --nranks 8 --seconds "${ARF_SOAK_SECONDS:-60}" -G 8 --window 4 --max-tokens 512 \
        -J "$out/run/stress_graphs.json" 2>&1 | tee "$out/run/stress_graphs.txt" | tail -15 ;;
    soak)
      # The long soak (chunks add up to 10^6 checked calls per algorithm: dev/measure/soak_tally.py),
      # one chunk per visible GPU with distinct seeds, 8 virtual ranks, the volume mix
      # (tools/stress/README.md). ARF_SOAK_CPA calls per algorithm per GPU (default 170000),
      # ARF_SOAK_SEED the first seed (default 301).
      cpa=${ARF_SOAK_CPA:-170000}; seed0=${ARF_SOAK_SEED:-301}
      for ((g = 0; g < num_gpus; ++g)); do
        CUDA_VISIBLE_DEVICES=$g bounded ./build/arfusion-stress --nranks 8 --verify-calls \
          -a oneshot_lamport,oneshot_pull,twoshot,unfused --mix volume \
          --calls-per-algorithm "$cpa" --seed $((seed0 + g)) --progress 120 \
          -J "$out/run/stress_seed$((seed0 + g)).json" > "$out/run/stress_seed$((seed0 + g)).txt" 2>&1 &
      done
      wait
      tail -n 9 "$out"/run/stress_seed*.txt ;;
    negative)
      # Each negative control (a protocol step removed on purpose) must be DETECTED, so the soak is
      # known to see that class of bug (builds build-nc on the device unless shipped).
      # A shipped build configured with -DARF_BUILD_NEGATIVE_CONTROLS=ON is used as is.
      nc_env=()
      [[ -e build/arfusion-stress-relaxed_flags ]] && nc_env=(ARF_NC_BUILD=build)
      env "${nc_env[@]}" bash dev/remote_gpu/negative_controls.sh "$out/run/negative" 2>&1 \
        | tee "$out/run/negative.log" | tail -20 ;;
    multi)
      # Real ranks: one GPU per rank. Tests with ARF_TEST_DEVICES; per TP size: the sweep
      # with --tune-out (its summary checks the default policy), the same sweep with that table
      # (the 3% check), the all-reduce sweep, and the sweep again as processes under arfusion-run.
      devs=$(seq -s, 0 $((num_gpus - 1)))
      ARF_TEST_DEVICES=$devs bounded ctest --test-dir "${configured:-build}" -L gpu --output-on-failure 2>&1 \
        | tee "$out/run/ctest_gpu_multi.log" | tail -8
      algos=auto,oneshot_lamport,oneshot_pull,twoshot,unfused,nccl
      for n in 2 4 8; do
        ((n <= num_gpus)) || continue
        bounded ./build/arfusion-bench --nranks "$n" -a "$algos" -n 100 -w 20 --tune-out "$out/run/table_tp$n.json" \
          -J "$out/run/fused_tp$n.json" 2>&1 | tee "$out/run/fused_tp$n.txt" | grep "auto vs"
        ARF_TUNING_TABLE="$out/run/table_tp$n.json" bounded ./build/arfusion-bench --nranks "$n" -a "$algos" \
          -n 100 -w 20 --tune-out "$out/run/check_tp$n.json" -J "$out/run/fused_tp${n}_tuned.json" 2>&1 \
          | tee "$out/run/fused_tp${n}_tuned.txt" | grep "auto vs"
        bounded ./build/arfusion-bench --op allreduce --nranks "$n" -b 32K -e 64M -f 2 -G 1 -c 1 \
          -J "$out/run/allreduce_tp$n.json" 2>&1 | tee "$out/run/allreduce_tp$n.txt" | tail -8
        bounded ./build/arfusion-run -n "$n" --no-prefix -- ./build/arfusion-bench -a "$algos" \
          -J "$out/run/fused_tp${n}_procs.json" 2>&1 | tee "$out/run/fused_tp${n}_procs.txt" | tail -16
      done ;;
    procs)
      # One process per rank under arfusion-run (ipc transport): the soak, the fused sweep and
      # a quant sweep; ranks on GPUs r % visible (2 processes time-slicing GPU 0 on a 1-GPU machine).
      n=$((num_gpus > 1 ? num_gpus : 2))
      bounded ./build/arfusion-run -n "$n" --no-prefix -- ./build/arfusion-stress --calls "${ARF_PROCS_CALLS:-20000}" \
        --progress 30 --hash-dir "$out/run/stress_procs.hashes" -J "$out/run/stress_procs.json" 2>&1 \
        | tee "$out/run/stress_procs.txt" | grep -E "^#|^repeat|RESULT" | tail -12
      bounded ./build/arfusion-run -n "$n" --no-prefix -- ./build/arfusion-bench -a auto,oneshot_lamport,oneshot_pull,twoshot,unfused \
        -J "$out/run/fused_procs.json" 2>&1 | tee "$out/run/fused_procs.txt" | tail -16
      bounded ./build/arfusion-run -n "$n" --no-prefix -- ./build/arfusion-bench --op quant --quant fp8_token,fp8_group \
        --hidden 8192 -J "$out/run/quant_procs.json" 2>&1 | tee "$out/run/quant_procs.txt" | tail -12 ;;
    *) echo "unknown stage $stage" ;;
  esac
done
tar -czf "$out/results.tar.gz" -C "$out" run
for f in fused_default.txt allreduce.txt; do [[ -f $out/run/$f ]] && cp "$out/run/$f" "$out/$f"; done
for f in "$out"/run/world1/compare_world1_*.txt; do [[ -f $f ]] && cp "$f" "$out/"; done
[[ -f $out/run/ctest_gpu.log ]] && cp "$out/run/ctest_gpu.log" "$out/"
exit 0
