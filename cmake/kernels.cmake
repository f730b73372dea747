# The kernel set (src/launch/kernel_set.def): one generated translation unit per row
# (cmake/kernel_rows.cmake runs src/launch/write_kernel_units.cc), and the kernel and size budget
# the built library is held to.
# Included by CMakeLists.txt before the library's sources are listed. Sets ARF_KERNEL_ROW_SOURCES,
# ARF_KERNEL_NON_DIAGNOSTIC_SOURCES (cmake/stress.cmake leaves them out of the diagnostic
# variants) and ARF_DECLARED_KERNELS; registers the kernel-set tests at the end of the top
# directory (arf_kernel_set_tests).

# The budget, measured on the configuration the ctest runs in (Release, CMAKE_CUDA_ARCHITECTURES
# 90: sm_90 code and compute_90 PTX; CUDA 13.0, GCC 12): kernels = the declared count, so a row
# added to kernel_set.def must raise it here, in review; bytes = libarfusion.so with ~5% headroom
# for changes inside kernels. Before and after figures: docs/architecture.md, "Kernel set".
set(ARF_KERNEL_BUDGET 324)
set(ARF_LIBRARY_BYTES_BUDGET 17000000)

include(${CMAKE_CURRENT_LIST_DIR}/kernel_rows.cmake)
arf_generate_kernel_rows(${CMAKE_CURRENT_BINARY_DIR}/kernels)

# At the end of the top directory (the targets exist then): the CPU tests get the count written at
# configure time, to compare with the C++ table they are compiled with (tests/cpu/test_kernel_set.cc:
# a stale configuration fails there); ctest kernel_budget (label cpu)
# runs scripts/check_kernel_budget.sh over the built libarfusion.so. It is registered only where
# the budget was measured: a Debug, sanitizer or other-architecture build has other sizes (the
# CPU tests still compare the declared counts there).
function(arf_kernel_set_tests)
  if(NOT TARGET arfusion_cpu_tests)
    return()
  endif()
  target_compile_definitions(arfusion_cpu_tests PRIVATE ARF_DECLARED_KERNELS=${ARF_DECLARED_KERNELS})
  if(NOT CMAKE_BUILD_TYPE STREQUAL "Release" OR NOT "${CMAKE_CUDA_ARCHITECTURES}" STREQUAL "90"
     OR ARF_SANITIZE)
    message(STATUS "kernel_budget test not registered: the budget is for Release builds for "
                   "CMAKE_CUDA_ARCHITECTURES=90 without sanitizers")
    return()
  endif()
  add_test(NAME kernel_budget COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/scripts/check_kernel_budget.sh
    $<TARGET_FILE:${ARF_SHARED_LIBRARY_TARGET}> ${ARF_DECLARED_KERNELS} ${ARF_KERNEL_BUDGET}
    ${ARF_LIBRARY_BYTES_BUDGET} ${CMAKE_NM})
  set_tests_properties(kernel_budget PROPERTIES LABELS cpu)
endfunction()
cmake_language(DEFER DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} CALL arf_kernel_set_tests)
