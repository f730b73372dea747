# arfusion-stress (tools/stress/): the refill soak and the engine-like churn soak, their CPU unit
# tests, short GPU soaks, and — only with -DARF_BUILD_NEGATIVE_CONTROLS=ON — library variants that
# prove the soaks can fail:
#
#   arfusion_debug_stall        kernels stall one rank at every protocol point (src/kernels/
#                               debug_stall.cuh); the soak must still find ZERO wrong elements
#   arfusion_nc_no_end_barrier  oneshot_pull without its end barrier: a fast rank's next copy-in
#                               overwrites what a slow peer still reads (a bug AMD's AITER shipped)
#   arfusion_nc_relaxed_flags   barrier flags relaxed instead of release/acquire (another of AITER's)
#   arfusion_nc_no_lamport_clear  Lamport buffers never cleared (stale slots read as data)
#   arfusion_nc_two_lamport_buffers  Lamport with two buffers instead of three: a peer one call
#                               ahead pushes into the buffer a rank still clears
#   arfusion_nc_no_shared_device_gate  ranks sharing a GPU without the shared-device gate (the
#                               return wait kept): the churn soak must stall (SM starvation)
#   arfusion_nc_no_return_wait  ranks sharing a GPU without the return wait (the gate kept): the
#                               churn soak in one hardware queue must stall (FIFO order)
#   arfusion_diag               the release protocol with the variants' kernel subset: the like-for-
#                               like baseline of an A/B against a variant or against a candidate
#                               commit's arfusion_diag (a few MB: it ships to a GPU machine beside
#                               the build; dev/remote_gpu/pack_for_device.sh --candidate)
#
# Each variant is a full CUDA build of the library with its own arfusion-stress-<variant>. The
# negative-control ctests (labels gpu;negative) pass only when the soak DETECTS corruption within
# their call budget: arfusion-stress --expect-corruption exits 0 on detection, 1 when nothing was
# detected, 2 on a timeout or hang, 3 on a setup error, 77 without a GPU (skipped), so a hang or a
# crash never counts as a detection. The variants triple the CUDA compile, so CI (2 cores) leaves
# them off. To build and run them on a GPU machine:
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
set(ARF_STRESS_DIR ${CMAKE_CURRENT_SOURCE_DIR}/tools/stress)

# Object libraries, so that every variant binary links the same objects against its own library
# variant (an archive would need the library after it on the link line; objects do not).
# Host-only parts, unit-tested without a GPU:
add_library(arfusion_stress_core OBJECT
  ${ARF_STRESS_DIR}/args.cc ${ARF_STRESS_DIR}/dataset.cc ${ARF_STRESS_DIR}/schedule.cc
  ${ARF_STRESS_DIR}/stop_control.cc ${ARF_STRESS_DIR}/summary.cc ${ARF_STRESS_DIR}/verify.cc
  ${ARF_STRESS_DIR}/gpu_report.cc ${ARF_STRESS_DIR}/step_pipeline.cc
  ${ARF_STRESS_DIR}/cross_process.cc ${CMAKE_CURRENT_SOURCE_DIR}/tools/common/process_group.cc
  ${ARF_CALLKIT_SOURCES})
target_include_directories(arfusion_stress_core PUBLIC ${ARF_STRESS_DIR}
  ${CMAKE_CURRENT_SOURCE_DIR}/tools/common
  ${CMAKE_CURRENT_SOURCE_DIR}/include ${CMAKE_CURRENT_SOURCE_DIR}/src)
target_link_libraries(arfusion_stress_core PUBLIC arfusion_reference CLI11::CLI11
  nlohmann_json::nlohmann_json Threads::Threads)
target_compile_options(arfusion_stress_core PRIVATE ${ARF_WARNINGS})
# The parts that drive the GPU:
add_library(arfusion_stress_runtime OBJECT
  ${ARF_STRESS_DIR}/calls.cc ${ARF_STRESS_DIR}/device.cu ${ARF_STRESS_DIR}/resources.cc
  ${ARF_STRESS_DIR}/soak.cc ${ARF_STRESS_DIR}/verifier.cc ${ARF_STRESS_DIR}/gpu_verifier.cc
  ${ARF_STRESS_DIR}/gpu_check_kernels.cu)
target_link_libraries(arfusion_stress_runtime PUBLIC arfusion_stress_core CUDA::cudart_static)
target_compile_options(arfusion_stress_runtime PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${ARF_WARNINGS}>)

# `arfusion-stress churn` (the engine-like soak against the public header only): cmake/churn.cmake.
include(${CMAKE_CURRENT_LIST_DIR}/churn.cmake)

# arf_add_stress_binary(<name> <library target> <variant name printed in reports>)
function(arf_add_stress_binary name library variant)
  add_executable(${name} ${ARF_STRESS_DIR}/main.cc)
  target_link_libraries(${name} PRIVATE arfusion_stress_core arfusion_stress_runtime
    arfusion_churn_runtime arfusion_churn_core ${library})
  target_compile_definitions(${name} PRIVATE ARF_STRESS_VARIANT="${variant}")
  target_compile_options(${name} PRIVATE ${ARF_WARNINGS})
endfunction()

arf_add_stress_binary(arfusion-stress arfusion release)

# ctest: GPU runs get this; without a GPU arfusion-stress prints SKIPPED and exits 77.
function(arf_add_stress_test name labels)
  add_test(NAME ${name} COMMAND ${ARGN})
  set_tests_properties(${name} PROPERTIES LABELS "${labels}" SKIP_RETURN_CODE 77 TIMEOUT 900)
endfunction()

if(ARF_BUILD_TESTS)
  add_executable(arfusion_stress_tests ${ARF_STRESS_DIR}/test_schedule.cc
    ${ARF_STRESS_DIR}/test_checks.cc ${ARF_STRESS_DIR}/test_gpu_check.cc
    ${ARF_STRESS_DIR}/test_step_pipeline.cc ${ARF_STRESS_DIR}/test_cross_process.cc
    ${ARF_CHURN_TEST_SOURCES})
  target_link_libraries(arfusion_stress_tests PRIVATE arfusion_stress_core arfusion_churn_core
    arfusion GTest::gtest_main)
  target_compile_definitions(arfusion_stress_tests PRIVATE ${ARF_CHURN_TEST_DEFINITIONS})
  target_compile_options(arfusion_stress_tests PRIVATE ${ARF_WARNINGS})
  add_test(NAME stress_tests COMMAND arfusion_stress_tests)
  set_tests_properties(stress_tests PROPERTIES LABELS cpu)

  # Short soaks of the release library: eager, and captured graphs mixed with eager calls.
  arf_add_stress_test(stress_soak gpu $<TARGET_FILE:arfusion-stress> --calls 4000 --skew-us 50
    --progress 0 -J ${CMAKE_CURRENT_BINARY_DIR}/stress_soak.json)
  arf_add_stress_test(stress_soak_graphs gpu $<TARGET_FILE:arfusion-stress> -G 8 --window 4
    --calls 4000 --skew-us 50 --progress 0 -J ${CMAKE_CURRENT_BINARY_DIR}/stress_soak_graphs.json)
  # The GPU verifier (--verify gpu, gpu_verifier.h) at GPU speed: 100000 calls, estimated 10-35 s
  # (3000-10000 calls/s on 8 virtual ranks, not yet measured) plus ~10 s of setup; --seconds caps
  # it so that ctest -L gpu grows by under a minute whatever the rate (PASS counts what ran).
  arf_add_stress_test(stress_soak_gpu_verify gpu $<TARGET_FILE:arfusion-stress> --verify gpu
    --calls 100000 --seconds 40 --skew-us 0 --ring 12 --progress 0
    -J ${CMAKE_CURRENT_BINARY_DIR}/stress_soak_gpu_verify.json)
endif()

if(NOT ARF_BUILD_NEGATIVE_CONTROLS)
  return()
endif()

# A copy of the library's compile target arfusion_objects (CMakeLists.txt: the sources, include
# paths, options and links of `arfusion`) plus compile
# definitions; reading the properties keeps the variants in step with CMakeLists.txt. Variants
# carry the bf16 kernels of the unquantized patterns only (ARF_DIAGNOSTIC_KERNEL_SUBSET: the rows
# kernel_set.h's in_diagnostic_subset keeps; launch.cu refuses the rest before launch): all
# arfusion-stress drives, a fifth of the compile time and small enough to ship to a GPU machine.
# Shared like the main library when ARF_SHARED is on.
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

set(ARF_STALL_DEFINITION ARF_DEBUG_STALL_NS=${ARF_DEBUG_STALL_NS})
arf_add_library_variant(arfusion_debug_stall ${ARF_STALL_DEFINITION})
arf_add_stress_binary(arfusion-stress-debug_stall arfusion_debug_stall debug_stall)

# Negative controls run WITH the stall: it makes the losing interleaving happen on most calls
# instead of waiting for the scheduler to produce it; the debug_stall soak shows the stall alone
# corrupts nothing. relaxed_flags runs without it (a stall does not reorder memory); about a
# quarter of its calls move more than the 1.2 MB per rank above which AITER saw the bug.
# no_end_barrier and two_lamport_buffers break what only a peer one call ahead exposes. On ranks
# sharing a GPU the gate and the return wait keep every peer behind (the gate waits until every
# mate reached the call), so their soaks run in the co-resident test mode (docs/protocol.md),
# where neither exists; multi-GPU hosts have neither anyway.
arf_add_library_variant(arfusion_nc_no_end_barrier ARF_NEGATIVE_CONTROL_NO_END_BARRIER
  ${ARF_STALL_DEFINITION})
arf_add_library_variant(arfusion_nc_relaxed_flags ARF_NEGATIVE_CONTROL_RELAXED_FLAGS)
arf_add_library_variant(arfusion_nc_no_lamport_clear ARF_NEGATIVE_CONTROL_NO_LAMPORT_CLEAR
  ${ARF_STALL_DEFINITION})
arf_add_library_variant(arfusion_nc_two_lamport_buffers ARF_NEGATIVE_CONTROL_TWO_LAMPORT_BUFFERS
  ${ARF_STALL_DEFINITION})
foreach(control no_end_barrier relaxed_flags no_lamport_clear two_lamport_buffers)
  arf_add_stress_binary(arfusion-stress-${control} arfusion_nc_${control} ${control})
endforeach()

if(ARF_BUILD_TESTS)
  arf_add_stress_test(stress_debug_stall gpu $<TARGET_FILE:arfusion-stress-debug_stall>
    --calls 3000 --progress 0 -J ${CMAKE_CURRENT_BINARY_DIR}/stress_debug_stall.json)
  set(nc_common --expect-corruption --progress 0)
  # The refill soak orders its own work behind each call (soak.h: it waits until every mate
  # enqueued the step before its consumer), so it may run in the co-resident test mode.
  arf_add_stress_test(negative_no_end_barrier "gpu;negative"
    $<TARGET_FILE:arfusion-stress-no_end_barrier> ${nc_common} -a oneshot_pull --calls 2000
    -J ${CMAKE_CURRENT_BINARY_DIR}/negative_no_end_barrier.json)
  set_tests_properties(negative_no_end_barrier PROPERTIES ENVIRONMENT ARF_TEST_CO_RESIDENT=1)
  arf_add_stress_test(negative_relaxed_flags "gpu;negative"
    $<TARGET_FILE:arfusion-stress-relaxed_flags> ${nc_common} -a oneshot_pull,twoshot
    --calls 20000 --skew-us 0
    -J ${CMAKE_CURRENT_BINARY_DIR}/negative_relaxed_flags.json)
  arf_add_stress_test(negative_no_lamport_clear "gpu;negative"
    $<TARGET_FILE:arfusion-stress-no_lamport_clear> ${nc_common} -a oneshot_lamport --calls 2000
    -J ${CMAKE_CURRENT_BINARY_DIR}/negative_no_lamport_clear.json)
  # The same controls checked by the GPU verifier: it must catch them too.
  arf_add_stress_test(negative_no_end_barrier_gpu_verify "gpu;negative"
    $<TARGET_FILE:arfusion-stress-no_end_barrier> ${nc_common} --verify gpu -a oneshot_pull
    --calls 2000 -J ${CMAKE_CURRENT_BINARY_DIR}/negative_no_end_barrier_gpu_verify.json)
  set_tests_properties(negative_no_end_barrier_gpu_verify PROPERTIES ENVIRONMENT ARF_TEST_CO_RESIDENT=1)
  arf_add_stress_test(negative_relaxed_flags_gpu_verify "gpu;negative"
    $<TARGET_FILE:arfusion-stress-relaxed_flags> ${nc_common} --verify gpu -a oneshot_pull,twoshot
    --calls 20000 --skew-us 0 -J ${CMAKE_CURRENT_BINARY_DIR}/negative_relaxed_flags_gpu_verify.json)
  arf_add_stress_test(negative_no_lamport_clear_gpu_verify "gpu;negative"
    $<TARGET_FILE:arfusion-stress-no_lamport_clear> ${nc_common} --verify gpu -a oneshot_lamport
    --calls 2000 -J ${CMAKE_CURRENT_BINARY_DIR}/negative_no_lamport_clear_gpu_verify.json)
endif()

# Soaks in the co-resident test mode (churn --co-resident: no gate, no return wait, the soak's
# kernels off the rank streams) must catch what only a peer one call ahead exposes: the missing
# end barrier (oneshot_pull) and two Lamport buffers (oneshot_lamport). --expect-failure exits 0
# only when a failure (expired wait, async error, wrong element) was detected, 1 when the run was
# clean, so a mode that hid the race fails the test.
if(ARF_BUILD_TESTS)
  foreach(v no_end_barrier:oneshot_pull two_lamport_buffers:oneshot_lamport)
    string(REPLACE ":" ";" v ${v})
    list(GET v 0 control)
    list(GET v 1 algo)
    arf_add_stress_test(negative_${control}_co_resident "gpu;negative"
      $<TARGET_FILE:arfusion-stress-${control}> churn --co-resident --expect-failure --nranks 4
      -a ${algo} --patterns allreduce,flat,residual_rmsnorm --seconds 60 --timeout 2 --progress 0
      -J ${CMAKE_CURRENT_BINARY_DIR}/negative_${control}_co_resident.json)
  endforeach()
endif()

# The two fixes for ranks sharing a GPU (protocol.md, "Ranks sharing a GPU"), each taken out
# alone, each caught by the engine-like soak in the normal mode. --expect-failure as above.
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
  # The shared-device GPU tests against each: StarvedMate must time out without the gate, and
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
  arf_add_stress_test(negative_no_shared_device_gate "gpu;negative"
    $<TARGET_FILE:arfusion-stress-no_shared_device_gate> churn --expect-failure --nranks 2
    --patterns allreduce,flat,residual_rmsnorm --seconds 60 --timeout 2 --progress 0
    -J ${CMAKE_CURRENT_BINARY_DIR}/negative_no_shared_device_gate.json)
  arf_add_stress_test(negative_no_return_wait "gpu;negative"
    $<TARGET_FILE:arfusion-stress-no_return_wait> churn --expect-failure --nranks 4
    --connections 1 --max-tokens 4 --in-flight 8 --skew-us 0 --host-skew-us 300
    --foreign-block 256 --foreign-smem-kb 0 --patterns allreduce,flat,residual_rmsnorm
    --seconds 60 --timeout 2 --progress 0
    -J ${CMAKE_CURRENT_BINARY_DIR}/negative_no_return_wait.json)
endif()
