#!/usr/bin/env bash
# Acceptance runs of the shared-GPU protocol fix and of the API-4 surface on the GPU machine, one
# stage per purpose, against a build made elsewhere (dev/remote_gpu/pack_for_device.sh; configure with
# -DARF_SHARED=ON -DARF_BUILD_NEGATIVE_CONTROLS=ON). Logs and JSON land in $OUT (default
# ./acceptance_out), packed into $OUT/acceptance.tar.gz at the end.
#
#   bash dev/remote_gpu/gpu_acceptance.sh replay starved soak     # stages, in order
#
# Stages:
#   replay    the outside program's Lamport stall sequence (tests/data/lamport-stall-world2.csv),
#             replayed on the protocol without the gate (negative control: must stall) and on the
#             current one (must not), ARF_REPLAYS times each (default 5)
#   starved   the shared-device GPU tests (a mate behind a whole-SM kernel, foreign kernels behind
#             every call, the integrity check, API 4 options) on the current library, then the
#             starvation test on the negative-control library (expected to time out)
#   one_queue the foreign-kernel test with CUDA_DEVICE_MAX_CONNECTIONS=1 (every stream in one FIFO)
#   soak      the soak (arfusion-stress) at 2, 4 and 8 virtual ranks (ARF_SOAK_SECONDS each, default
#             30) and its negative control
#   coresident  the co-resident test mode (docs/protocol.md: no gate, no return wait, grids that
#             co-reside, so a peer runs a call ahead) and the shared-GPU negative controls, each
#             alone; parts ARF_CORES_PARTS (default "soak mutants controls one_queue"):
#             soak: the soak in the mode at ARF_CORES_WORLDS (default "2 4 8"), the four
#               forced algorithms, ARF_CORES_SECONDS each (default 150), seeds from ARF_SOAK_SEED:
#               0 wrong, 0 timeouts (stress_coresident_N_seedS.json; dev/measure/soak_tally.py pools
#               them toward 10^6 calls per algorithm: one call of ARF_CORES_PARTS=soak with
#               ARF_CORES_SECONDS=170 fits 10 minutes; repeat with new seeds);
#             mutants: no_end_barrier (oneshot_pull) and two_lamport_buffers (oneshot_lamport)
#               must be caught in the mode at 2, 4 and 8 ranks, and (for the record) the same 30 s
#               in the normal mode, where the gate is expected to hide them;
#             controls: no_shared_device_gate caught by the default soak (starvation),
#               no_return_wait by the soak in one hardware queue (FIFO order);
#             one_queue: CUDA_DEVICE_MAX_CONNECTIONS=1, 2/4/8 ranks, 1-4-token calls each
#               followed at once by the soak's readers, 8 calls in flight, 0-300 us host skew, on
#               the release library (must pass), without the return wait (gate only: must be
#               caught) and without the gate (return wait only: expected to pass); then the GPU
#               test ForeignKernelsBehindEveryCallNeverBlockAPeer in one queue against the three.
#             Each line says ok or UNEXPECTED; the stage ends with the count of UNEXPECTED
#   volume    soak volume toward the target (>= 10^6 calls per algorithm): the soak with
#             verify_calls on the four forced algorithms, ARF_VOLUME_SECONDS (default 120) at each of
#             ARF_VOLUME_WORLDS (default "2 4 8"), one soak per GPU at once (ARF_VOLUME_GPUS, default
#             all visible), seeds from ARF_SOAK_SEED (default: the time, so different runs draw
#             different sequences); with ARF_VOLUME_IPC_CALLS > 0 also that many calls
#             as 2 processes over ipc (ARF_VOLUME_MPS=1: under a private MPS daemon, ~8x the calls/s
#             of time-slicing); ARF_VOLUME_SECONDS_N overrides the seconds of world N; token mix
#             ARF_VOLUME_MIX (default volume: fewer bytes per call, the same kinds of call; engine:
#             the soak's default); ARF_VOLUME_REFERENCE (--reference, default rotate);
#             ARF_VOLUME_ALGOS (-a, name[:weight] list; default the four, equal weights;
#             ARF_VOLUME_ALGOS_N for world N); the
#             worlds one after another (never two communicators' collectives at once on one GPU);
#             dev/measure/soak_tally.py pools the JSONs
#   soak_factors  the soak at 8 virtual ranks, ARF_FACTOR_SECONDS (default 10) each, as
#             configured and with one factor changed (token mix, skew, calls in flight, foreign-kernel size,
#             capacity, hidden, reference check, one pattern or algorithm only): calls/s of each,
#             to find where its time goes (factor_*, not counted as volume)
#   reference the soak's verification split (--reference): at 8 and 2 virtual ranks, the same
#             seed for 12 s with every rank recomputing the expected outputs, with one rank per
#             call (rotate) and with the rows spread over the ranks (split; the others compared
#             by hash): calls/s of each; then two negative-control libraries under rotate and
#             split (ARF_REFERENCE_MODES) must still be caught (ARF_REFERENCE_RATES=0: only those)
#   gate_cost the plain all-reduce at 2, 4, 8 virtual ranks, 16 KiB-1 MiB, with and without the
#             shared-device gate (its negative-control library in place of libarfusion.so), alternating
#             (gate_cost_allreduce_N_{release,no_gate}.ROUND.*; the 2e69952 run named them gate_cost_N_LIB.ROUND)
#   candidate libraries built from other commits, same ABI, each loaded in place of ./build's
#             through LD_LIBRARY_PATH: ARF_CANDIDATES="NAME=DIR ..." (DIR holds NAME's libarfusion.so),
#             against ARF_CANDIDATE_BASE (a DIR the same way, default ./build's library; with
#             candidates built as arfusion_diag, give main's arfusion_diag here: same kernel set).
#             The plain all-reduce (16 KiB-16 MiB) and the fused sweep (hidden 8192, 1-2048 tokens;
#             ARF_CANDIDATE_OPS, ARF_CANDIDATE_SWEEP, ARF_CANDIDATE_WORLDS for others)
#             at 2, 4, 8 virtual ranks, base, an A/A copy of base (ARF_CANDIDATE_AA, default 1) and
#             every candidate in turn, 2 rounds (-n 100 -G 3 -R 3), tabulated by dev/measure/ab_summary.py
#             (log/ab_summary.txt: a cell counts only beyond the A/A copy's difference);
#             then, with ARF_CANDIDATE_TESTS=1 (full libraries only), each candidate's GPU suite and
#             soak at 2 and 8 virtual ranks
#   world1_candidate  the same libraries (ARF_CANDIDATES, ARF_CANDIDATE_BASE, the A/A copy) at world 1,
#             where the streaming kernels run: the residual + RMSNorm epilogue (1-16384 tokens) and
#             the FP8 epilogues (ARF_W1_QUANT, default fp8_tensor,fp8_token,fp8_group; 1-4096 tokens;
#             row-major fp32 scales) at hidden ARF_W1_HIDDENS (default 8192), bf16, -R 3, 2 rounds
#             alternating, tabulated by dev/measure/ab_summary.py (log/ab_summary_world1.txt). Full
#             libraries only: arfusion_diag lacks the quantized kernels
#   policy    what auto should pick where ranks share a GPU: the plain all-reduce (16 KiB-64 MiB) and
#             the fused sweep (hidden 8192, 1-2048 tokens) at 2, 4, 8 virtual ranks with every
#             algorithm forced and auto (-n 100 -G 3 -R 3)
#   mps       probe: the soak as 2 processes on one GPU over ipc (ARF_MPS_CALLS, default 2000) without and
#             then with an MPS control daemon of this job's own (private pipe/log directories, stopped at
#             the end; no device setting is changed): without MPS the processes' contexts are time-sliced
#             and each collective waits for a slice (~4 ms); whether ipc works and what it gains under MPS
#   zero_copy the input buffer (arfCommGetInputBuffer): its GPU tests, then the plain all-reduce and
#             the fused sweep at 2, 4 and 8 virtual ranks with the inputs copied in and with them in
#             the input buffers, alternating in the same run (-n 100 -G 3 -R 3; oneshot_pull, which
#             the buffer spares its copy-in, and auto; decode to prefill sizes)
#   contract  the C API's contract on the GPU: tests/gpu test_api_contract.cc (a watchdog thread
#             polling; 100 calls cycling lamport/pull/twoshot/unfused over tokens {1,4,1023,264,2}
#             and hidden {4096,128,16384} with every rank's counters started 50 calls short of 2^32
#             and verify_calls on, 0 errors expected; ranks with different verify_calls; a rank
#             alone on its GPU runs no gate; max_ctas), test_refusal.cc (a refusal on one rank: the
#             mates' waits, printed "refusal ..."; target well under a second), the mismatch and
#             bad-call tests; tests/ipc test_ipc_contract.cc (the refusal across processes, destroy
#             with an nccl call whose peer never joins); the soak with its counters started
#             ARF_CONTRACT_WRAP (default 1000) calls short of the wrap, in the normal and in the
#             co-resident test mode (a peer a call ahead across the wrap); then the cost of max_ctas on
#             the fused call: arfusion-bench unbounded and with ARF_CONTRACT_MAX_CTAS (default
#             "64 16") at ARF_CONTRACT_WORLDS (default "2 4 8") ranks, alternating, 2 rounds
#             (log/max_ctas_fused_N_BOUND.ROUND.*)
#   ctest     ctest -L gpu -j ARF_CTEST_JOBS (default 4: the GPU tests' shards and the Python tests side
#             by side; ipc_tests alone, RUN_SERIAL) (ARF_CTEST_INCLUDE / ARF_CTEST_EXCLUDE: regexes of
#             tests to run / leave out)
#   python    the torch integration: the package installed (python/tests/install_package.sh into
#             $OUT/pyinstall, with ./build's library), then the compile-pass graph dump,
#             python/tests/run_gpu_tests.sh (ARF_PYTHON_ARGS, e.g. "--worlds 2,4,8"), the FP8 scale
#             probe and the op-overhead bench against it
#   hf_models the compile pass on the Hugging Face models with a real communicator
#             (python/tests/run_hf_models_gpu.sh: the package installed into $OUT/pyinstall, then
#             python/tests/gpu/hf_models_gpu.py, 2 ranks on one GPU, eager / compiled without /
#             with the pass; needs transformers), then its negative controls (exit 0 = every fault
#             caught); hf_models.json / hf_models_controls.json
#   e2e       the end-to-end decoder: bench/e2e/run.sh ${ARF_E2E_ARGS:---quick} (results under bench/results);
#             ARF_E2E_MPS=1: its rank processes under a private MPS daemon (run at once, not time-sliced)
#   perf      world-1 epilogues against torch.compile (bench_world1.sh, bench_world1_quant.sh)
#   build     configure and build ./build here (a snapshot from dev/remote_gpu/snapshot_for_device.sh)
set -uo pipefail
cd "$(dirname "$0")/../.."
out=${OUT:-acceptance_out}
mkdir -p "$out/log"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
# the commit the results are stamped with: a snapshot's COMMIT file, else git
[[ -z ${ARF_GIT_COMMIT:-} && -f COMMIT ]] && ARF_GIT_COMMIT=$(cat COMMIT)
export ARF_GIT_COMMIT=${ARF_GIT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
export ARFUSION_LIBRARY=$PWD/build/libarfusion.so
# The Python package's install (the python stage, bench/e2e/run.sh; python/tests/install_package.sh)
# reuses ./build where it was configured here (the build stage), else builds in build-python/
if [[ -f build/CMakeCache.txt && -z ${ARFUSION_BUILD_DIR:-} ]]; then export ARFUSION_BUILD_DIR=$PWD/build; fi
# ctest files name the configuring machine's build directory.
configured=$(sed -n 's/^# Build directory: //p' build/CTestTestfile.cmake 2>/dev/null)
if [[ -n $configured && ! -e $configured ]]; then
  mkdir -p "$(dirname "$configured")" && ln -s "$PWD/build" "$configured"
fi
csv=tests/data/lamport-stall-world2.csv
replay_args=(--replay "$csv" --nranks 2 --max-tokens 2048 --max-hidden 4096 --skew-us 0
             --host-skew-us 200 --timeout 2 --progress 0)

# The A/B stages' bench sweeps: the plain all-reduce, and fused calls from decode to prefill.
sweep_of() {
  if [[ $1 == allreduce ]]; then echo "-b 16K -e 16M -f 4"; else echo "--tokens 1,8,32,128,512,2048 --hidden 8192"; fi
}
# ab_rounds PREFIX "OPS" ALGOS [SWEEP...]: the libraries of names[]/dirs[] (dir: a directory whose
# libarfusion.so replaces ./build's through LD_LIBRARY_PATH, since the binaries' RUNPATH yields to
# it; empty: ./build's) in turn, 2 rounds, each op at AB_WORLDS (default 2, 4 and 8) virtual ranks
# (-n 100 -G 3 -R 3); $out/log/PREFIX_OP_N_NAME.ROUND.{json,txt}. SWEEP: the bench's size
# arguments, default sweep_of.
ab_rounds() {
  local prefix=$1 ops=$2 algos=$3 n op round i j
  shift 3
  for n in ${AB_WORLDS:-2 4 8}; do
    for op in $ops; do
      local sweep=("$@")
      ((${#sweep[@]})) || read -ra sweep <<< "$(sweep_of "$op")"
      for round in 1 2; do
        for ((i = 0; i < ${#names[@]}; i++)); do
          j="$out/log/${prefix}_${op}_${n}_${names[$i]}.$round"
          LD_LIBRARY_PATH=${dirs[$i]}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} timeout 200 ./build/arfusion-bench \
            --op "$op" --nranks "$n" -a "$algos" "${sweep[@]}" -n 100 -G 3 -R 3 -J "$j.json" > "$j.txt" 2>&1
          echo "$prefix $op $n ranks ${names[$i]} (round $round): exit $?"
        done
      done
    done
  done
}
# The libraries of a candidate A/B into names[] / dirs[]: base (ARF_CANDIDATE_BASE, default
# ./build's), an A/A control (ARF_CANDIDATE_AA=0: none) — the base library again, copied to a
# directory of its own, so the table shows what a second library file with the same code moves by
# itself (two libraries with byte-identical oneshot_pull kernels once differed by 2.5 µs) — and
# each of ARF_CANDIDATES="NAME=DIR ...". Fails (the stage is skipped) without candidates.
candidate_libraries() {
  [[ -n ${ARF_CANDIDATES:-} ]] || { echo "$stage: set ARF_CANDIDATES=\"NAME=DIR ...\""; return 1; }
  names=(base); dirs=("${ARF_CANDIDATE_BASE:-}")
  if [[ ${ARF_CANDIDATE_AA:-1} == 1 ]]; then
    aa=$out/aa_base_copy; mkdir -p "$aa"
    cp "${ARF_CANDIDATE_BASE:-./build}/libarfusion.so" "$aa/" && { names+=(base_copy); dirs+=("$aa"); }
  fi
  local c
  for c in $ARF_CANDIDATES; do names+=("${c%%=*}"); dirs+=("${c#*=}"); done
}
# Prefix of a command run under a private MPS daemon (tests/gpu/with_private_mps.sh: fresh pipe
# and log directories, no device setting changed, stopped when the command ends; exit 77 when MPS
# is unavailable), its logs kept in $out/log/mps_logs.
under_mps=(bash tests/gpu/with_private_mps.sh --logs "$out/log/mps_logs" --)

for stage in "$@"; do
  echo "=== $stage $(date -u +%H:%M:%S)"
  case $stage in
    replay)
      n=${ARF_REPLAYS:-5}
      ./build/arfusion-stress-no_shared_device_gate "${replay_args[@]}" --repeat "$n" \
        -J "$out/log/replay_no_gate.json" > "$out/log/replay_no_gate.txt" 2>&1
      echo "no gate: exit $?"; grep -iE "repeat|stall|timeout|lost" "$out/log/replay_no_gate.txt" | tail -12
      ./build/arfusion-stress "${replay_args[@]}" --repeat "$n" -J "$out/log/replay_gate.json" \
        > "$out/log/replay_gate.txt" 2>&1
      echo "gate: exit $?"; tail -6 "$out/log/replay_gate.txt" ;;
    starved)
      ./build/arfusion_gpu_tests --gtest_filter='SharedDevice*:ApiV4*:PlanShape*:TwoCommunicators*:Bounded*:CallMismatch*' \
        > "$out/log/shared_device_tests.txt" 2>&1
      echo "gpu tests (shared device, api4, timeouts): exit $?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran" "$out/log/shared_device_tests.txt" | tail -20
      if [[ -x build/arfusion_gpu_tests_no_shared_device_gate ]]; then
        timeout 120 ./build/arfusion_gpu_tests_no_shared_device_gate --gtest_filter='SharedDevice/StarvedMate*' \
          > "$out/log/starved_no_gate.txt" 2>&1
        echo "starved mate without the gate: exit $? (non-zero expected)"; grep -E "timeout|OK \]|FAILED \]" "$out/log/starved_no_gate.txt" | head -8
      fi ;;
    one_queue)
      CUDA_DEVICE_MAX_CONNECTIONS=1 ./build/arfusion_gpu_tests \
        --gtest_filter='SharedDevice.ForeignKernels*:SharedDevice/StarvedMate*' > "$out/log/one_queue.txt" 2>&1
      echo "one hardware queue: exit $?"; grep -E "OK \]|FAILED \]" "$out/log/one_queue.txt" | head -10 ;;
    soak)
      s=${ARF_SOAK_SECONDS:-30}
      for n in 2 4 8; do
        ./build/arfusion-stress --nranks "$n" --seconds "$s" --progress 0 --verify-calls \
          -J "$out/log/stress_$n.json" > "$out/log/stress_$n.txt" 2>&1
        echo "soak $n ranks: exit $?"; tail -4 "$out/log/stress_$n.txt"
      done
      ./build/arfusion-stress-no_shared_device_gate --expect-failure --nranks 2 \
        --patterns allreduce,flat,residual_rmsnorm --seconds "${ARF_SOAK_NC_SECONDS:-60}" --timeout 2 --progress 0 \
        -J "$out/log/stress_no_gate.json" > "$out/log/stress_no_gate.txt" 2>&1
      echo "soak without the gate (expect-failure): exit $? (0 = failure detected)"; tail -4 "$out/log/stress_no_gate.txt" ;;
    coresident)
      parts=${ARF_CORES_PARTS:-soak mutants controls one_queue}
      seed=${ARF_SOAK_SEED:-$(date +%s)}
      unexpected=0
      # cores_run NAME WANT TIMEOUT CMD...: runs CMD (log $out/log/coresident_NAME.txt), says whether
      # its exit is WANT ("info": only reported).
      cores_run() {
        local name=$1 want=$2 limit=$3 rc verdict
        shift 3
        timeout "$limit" "$@" > "$out/log/coresident_$name.txt" 2>&1
        rc=$?
        verdict=ok
        if [[ $want == info ]]; then verdict=info
        elif [[ $rc != "$want" ]]; then verdict=UNEXPECTED; unexpected=$((unexpected + 1)); fi
        echo "coresident $name: exit $rc (want $want): $verdict"
        grep -E "^repeat|RESULT|timeout:|integrity|calls/s" "$out/log/coresident_$name.txt" | tail -3 | sed 's/^/    /'
      }
      narrow=(--patterns allreduce,flat,residual_rmsnorm)  # the variants' kernel subset
      if [[ " $parts " == *" soak "* ]]; then
        for n in ${ARF_CORES_WORLDS:-2 4 8}; do
          s=$((seed + n)); j="stress_coresident_${n}_seed$s"
          secs=${ARF_CORES_SECONDS:-150}
          cores_run "soak_$n" 0 $((secs + 120)) ./build/arfusion-stress --co-resident --nranks "$n" \
            --seconds "$secs" --progress 0 --verify-calls -a oneshot_lamport,oneshot_pull,twoshot,unfused \
            --seed "$s" -J "$out/log/$j.json"
          cp "$out/log/coresident_soak_$n.txt" "$out/log/$j.txt"
        done
      fi
      if [[ " $parts " == *" mutants "* ]]; then
        for v in no_end_barrier:oneshot_pull two_lamport_buffers:oneshot_lamport; do
          a=${v#*:}; v=${v%%:*}
          for n in 2 4 8; do
            cores_run "${v}_$n" 0 150 "./build/arfusion-stress-$v" --co-resident --expect-failure \
              --nranks "$n" -a "$a" "${narrow[@]}" --seconds 60 --timeout 2 --progress 0 \
              -J "$out/log/coresident_${v}_$n.json"
          done
          # The normal mode for the record: exit 1 (clean) says the gate hid the mutant there.
          cores_run "${v}_normal_mode" info 120 "./build/arfusion-stress-$v" --expect-failure \
            --nranks 4 -a "$a" "${narrow[@]}" --seconds 30 --timeout 2 --progress 0 \
            -J "$out/log/coresident_${v}_normal_mode.json"
        done
      fi
      one_queue=(--connections 1 --max-tokens 4 --in-flight 8 --skew-us 0 --host-skew-us 300
                 --foreign-block 256 --foreign-smem-kb 0 "${narrow[@]}" --timeout 2 --progress 0)
      if [[ " $parts " == *" controls "* ]]; then
        cores_run no_gate_starvation 0 150 ./build/arfusion-stress-no_shared_device_gate --expect-failure \
          --nranks 2 "${narrow[@]}" --seconds 60 --timeout 2 --progress 0 -J "$out/log/coresident_no_gate_starvation.json"
        cores_run no_return_wait_fifo 0 150 ./build/arfusion-stress-no_return_wait --expect-failure \
          --nranks 4 "${one_queue[@]}" --seconds 60 -J "$out/log/coresident_no_return_wait_fifo.json"
      fi
      if [[ " $parts " == *" one_queue "* ]]; then
        for n in 2 4 8; do
          cores_run "one_queue_release_$n" 0 120 ./build/arfusion-stress --nranks "$n" "${one_queue[@]}" \
            --seconds 30 -J "$out/log/coresident_one_queue_release_$n.json"
          cores_run "one_queue_gate_only_$n" 0 120 ./build/arfusion-stress-no_return_wait --expect-failure \
            --nranks "$n" "${one_queue[@]}" --seconds 30 -J "$out/log/coresident_one_queue_gate_only_$n.json"
          cores_run "one_queue_no_gate_$n" 0 120 ./build/arfusion-stress-no_shared_device_gate \
            --nranks "$n" "${one_queue[@]}" --seconds 30 -J "$out/log/coresident_one_queue_no_gate_$n.json"
        done
        filter=--gtest_filter=SharedDevice.ForeignKernels*
        CUDA_DEVICE_MAX_CONNECTIONS=1 cores_run gtest_one_queue_release 0 400 ./build/arfusion_gpu_tests "$filter"
        CUDA_DEVICE_MAX_CONNECTIONS=1 cores_run gtest_one_queue_gate_only 1 400 ./build/arfusion_gpu_tests_no_return_wait "$filter"
        grep -m1 -E "timeout: rank [0-9]+ waited" "$out/log/coresident_gtest_one_queue_gate_only.txt" | sed 's/^/    caught by: /'
        CUDA_DEVICE_MAX_CONNECTIONS=1 cores_run gtest_one_queue_no_gate info 400 ./build/arfusion_gpu_tests_no_shared_device_gate "$filter"
      fi
      echo "coresident: $unexpected UNEXPECTED" ;;
    volume)
      # One soak per visible GPU at a time, each on its own GPU with its own seed (virtual ranks
      # stay on one GPU): a multi-GPU machine multiplies the volume; soak_tally.py pools the files.
      seed=${ARF_SOAK_SEED:-$(date +%s)}
      gpus=${ARF_VOLUME_GPUS:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
      [[ $gpus -ge 1 ]] || gpus=1
      mix=${ARF_VOLUME_MIX:-volume}
      ref=${ARF_VOLUME_REFERENCE:-rotate}  # who recomputes the expected outputs (--reference)
      # The algorithms drawn, name[:weight] (arfusion-stress -a): unfused also runs the forced fused calls
      # that fall back, so a weight below the others' evens the calls per algorithm.
      algos=${ARF_VOLUME_ALGOS:-oneshot_lamport,oneshot_pull,twoshot,unfused}
      # The worlds run one after another: two worlds' soaks at once on one GPU (tried under one
      # MPS daemon) are two communicators with collectives in flight on the same SMs, which the
      # header forbids; on the H200 the 4- and 8-rank worlds then stalled within 30 s.
      worlds=${ARF_VOLUME_WORLDS-2 4 8}  # set and empty: none
      runs=()  # pid:world:gpu of the soaks not yet waited for
      for n in $worlds; do
        per_world=ARF_VOLUME_SECONDS_$n per_world_algos=ARF_VOLUME_ALGOS_$n
        for ((g = 0; g < gpus; g++)); do
          s=$((seed + g + 100 * n)); j="$out/log/stress_volume_${n}_seed$s"
          CUDA_VISIBLE_DEVICES=$g ./build/arfusion-stress --nranks "$n" \
            --seconds "${!per_world:-${ARF_VOLUME_SECONDS:-120}}" --mix "$mix" --reference "$ref" \
            --progress 0 --verify-calls -a "${!per_world_algos:-$algos}" --seed "$s" \
            -J "$j.json" > "$j.txt" 2>&1 &
          runs+=("$!:$n:$g:$s")
        done
        for r in "${runs[@]}"; do
          IFS=: read -r pid rn rg rs <<< "$r"
          wait "$pid"; echo "volume $rn ranks, GPU $rg (seed $rs): exit $?"
          tail -2 "$out/log/stress_volume_${rn}_seed$rs.txt"
        done
        runs=()
      done
      # Two processes on one GPU over the ipc transport (a calls budget: processes stop together),
      # time-sliced, or with ARF_VOLUME_MPS=1 under a private MPS daemon (their kernels at once).
      if [[ ${ARF_VOLUME_IPC_CALLS:-0} -gt 0 ]]; then
        j="$out/log/stress_volume_ipc2_seed$seed"; mps=; prefix=()
        if [[ ${ARF_VOLUME_MPS:-0} == 1 ]]; then
          j="$out/log/stress_volume_ipc2_mps_seed$seed"; mps=" under MPS"; prefix=("${under_mps[@]}")
        fi
        timeout "${ARF_VOLUME_IPC_TIMEOUT:-900}" "${prefix[@]}" ./build/arfusion-run --timeout "${ARF_VOLUME_IPC_TIMEOUT:-900}" -n 2 -- \
          ./build/arfusion-stress --calls "$ARF_VOLUME_IPC_CALLS" --mix "$mix" --reference "$ref" --progress 0 --verify-calls \
          -a "$algos" --seed "$seed" --hash-dir "$j.hashes" -J "$j.json" \
          > "$j.txt" 2>&1
        echo "volume ipc 2 processes$mps (seed $seed): exit $?"; grep -E "SKIPPED|calls/s|RESULT" "$j.txt" | tail -3
      fi ;;
    soak_factors)
      # Where the soak's device time goes at 8 virtual ranks (the world that bounds the
      # volume target): the same seed for ARF_FACTOR_SECONDS each, as configured and with one thing
      # changed or left out. Files are factor_* (not stress_*): soak_tally.py does not count them.
      every=oneshot_lamport,oneshot_pull,twoshot,unfused
      for v in "default:$every:" "volume_mix:$every:--mix volume" "skew0:$every:--skew-us 0" "in_flight2:$every:--in-flight 2" \
               "light_foreign:$every:--foreign-block 256 --foreign-smem-kb 0" \
               "capacity256:$every:--max-tokens 256" "hidden4096:$every:--hiddens 4096" \
               "reference_all:$every:--reference all" "only_allreduce:$every:--patterns allreduce" \
               "only_norm:$every:--patterns residual_rmsnorm" "only_fp8_group:$every:--patterns fp8_group" \
               "only_nvfp4:$every:--patterns nvfp4" "only_twoshot:twoshot:" "only_pull:oneshot_pull:"; do
        IFS=: read -r name algos rest <<< "$v"; read -ra extra <<< "$rest"
        j="$out/log/factor_8_$name"
        timeout 60 ./build/arfusion-stress --nranks 8 --seconds "${ARF_FACTOR_SECONDS:-10}" --progress 0 \
          --verify-calls -a "$algos" --seed 11 "${extra[@]}" -J "$j.json" > "$j.txt" 2>&1
        echo "factor $name: exit $?: $(grep -m1 'calls/s' "$j.txt")"
      done ;;
    reference)
      # ARF_REFERENCE_RATES=0: the negative controls only
      [[ ${ARF_REFERENCE_RATES:-1} == 0 ]] || for n in 8 2; do
        for ref in all rotate split; do
          timeout 60 ./build/arfusion-stress --nranks "$n" --seconds 12 --progress 0 --verify-calls \
            --reference "$ref" --seed 7 -J "$out/log/reference_${n}_$ref.json" > "$out/log/reference_${n}_$ref.txt" 2>&1
          echo "soak $n ranks, reference $ref: exit $?: $(grep 'calls/s' "$out/log/reference_${n}_$ref.txt")"
        done
      done
      # The diagnostic libraries carry the unquantized bf16 kernels only; each control forces the
      # algorithm whose rule it breaks.
      for ref in ${ARF_REFERENCE_MODES:-rotate split}; do
        for v in no_end_barrier:oneshot_pull no_lamport_clear:oneshot_lamport; do
          a=${v#*:}; v=${v%%:*}; j="$out/log/reference_nc_${v}_$ref"
          mode=(); [[ $v == no_end_barrier ]] && mode=(--co-resident)  # on one GPU the gate hides it otherwise
          timeout 90 "./build/arfusion-stress-$v" --expect-failure --nranks 4 --seconds 20 --timeout 2 \
            "${mode[@]}" --patterns allreduce,flat,residual_rmsnorm -a "$a" --reference "$ref" --progress 0 \
            -J "$j.json" > "$j.txt" 2>&1
          echo "negative control $v under $ref: exit $? (0 = caught)"; grep -E "^repeat|cross-rank" "$j.txt" | tail -3
          # Caught by the check (wrong elements, cross-rank differences) or only by an expired wait:
          python3 -c 'import json,sys; r=json.load(open(sys.argv[1]))["repeats"][0]; print("  wrong elements", r["wrong_elements"], "before the first lost call", r["wrong_before_first_lost_call"], "cross-rank", r["cross_rank"])' \
            "$j.json" 2>/dev/null
        done
      done ;;
    gate_cost)
      # What the shared-device gate costs ranks sharing a GPU: the plain all-reduce with the
      # release library and with the negative-control library that lacks the gate (the return
      # wait kept; until the controls were split it lacked both), alternating.
      # The bench runs no foreign kernels, so the missing gate cannot starve a mate here.
      nogate=$(mktemp -d); cp build/libarfusion_nc_no_shared_device_gate.so "$nogate/libarfusion.so"
      names=(release no_gate); dirs=("" "$nogate")
      ab_rounds gate_cost allreduce oneshot_lamport,oneshot_pull,twoshot,auto -b 16K -e 1M -f 4 ;;
    candidate)
      candidate_libraries || continue
      # ARF_CANDIDATE_OPS / _SWEEP / _WORLDS: another sweep, e.g. OPS=fused
      # SWEEP="--tokens 1,8,64,512,2048 --hidden 16384" WORLDS="1 2 4 8" for wide rows
      read -ra csweep <<< "${ARF_CANDIDATE_SWEEP:-}"
      AB_WORLDS=${ARF_CANDIDATE_WORLDS:-2 4 8} ab_rounds ab "${ARF_CANDIDATE_OPS:-allreduce fused}" \
        oneshot_lamport,oneshot_pull,twoshot,auto "${csweep[@]}"
      python3 dev/measure/ab_summary.py "$out/log" > "$out/log/ab_summary.txt" 2>&1
      echo "ab summary: exit $?"; grep -E "^[A-Za-z0-9_.-]+: \{" "$out/log/ab_summary.txt"
      [[ ${ARF_CANDIDATE_TESTS:-0} == 1 ]] || continue
      for ((i = 1; i < ${#names[@]}; i++)); do
        name=${names[$i]}; lp=${dirs[$i]}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
        [[ $name == base_copy ]] && continue  # the base's code: nothing new to test
        LD_LIBRARY_PATH=$lp timeout 400 ./build/arfusion_gpu_tests > "$out/log/${name}_gpu_tests.txt" 2>&1
        echo "$name gpu tests: exit $?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran" "$out/log/${name}_gpu_tests.txt" | tail -12
        for n in 2 8; do
          LD_LIBRARY_PATH=$lp timeout 60 ./build/arfusion-stress --nranks "$n" --seconds 20 --progress 0 \
            --verify-calls -J "$out/log/${name}_stress_$n.json" > "$out/log/${name}_stress_$n.txt" 2>&1
          echo "$name soak $n ranks: exit $?"; tail -2 "$out/log/${name}_stress_$n.txt"
        done
      done ;;
    world1_candidate)
      candidate_libraries || continue
      for hidden in ${ARF_W1_HIDDENS:-8192}; do
        for round in 1 2; do
          for ((i = 0; i < ${#names[@]}; i++)); do
            lp=${dirs[$i]}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
            j="$out/log/ab_epilogue_1_${names[$i]}_h$hidden.$round"
            LD_LIBRARY_PATH=$lp timeout 200 ./build/arfusion-bench --op epilogue --devices 0 --tmin 1 --tmax 16384 \
              --hidden "$hidden" -d bf16 -n 100 -w 10 -G 10 -R 3 -c 1 -J "$j.json" > "$j.txt" 2>&1
            echo "world 1 epilogue h$hidden ${names[$i]} (round $round): exit $?"
            j="$out/log/ab_quant_1_${names[$i]}_h$hidden.$round"
            LD_LIBRARY_PATH=$lp timeout 300 ./build/arfusion-bench --op quant --devices 0 --tmin 1 --tmax 4096 \
              --hidden "$hidden" -d bf16 --quant "${ARF_W1_QUANT:-fp8_tensor,fp8_token,fp8_group}" \
              --scale-layout row --scale-format fp32 -n 50 -w 5 -G 4 -R 3 -c 1 -J "$j.json" > "$j.txt" 2>&1
            echo "world 1 quant h$hidden ${names[$i]} (round $round): exit $?"
          done
        done
      done
      python3 dev/measure/ab_summary.py "$out/log" > "$out/log/ab_summary_world1.txt" 2>&1
      echo "ab summary: exit $?"; grep -E "^[A-Za-z0-9_.-]+: \{" "$out/log/ab_summary_world1.txt" ;;
    policy)
      for n in 2 4 8; do
        for op in allreduce fused; do
          sweep=(--tokens 1,2,8,32,64,128,256,512,1024,2048 --hidden 8192)
          [[ $op == allreduce ]] && sweep=(-b 16K -e 64M -f 2)
          timeout 300 ./build/arfusion-bench --op "$op" --nranks "$n" -a oneshot_lamport,oneshot_pull,twoshot,unfused,auto \
            "${sweep[@]}" -n 100 -G 3 -R 3 -J "$out/log/policy_${op}_$n.json" > "$out/log/policy_${op}_$n.txt" 2>&1
          echo "policy sweep $op $n ranks: exit $?"
        done
      done ;;
    mps)
      calls=${ARF_MPS_CALLS:-2000}
      for mode in plain mps; do
        prefix=(); [[ $mode == plain ]] || prefix=("${under_mps[@]}")
        timeout 300 "${prefix[@]}" ./build/arfusion-run --timeout 300 -n 2 -- ./build/arfusion-stress --calls "$calls" --progress 0 \
          --verify-calls -a oneshot_lamport,oneshot_pull,twoshot,unfused --seed 99 --hash-dir "$out/log/mps_${mode}.hashes" \
          -J "$out/log/stress_mps_${mode}.json" > "$out/log/stress_mps_${mode}.txt" 2>&1
        echo "ipc soak 2 processes ($mode): exit $?"; grep -E "SKIPPED|calls/s|RESULT" "$out/log/stress_mps_${mode}.txt" | tail -3
      done ;;
    zero_copy)
      ./build/arfusion_gpu_tests --gtest_filter='*InputBuffer*' > "$out/log/input_buffer_tests.txt" 2>&1
      echo "input buffer tests: exit $?"; grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran" "$out/log/input_buffer_tests.txt" | tail -8
      for n in 2 4 8; do
        for op in allreduce fused; do
          for mode in copy buffer copy buffer; do
            flag=(); [[ $mode == buffer ]] && flag=(--input-buffer)
            j="$out/log/zero_copy_${op}_${n}_$mode"; k=1; while [[ -e $j.$k.json ]]; do k=$((k + 1)); done
            read -ra sweep <<< "$(sweep_of "$op")"
            timeout 200 ./build/arfusion-bench --op "$op" --nranks "$n" -a oneshot_pull,auto "${sweep[@]}" \
              -n 100 -G 3 -R 3 "${flag[@]}" -J "$j.$k.json" > "$j.$k.txt" 2>&1
            echo "bench $op $n ranks $mode (round $k): exit $?"
          done
        done
      done ;;
    contract)
      timeout 540 ./build/arfusion_gpu_tests \
        --gtest_filter='Watchdog*:CountersNearWrap*:VerifyCalls*:MixedPlacement*:MaxCtas*:Contract/Refusal*:CallMismatch*:BadCalls*' \
        > "$out/log/contract_gpu_tests.txt" 2>&1
      echo "contract gpu tests: exit $?"
      grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran" "$out/log/contract_gpu_tests.txt" | tail -12
      grep -E "^refusal " "$out/log/contract_gpu_tests.txt" | head -40
      timeout 400 ./build/arfusion_ipc_tests --gtest_filter='Contract/IpcRefusal*:IpcNcclTeardown*' \
        > "$out/log/contract_ipc_tests.txt" 2>&1
      echo "contract ipc tests: exit $?"
      grep -E "^\[  (PASSED|FAILED) |FAILED  \]|tests ran|drained after|arfCommDestroy with" \
        "$out/log/contract_ipc_tests.txt" | tail -20
      ARF_DEBUG_COUNTERS_NEAR_WRAP=${ARF_CONTRACT_WRAP:-1000} timeout 300 ./build/arfusion-stress \
        --nranks 4 --calls 4000 --progress 0 --verify-calls -a oneshot_lamport,oneshot_pull,twoshot,unfused \
        --seed 77 -J "$out/log/soak_near_wrap.json" > "$out/log/soak_near_wrap.txt" 2>&1
      echo "soak across the counters' wrap: exit $?"; grep -E "calls/s|RESULT" "$out/log/soak_near_wrap.txt" | tail -3
      ARF_DEBUG_COUNTERS_NEAR_WRAP=${ARF_CONTRACT_WRAP:-1000} timeout 300 ./build/arfusion-stress \
        --co-resident --nranks 4 --calls 4000 --progress 0 --verify-calls \
        -a oneshot_lamport,oneshot_pull,twoshot,unfused --seed 78 -J "$out/log/soak_near_wrap_coresident.json" \
        > "$out/log/soak_near_wrap_coresident.txt" 2>&1
      echo "soak across the counters' wrap, co-resident mode: exit $?"
      grep -E "calls/s|RESULT" "$out/log/soak_near_wrap_coresident.txt" | tail -3
      for n in ${ARF_CONTRACT_WORLDS:-2 4 8}; do
        for round in 1 2; do
          for bound in 0 ${ARF_CONTRACT_MAX_CTAS:-64 16}; do
            j="$out/log/max_ctas_fused_${n}_${bound}.$round"
            timeout 200 ./build/arfusion-bench --op fused --nranks "$n" -a auto,oneshot_lamport,twoshot \
              --tokens 1,8,128,512,2048,8192 --hidden 8192 --max-ctas "$bound" -n 100 -G 3 -R 3 \
              -J "$j.json" > "$j.txt" 2>&1
            echo "bench fused $n ranks max_ctas $bound (round $round): exit $?"
          done
        done
      done ;;
    ctest)
      ctest --test-dir "${configured:-build}" -L gpu -j "${ARF_CTEST_JOBS:-4}" ${ARF_CTEST_INCLUDE:+-R "$ARF_CTEST_INCLUDE"} \
        ${ARF_CTEST_EXCLUDE:+-E "$ARF_CTEST_EXCLUDE"} \
        --output-on-failure > "$out/log/ctest_gpu.txt" 2>&1
      echo "ctest -L gpu: exit $?"; grep -E "Test +#|tests passed|Total Test" "$out/log/ctest_gpu.txt" | tail -30 ;;
    python)
      # the package installed as a user installs it, with this build's library (the op library
      # against this interpreter's torch); every tool below imports it from there
      export ARF_PY_INSTALL_DIR=$(cd "$out" && pwd)/pyinstall
      bash python/tests/install_package.sh "$ARF_PY_INSTALL_DIR" > "$out/log/python_install.txt" 2>&1
      echo "package install: exit $?"; tail -3 "$out/log/python_install.txt"
      OUT="$out/log/graphs" PYTHONPATH=$ARF_PY_INSTALL_DIR timeout 300 python3 dev/python/dump_post_grad_graphs.py \
        > "$out/log/graphs.txt" 2>&1
      echo "graph dump: exit $?"; tail -3 "$out/log/graphs.txt"
      timeout 540 bash python/tests/run_gpu_tests.sh ${ARF_PYTHON_ARGS:-} > "$out/log/python_gpu.txt" 2>&1
      echo "python gpu tests: exit $?"; grep -E "^(FAIL|SKIP)|passed|failed" "$out/log/python_gpu.txt" | tail -25
      PYTHONPATH=$ARF_PY_INSTALL_DIR timeout 120 python3 dev/python/probe_fp8_scale_rounding.py > "$out/log/probe_fp8_scale.txt" 2>&1
      echo "fp8 scale probe: exit $?"
      PYTHONPATH=$ARF_PY_INSTALL_DIR timeout 200 python3 dev/python/bench_op_overhead.py "$out/log/op_overhead.json" > "$out/log/op_overhead.txt" 2>&1
      echo "op overhead: exit $?"; tail -15 "$out/log/op_overhead.txt" ;;
    hf_models)
      export ARF_PY_INSTALL_DIR=$(cd "$out" && pwd)/pyinstall
      timeout 600 bash python/tests/run_hf_models_gpu.sh --json "$out/log/hf_models.json" \
        > "$out/log/hf_models.txt" 2>&1
      echo "hf models: exit $?"; grep -E "^(FAIL|SKIPPED)" "$out/log/hf_models.txt" | head -20
      sed -n '/^model /,$p' "$out/log/hf_models.txt"
      timeout 400 bash python/tests/run_hf_models_gpu.sh --negative-controls \
        --json "$out/log/hf_models_controls.json" > "$out/log/hf_models_controls.txt" 2>&1
      echo "hf models negative controls: exit $? (0: every fault caught)"
      sed -n '/^model /,$p' "$out/log/hf_models_controls.txt" ;;
    build)
      cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DARF_SHARED=ON \
        -DARF_BUILD_NEGATIVE_CONTROLS=ON > "$out/log/configure.txt" 2>&1 &&
        cmake --build build -j"$(nproc)" > "$out/log/build.txt" 2>&1
      echo "build: exit $?"; tail -2 "$out/log/build.txt" ;;
    e2e)
      prefix=(); [[ ${ARF_E2E_MPS:-0} == 1 ]] && prefix=("${under_mps[@]}")
      "${prefix[@]}" bash bench/e2e/run.sh ${ARF_E2E_ARGS:---quick} > "$out/log/e2e.txt" 2>&1
      echo "e2e: exit $?"; grep -E "VERDICT|FAIL|^  - " "$out/log/e2e.txt" | head -20
      cp bench/results/*-e2e*-"$ARF_GIT_COMMIT"/e2e.json "$out/log/" 2>/dev/null ;;
    perf)
      bash dev/measure/bench_world1.sh "$out/log/world1" > "$out/log/world1.txt" 2>&1
      echo "world1: exit $?"; tail -n 8 "$out"/log/world1/compare_world1_*.txt 2>/dev/null
      bash dev/measure/bench_world1_quant.sh "$out/log/world1_quant" > "$out/log/world1_quant.txt" 2>&1
      echo "world1 quant: exit $?"; tail -30 "$out/log/world1_quant/compare_world1_quant.txt" 2>/dev/null ;;
    *) echo "unknown stage $stage" ;;
  esac
done
tar -czf "$out/acceptance.tar.gz" -C "$out" log
exit 0
