# arfusion-stress (tools/stress/): the soak, its CPU unit tests, GPU soaks, and — only with
# -DARF_BUILD_NEGATIVE_CONTROLS=ON — library variants that prove the soak can fail:
#
#   arfusion_debug_stall        kernels stall one rank at every protocol point (src/kernels/
#                               debug_stall.cuh); the soak must still find ZERO wrong elements
#   arfusion_nc_no_end_barrier  oneshot_pull without its end barrier: a fast rank's next copy-in
#                               overwrites what a slow peer still reads
#   arfusion_nc_relaxed_flags   barrier flags relaxed instead of release/acquire
#   arfusion_nc_no_lamport_clear  Lamport buffers never cleared (stale slots read as data)
#   arfusion_nc_two_lamport_buffers  Lamport with two buffers instead of three: a peer one call
#                               ahead pushes into the buffer a rank still clears
#   arfusion_nc_no_shared_device_gate  ranks sharing a GPU without the shared-device gate (the
#                               return wait kept): the soak must stall (SM starvation)
#   arfusion_nc_no_return_wait  ranks sharing a GPU without the return wait (the gate kept): the
#                               soak in one hardware queue must stall (FIFO order)
#   arfusion_diag               the release protocol with the variants' kernel subset: the like-for-
#                               like baseline of an A/B against a variant or against a candidate
#                               commit's arfusion_diag (a few MB: it ships to a GPU machine beside
#                               the build; dev/remote_gpu/pack_for_device.sh --candidate)
#
# Each variant is a full CUDA build of the library with its own arfusion-stress-<variant>. The
# negative-control ctests (labels gpu;negative) pass only when the soak DETECTS the fault within
# their budget: arfusion-stress --expect-failure exits 0 when a wrong element, an expired wait or
# an asynchronous error was seen, 1 when the run was clean, 3 on a setup error, 77 without a GPU
# (skipped), so a setup error never counts as a detection. The variants multiply the CUDA
# compile, so CI (2 cores) leaves them off. To build and run them on a GPU machine:
#
#   cmake -S . -B build-nc -G Ninja -DARF_BUILD_NEGATIVE_CONTROLS=ON && cmake --build build-nc
#   ctest --test-dir build-nc -L negative --output-on-failure      (or: bash dev/remote_gpu/negative_controls.sh)
option(ARF_BUILD_STRESS "Build arfusion-stress" ON)
option(ARF_BUILD_NEGATIVE_CONTROLS
       "Build the debug-stall and negative-control library variants and their stress binaries" OFF)
set(ARF_DEBUG_STALL_NS 200000 CACHE STRING
    "Stall (ns) of one rank per protocol point in the debug-stall and negative-control builds")

if(NOT ARF_BUILD_STRESS)
  return()
endif()

find_package(CLI11 CONFIG REQUIRED)
find_package(nlohmann_json REQUIRED)
# The include path is deliberately include/ and the tool's own directory only, never src/: the
# soak must stay an OUTSIDE program (one such found hangs that the project's own tests missed), so
# an #include of a library-internal header fails to compile here.
set(ARF_STRESS_DIR ${CMAKE_CURRENT_SOURCE_DIR}/tools/stress)

# Host-only logic, unit-tested without a GPU (the arfusion functions it calls are pure: names,
# arfPlanShape/arfPlanFromFacts, arfScaleBufferBytes; they resolve at the final link).
add_library(arfusion_stress_core OBJECT
  ${ARF_STRESS_DIR}/call_spec.cc ${ARF_STRESS_DIR}/schedule.cc ${ARF_STRESS_DIR}/steps.cc
  ${ARF_STRESS_DIR}/options.cc ${ARF_STRESS_DIR}/replay_csv.cc ${ARF_STRESS_DIR}/stats.cc
  ${ARF_STRESS_DIR}/stop_control.cc ${ARF_STRESS_DIR}/launch_order.cc ${ARF_STRESS_DIR}/cross_rank.cc
  ${ARF_STRESS_DIR}/report.cc ${ARF_STRESS_DIR}/call_args.cc ${ARF_STRESS_DIR}/segment_times.cc
  ${ARF_STRESS_DIR}/self_test.cc)
target_include_directories(arfusion_stress_core PUBLIC ${ARF_STRESS_DIR}
  ${CMAKE_CURRENT_SOURCE_DIR}/include)
target_link_libraries(arfusion_stress_core PUBLIC CLI11::CLI11 nlohmann_json::nlohmann_json
  Threads::Threads CUDA::cudart_static)
target_compile_options(arfusion_stress_core PRIVATE ${ARF_WARNINGS})

# The parts that drive the GPU: buffers, graphs, the soak's kernels, rank threads, monitor,
# session. No fast-math: the kernels rely on IEEE division and no flush of subnormals (bf16
# subnormals are legal data).
add_library(arfusion_stress_runtime OBJECT
  ${ARF_STRESS_DIR}/buffers.cc ${ARF_STRESS_DIR}/graphs.cc ${ARF_STRESS_DIR}/kernels_gen.cu
  ${ARF_STRESS_DIR}/kernels_check.cu ${ARF_STRESS_DIR}/rank_loop.cc ${ARF_STRESS_DIR}/monitor.cc
  ${ARF_STRESS_DIR}/session.cc)
target_link_libraries(arfusion_stress_runtime PUBLIC arfusion_stress_core)
target_compile_options(arfusion_stress_runtime PRIVATE
  $<$<COMPILE_LANGUAGE:CXX>:${ARF_WARNINGS}> $<$<COMPILE_LANGUAGE:CUDA>:-Xptxas=-warn-spills>)
set_target_properties(arfusion_stress_runtime PROPERTIES CUDA_SEPARABLE_COMPILATION OFF)

# arf_add_stress_binary(<name> <library target> <variant name printed in reports>)
function(arf_add_stress_binary name library variant)
  add_executable(${name} ${ARF_STRESS_DIR}/main.cc)
  target_link_libraries(${name} PRIVATE arfusion_stress_runtime arfusion_stress_core ${library})
  target_compile_definitions(${name} PRIVATE ARF_STRESS_VARIANT="${variant}")
  target_compile_options(${name} PRIVATE ${ARF_WARNINGS})
endfunction()

arf_add_stress_binary(arfusion-stress arfusion release)

# ctest: without a GPU arfusion-stress prints SKIPPED and exits 77 (skipped, never passed).
function(arf_add_stress_test name labels)
  add_test(NAME ${name} COMMAND ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" SKIP_RETURN_CODE 77 TIMEOUT 900)
endfunction()

if(ARF_BUILD_TESTS)
  add_executable(arfusion_stress_tests
    ${ARF_STRESS_DIR}/test_numerics.cc ${ARF_STRESS_DIR}/test_quant_rules.cc
    ${ARF_STRESS_DIR}/test_schedule.cc ${ARF_STRESS_DIR}/test_steps.cc
    ${ARF_STRESS_DIR}/test_options.cc ${ARF_STRESS_DIR}/test_replay_csv.cc
    ${ARF_STRESS_DIR}/test_cross_rank.cc ${ARF_STRESS_DIR}/test_call_args.cc
    ${ARF_STRESS_DIR}/test_segment_times.cc ${ARF_STRESS_DIR}/test_self_test.cc
    ${ARF_STRESS_DIR}/test_sandwich.cc)
  target_link_libraries(arfusion_stress_tests PRIVATE arfusion_stress_core arfusion GTest::gtest_main)
  target_compile_definitions(arfusion_stress_tests PRIVATE
    ARF_STRESS_REPRO_CSV="${CMAKE_CURRENT_SOURCE_DIR}/tests/data/lamport-stall-world2.csv")
  target_compile_options(arfusion_stress_tests PRIVATE ${ARF_WARNINGS})
  add_test(NAME stress_tests COMMAND arfusion_stress_tests)
  set_tests_properties(stress_tests PROPERTIES LABELS cpu)

  # GPU soaks of the release library (label gpu). The defaults: heavy kernels of the soak's own on
  # the rank streams (1024 threads, 96 KiB dynamic shared memory per CTA), device skew, 8 calls in
  # flight, every pattern and algorithm.
  foreach(n 2 8)
    arf_add_stress_test(stress_soak_${n} gpu $<TARGET_FILE:arfusion-stress> --nranks ${n} --seconds 20
      --progress 5 -J ${CMAKE_CURRENT_BINARY_DIR}/stress_soak_${n}.json)
  endforeach()
  # Sandwich calls (post_gamma, API v6; off in the other soaks): half the norm-pattern calls,
  # which the library runs only with ARF_EXPERIMENTAL_SANDWICH=1 (the soak refuses the option
  # without it), so the test sets it for this process alone.
  arf_add_stress_test(stress_soak_sandwich_2 gpu $<TARGET_FILE:arfusion-stress> --nranks 2
    --sandwich-share 0.5 --seconds 20 --progress 5 -J ${CMAKE_CURRENT_BINARY_DIR}/stress_soak_sandwich_2.json)
  set_tests_properties(stress_soak_sandwich_2 PROPERTIES ENVIRONMENT ARF_EXPERIMENTAL_SANDWICH=1)
  # CUDA graphs: 8 windows of 4 calls captured per rank, replayed with new data in about three
  # steps of four; the capacity lower, since each call of a window has its own tensors.
  arf_add_stress_test(stress_soak_graphs gpu $<TARGET_FILE:arfusion-stress> --nranks 8 --graphs 8
    --window 4 --max-tokens 512 --seconds 20 --progress 5 -J ${CMAKE_CURRENT_BINARY_DIR}/stress_soak_graphs.json)
  # At the soak's highest rate (volume mix, no device skew, small kernels of its own): 100000
  # calls or 40 s, whichever ends first.
  arf_add_stress_test(stress_soak_volume gpu $<TARGET_FILE:arfusion-stress> --nranks 8 --mix volume
    --skew-us 0 --foreign-block 256 --foreign-smem-kb 0 --calls 100000 --seconds 40 --progress 10
    -J ${CMAKE_CURRENT_BINARY_DIR}/stress_soak_volume.json)
  # The co-resident test mode (docs/protocol.md): no gate, no return wait, grids that co-reside,
  # the soak's kernels on a side stream, so a peer can run a call ahead.
  foreach(n 2 4 8)
    arf_add_stress_test(stress_co_resident_${n} gpu $<TARGET_FILE:arfusion-stress> --co-resident
      --nranks ${n} --seconds 20 --progress 5 -J ${CMAKE_CURRENT_BINARY_DIR}/stress_co_resident_${n}.json)
  endforeach()
  # The checks can fail: every 7th call one rank flips a bit of one of its outputs (self_test.h);
  # passes only if every such call, and no other, was flagged. Under rotate and split.
  arf_add_stress_test(stress_self_test gpu $<TARGET_FILE:arfusion-stress> --nranks 4 --calls 3000
    --corrupt-every 7 --progress 0 -J ${CMAKE_CURRENT_BINARY_DIR}/stress_self_test.json)
  arf_add_stress_test(stress_self_test_split gpu $<TARGET_FILE:arfusion-stress> --nranks 4 --calls 3000
    --corrupt-every 7 --reference split --progress 0 -J ${CMAKE_CURRENT_BINARY_DIR}/stress_self_test_split.json)
  # One process per rank under the launcher (ipc transport; processes sharing one GPU time-slice
  # it, so a call budget rather than a time budget). Every process checks its own outputs; rank 0
  # compares the per-call output hashes of all.
  arf_add_stress_test(stress_soak_ipc gpu arfusion-run --timeout 800 -n 2 --
    $<TARGET_FILE:arfusion-stress> --calls 2000 --progress 10
    --hash-dir ${CMAKE_CURRENT_BINARY_DIR}/stress_soak_ipc.hashes
    -J ${CMAKE_CURRENT_BINARY_DIR}/stress_soak_ipc.json)
  # The same under a private MPS daemon, at 2 and 4 processes: their kernels run at once, so a
  # collective spinning for a mate can hold the SMs the mate's kernel needs unless the shared-device
  # gate waits across processes too (without it: a stall at the first call). Skipped (77) where
  # there is no GPU or no MPS. An MPS server's clients share one pool of work queues: at 32
  # connections each (the soak's default), 4 clients failed to create their contexts
  # (cudaSetDevice: out of memory); 8 each.
  foreach(n 2 4)
    arf_add_stress_test(stress_soak_ipc_mps_${n} gpu bash ${CMAKE_CURRENT_SOURCE_DIR}/tests/gpu/with_private_mps.sh
      -- $<TARGET_FILE:arfusion-run> --timeout 600 -n ${n} --
      $<TARGET_FILE:arfusion-stress> --calls 2000 --progress 10 --connections 8
      --hash-dir ${CMAKE_CURRENT_BINARY_DIR}/stress_soak_ipc_mps_${n}.hashes
      -J ${CMAKE_CURRENT_BINARY_DIR}/stress_soak_ipc_mps_${n}.json)
  endforeach()
  # The sequence that stalled the library when an outside program drove it (tests/data/; how it
  # was recorded: docs/testing.md): its capacity, Lamport forced as recorded, replayed 3 times on
  # fresh communicators with the recording's host-side jitter and no device delay.
  arf_add_stress_test(stress_replay_lamport gpu $<TARGET_FILE:arfusion-stress>
    --replay ${CMAKE_CURRENT_SOURCE_DIR}/tests/data/lamport-stall-world2.csv --repeat 3
    --nranks 2 --max-tokens 2048 --max-hidden 4096 --skew-us 0 --host-skew-us 200 --progress 10
    -J ${CMAKE_CURRENT_BINARY_DIR}/stress_replay_lamport.json)
endif()

if(NOT ARF_BUILD_NEGATIVE_CONTROLS)
  return()
endif()

# A copy of the library's compile target arfusion_objects (CMakeLists.txt: the sources, include
# paths, options and links of `arfusion`) plus compile
# definitions; reading the properties keeps the variants in step with CMakeLists.txt. Variants
# carry the bf16 kernels of the unquantized patterns only (ARF_DIAGNOSTIC_KERNEL_SUBSET: the rows
# kernel_set.h's in_diagnostic_subset keeps; launch.cu refuses the rest before launch): what the
# soak drives with --patterns allreduce,flat,residual_rmsnorm, a fifth of the compile time and
# small enough to ship to a GPU machine. Shared like the main library when ARF_SHARED is on.
function(arf_add_library_variant name)
  get_target_property(sources arfusion_objects SOURCES)
  list(REMOVE_ITEM sources ${ARF_KERNEL_NON_DIAGNOSTIC_SOURCES})  # cmake/kernels.cmake
  if(ARF_SHARED)
    add_library(${name} SHARED ${sources})
  else()
    add_library(${name} STATIC ${sources})
  endif()
  foreach(property INCLUDE_DIRECTORIES COMPILE_OPTIONS COMPILE_DEFINITIONS LINK_LIBRARIES
                   INTERFACE_INCLUDE_DIRECTORIES INTERFACE_LINK_LIBRARIES
                   CUDA_SEPARABLE_COMPILATION)
    get_target_property(value arfusion_objects ${property})
    if(NOT value STREQUAL "value-NOTFOUND")
      set_property(TARGET ${name} PROPERTY ${property} "${value}")
    endif()
  endforeach()
  target_compile_definitions(${name} PRIVATE ARF_DIAGNOSTIC_KERNEL_SUBSET ${ARGN})
endfunction()

arf_add_library_variant(arfusion_diag)

# Every variant binary soaks the unquantized patterns its kernel subset holds.
set(nc_patterns --patterns allreduce,flat,residual_rmsnorm)

set(ARF_STALL_DEFINITION ARF_DEBUG_STALL_NS=${ARF_DEBUG_STALL_NS})
arf_add_library_variant(arfusion_debug_stall ${ARF_STALL_DEFINITION})
arf_add_stress_binary(arfusion-stress-debug_stall arfusion_debug_stall debug_stall)
if(ARF_BUILD_TESTS)
  # The stall alone corrupts nothing, in the normal mode and in the co-resident test mode (where
  # the controls below that need a peer one call ahead are caught).
  arf_add_stress_test(stress_debug_stall gpu $<TARGET_FILE:arfusion-stress-debug_stall> --nranks 4
    ${nc_patterns} --calls 3000 --progress 0 -J ${CMAKE_CURRENT_BINARY_DIR}/stress_debug_stall.json)
  arf_add_stress_test(stress_debug_stall_co_resident gpu $<TARGET_FILE:arfusion-stress-debug_stall>
    --co-resident --nranks 4 ${nc_patterns} --calls 3000 --progress 0
    -J ${CMAKE_CURRENT_BINARY_DIR}/stress_debug_stall_co_resident.json)
endif()

# Negative controls run WITH the stall: it makes the losing interleaving happen on most calls
# instead of waiting for the scheduler to produce it; the debug_stall soaks show the stall alone
# corrupts nothing. relaxed_flags runs without it (a stall does not reorder memory), its calls up
# to 64 MiB per rank. no_end_barrier and two_lamport_buffers break what only a peer one call ahead
# exposes. On ranks sharing a GPU the gate and the return wait keep every peer behind (the gate
# waits until every mate reached the call), so their soaks run in the co-resident test mode
# (docs/protocol.md), where neither exists; multi-GPU hosts have neither anyway.
foreach(control no_end_barrier no_lamport_clear two_lamport_buffers)
  string(TOUPPER ${control} define)
  arf_add_library_variant(arfusion_nc_${control} ARF_NEGATIVE_CONTROL_${define} ${ARF_STALL_DEFINITION})
  arf_add_stress_binary(arfusion-stress-${control} arfusion_nc_${control} ${control})
endforeach()
arf_add_library_variant(arfusion_nc_relaxed_flags ARF_NEGATIVE_CONTROL_RELAXED_FLAGS)
arf_add_stress_binary(arfusion-stress-relaxed_flags arfusion_nc_relaxed_flags relaxed_flags)

# The two fixes for ranks sharing a GPU (protocol.md, "Ranks sharing a GPU"), each taken out
# alone, each caught by the soak in the normal mode:
#  - no_shared_device_gate: SM starvation. The soak's kernels on the rank streams have CTAs that
#    need more than the half SM a spinning collective leaves, so a mate's collective behind one
#    never starts.
#  - no_return_wait: FIFO order. With every stream in one hardware queue, small calls each
#    followed at once by the soak's readers, 8 calls in flight and host skew, a rank's reader
#    enters the queue ahead of a mate's call that its own call waits for.
foreach(control no_shared_device_gate no_return_wait)
  string(TOUPPER ${control} define)
  arf_add_library_variant(arfusion_nc_${control} ARF_NEGATIVE_CONTROL_${define})
  arf_add_stress_binary(arfusion-stress-${control} arfusion_nc_${control} ${control})
endforeach()

if(ARF_BUILD_TESTS)
  # --expect-failure: exit 0 only when the fault was caught (a wrong element, an expired wait or
  # an asynchronous error), 1 when the run was clean.
  set(nc_common --expect-failure --timeout 2 --progress 0 ${nc_patterns})
  foreach(v no_end_barrier:oneshot_pull two_lamport_buffers:oneshot_lamport)
    string(REPLACE ":" ";" v ${v})
    list(GET v 0 control)
    list(GET v 1 algo)
    arf_add_stress_test(negative_${control} "gpu;negative" $<TARGET_FILE:arfusion-stress-${control}>
      --co-resident --nranks 4 -a ${algo} ${nc_common} --seconds 60
      -J ${CMAKE_CURRENT_BINARY_DIR}/negative_${control}.json)
  endforeach()
  arf_add_stress_test(negative_no_lamport_clear "gpu;negative" $<TARGET_FILE:arfusion-stress-no_lamport_clear>
    --nranks 4 -a oneshot_lamport ${nc_common} --seconds 60
    -J ${CMAKE_CURRENT_BINARY_DIR}/negative_no_lamport_clear.json)
  arf_add_stress_test(negative_relaxed_flags "gpu;negative" $<TARGET_FILE:arfusion-stress-relaxed_flags>
    --nranks 4 -a oneshot_pull,twoshot --skew-us 0 ${nc_common} --seconds 120
    -J ${CMAKE_CURRENT_BINARY_DIR}/negative_relaxed_flags.json)
  arf_add_stress_test(negative_no_shared_device_gate "gpu;negative"
    $<TARGET_FILE:arfusion-stress-no_shared_device_gate> --nranks 2 ${nc_common} --seconds 60
    -J ${CMAKE_CURRENT_BINARY_DIR}/negative_no_shared_device_gate.json)
  arf_add_stress_test(negative_no_return_wait "gpu;negative" $<TARGET_FILE:arfusion-stress-no_return_wait>
    --nranks 4 --connections 1 --max-tokens 4 --in-flight 8 --skew-us 0 --host-skew-us 300
    --foreign-block 256 --foreign-smem-kb 0 ${nc_common} --seconds 60
    -J ${CMAKE_CURRENT_BINARY_DIR}/negative_no_return_wait.json)

  # The shared-device GPU tests against both: StarvedMate must time out without the gate, and
  # ForeignKernelsBehindEveryCallNeverBlockAPeer in one hardware queue without the return wait
  # (dev/remote_gpu/gpu_acceptance.sh, stage coresident).
  set(gpu_dir ${CMAKE_CURRENT_SOURCE_DIR}/tests/gpu)
  foreach(control no_shared_device_gate no_return_wait)
    add_executable(arfusion_gpu_tests_${control} ${gpu_dir}/gpu_main.cc
      ${gpu_dir}/harness.cc ${gpu_dir}/harness_run.cc ${gpu_dir}/foreign_kernels.cu
      ${gpu_dir}/test_shared_device.cc ${ARF_CALLKIT_SOURCES})
    target_include_directories(arfusion_gpu_tests_${control} PRIVATE
      ${CMAKE_CURRENT_SOURCE_DIR}/src ${CMAKE_CURRENT_SOURCE_DIR}/tests
      ${CMAKE_CURRENT_SOURCE_DIR}/tools/common)
    target_link_libraries(arfusion_gpu_tests_${control} PRIVATE
      arfusion_nc_${control} arfusion_reference GTest::gtest)
  endforeach()
endif()
