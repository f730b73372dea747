# `arfusion-stress churn` (tools/stress/churn/): the engine-like soak written only against the
# public header. Included by cmake/stress.cmake, which links both object libraries into
# arfusion-stress and every variant binary (arf_add_stress_binary).
#
# The include path is deliberately include/ and tools/stress/churn/ only, never src/: the soak must
# stay an OUTSIDE program (it found what the project's own soak, which uses src/, did not), so an
# #include of a library-internal header fails to compile here.
set(ARF_CHURN_DIR ${CMAKE_CURRENT_SOURCE_DIR}/tools/stress/churn)

# Host-only logic, unit-tested without a GPU (the arfusion functions it calls are pure: names,
# arfPlanShape/arfPlanFromFacts, arfScaleBufferBytes; they resolve at the final link).
add_library(arfusion_churn_core OBJECT
  ${ARF_CHURN_DIR}/call_spec.cc ${ARF_CHURN_DIR}/schedule.cc ${ARF_CHURN_DIR}/options.cc
  ${ARF_CHURN_DIR}/replay_csv.cc ${ARF_CHURN_DIR}/stats.cc ${ARF_CHURN_DIR}/stop_control.cc
  ${ARF_CHURN_DIR}/cross_rank.cc ${ARF_CHURN_DIR}/report.cc ${ARF_CHURN_DIR}/call_args.cc
  ${ARF_CHURN_DIR}/segment_times.cc ${ARF_CHURN_DIR}/self_test.cc)
target_include_directories(arfusion_churn_core PUBLIC ${ARF_CHURN_DIR}
  ${CMAKE_CURRENT_SOURCE_DIR}/include)
target_link_libraries(arfusion_churn_core PUBLIC CLI11::CLI11 nlohmann_json::nlohmann_json
  Threads::Threads CUDA::cudart_static)
target_compile_options(arfusion_churn_core PRIVATE ${ARF_WARNINGS})

# The parts that drive the GPU: buffers, the foreign kernels, rank threads, monitor, session.
# No fast-math: the kernels rely on IEEE division and no flush of subnormals (bf16 subnormals
# are legal data).
add_library(arfusion_churn_runtime OBJECT
  ${ARF_CHURN_DIR}/buffers.cc ${ARF_CHURN_DIR}/kernels_gen.cu ${ARF_CHURN_DIR}/kernels_check.cu
  ${ARF_CHURN_DIR}/rank_loop.cc ${ARF_CHURN_DIR}/monitor.cc ${ARF_CHURN_DIR}/session.cc
  ${ARF_CHURN_DIR}/churn_main.cc)
target_link_libraries(arfusion_churn_runtime PUBLIC arfusion_churn_core)
target_compile_options(arfusion_churn_runtime PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:${ARF_WARNINGS}> $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-warn-spills>)
set_target_properties(arfusion_churn_runtime PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)

# CPU tests: compiled into arfusion_stress_tests (ctest stress_tests, label cpu; cmake/stress.cmake
# adds these sources and arfusion_churn_core), so every job that builds the stress tests, the
# sanitizer CI job included, runs them.
set(ARF_CHURN_TEST_SOURCES
  ${ARF_CHURN_DIR}/test_numerics.cc ${ARF_CHURN_DIR}/test_quant_rules.cc
  ${ARF_CHURN_DIR}/test_schedule.cc ${ARF_CHURN_DIR}/test_options.cc
  ${ARF_CHURN_DIR}/test_replay_csv.cc ${ARF_CHURN_DIR}/test_cross_rank.cc
  ${ARF_CHURN_DIR}/test_call_args.cc ${ARF_CHURN_DIR}/test_segment_times.cc
  ${ARF_CHURN_DIR}/test_self_test.cc)
set(ARF_CHURN_TEST_DEFINITIONS
  ARF_CHURN_REPRO_CSV="${CMAKE_CURRENT_SOURCE_DIR}/tests/data/lamport-stall-world2.csv")

if(ARF_BUILD_TESTS)
  # GPU soaks (label gpu; without a GPU every one prints SKIPPED and exits 77: skipped). Default
  # heavy foreign kernels (1024 threads, 96 KiB dynamic shared memory per CTA), device skew,
  # 8 calls in flight, every default pattern and algorithm.
  function(arf_add_churn_test name)
    add_test(NAME ${name} COMMAND ${ARGN})
    set_tests_properties(${name} PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900)
  endfunction()
  arf_add_churn_test(churn_soak_2 $<TARGET_FILE:arfusion-stress> churn --nranks 2 --seconds 20
    --progress 5 -J ${CMAKE_CURRENT_BINARY_DIR}/churn_soak_2.json)
  arf_add_churn_test(churn_soak_8 $<TARGET_FILE:arfusion-stress> churn --nranks 8 --seconds 20
    --progress 5 -J ${CMAKE_CURRENT_BINARY_DIR}/churn_soak_8.json)
  # The co-resident test mode (docs/protocol.md): no gate, no return wait, grids that co-reside,
  # the soak's kernels on a side stream, so a peer can run a call ahead; every default pattern and
  # algorithm, 20 s at each world.
  foreach(n 2 4 8)
    arf_add_churn_test(churn_co_resident_${n} $<TARGET_FILE:arfusion-stress> churn --co-resident
      --nranks ${n} --seconds 20 --progress 5 -J ${CMAKE_CURRENT_BINARY_DIR}/churn_co_resident_${n}.json)
  endforeach()
  # The checks can fail: every 7th call one rank flips a bit of one of its outputs (self_test.h);
  # passes only if every such call, and no other, was flagged. Under rotate and split.
  arf_add_churn_test(churn_self_test $<TARGET_FILE:arfusion-stress> churn --nranks 4 --calls 3000
    --corrupt-every 7 --progress 0 -J ${CMAKE_CURRENT_BINARY_DIR}/churn_self_test.json)
  arf_add_churn_test(churn_self_test_split $<TARGET_FILE:arfusion-stress> churn --nranks 4 --calls 3000
    --corrupt-every 7 --reference split --progress 0 -J ${CMAKE_CURRENT_BINARY_DIR}/churn_self_test_split.json)
  # One process per rank under the launcher (ipc transport; processes sharing one GPU
  # time-slice it, so a call budget rather than a time budget). Every process checks its own
  # outputs; rank 0 compares the per-call output hashes of both.
  arf_add_churn_test(churn_soak_ipc arfusion-run --timeout 800 -n 2 --
    $<TARGET_FILE:arfusion-stress> churn --calls 2000 --progress 10
    --hash-dir ${CMAKE_CURRENT_BINARY_DIR}/churn_soak_ipc.hashes
    -J ${CMAKE_CURRENT_BINARY_DIR}/churn_soak_ipc.json)
  # The same under a private MPS daemon, at 2 and 4 processes: their kernels run at once, so a
  # collective spinning for a mate can hold the SMs the mate's foreign kernel needs unless the
  # shared-device gate waits across processes too (without it: a stall at the first call).
  # Skipped (77) where there is no GPU or no MPS.
  # An MPS server's clients share one pool of work queues: at 32 connections each (the soak's
  # default), 4 clients failed to create their contexts (cudaSetDevice: out of memory); 8 each.
  foreach(n 2 4)
    arf_add_churn_test(churn_soak_ipc_mps_${n} bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/gpu/with_private_mps.sh
      -- $<TARGET_FILE:arfusion-run> --timeout 600 -n ${n} --
      $<TARGET_FILE:arfusion-stress> churn --calls 2000 --progress 10 --connections 8
      --hash-dir ${CMAKE_CURRENT_BINARY_DIR}/churn_soak_ipc_mps_${n}.hashes
      -J ${CMAKE_CURRENT_BINARY_DIR}/churn_soak_ipc_mps_${n}.json)
  endforeach()
  # The sequence that stalled the library when an outside program drove it (tests/data/; how it
  # was recorded: docs/testing.md): its capacity, Lamport forced as recorded, replayed 3 times on
  # fresh communicators with the recording's host-side jitter and no device delay.
  arf_add_churn_test(churn_replay_lamport $<TARGET_FILE:arfusion-stress> churn
    --replay ${CMAKE_CURRENT_SOURCE_DIR}/tests/data/lamport-stall-world2.csv --repeat 3
    --nranks 2 --max-tokens 2048 --max-hidden 4096 --skew-us 0 --host-skew-us 200 --progress 10
    -J ${CMAKE_CURRENT_BINARY_DIR}/churn_replay_lamport.json)
endif()
