# The kernel set's translation units: compiles and runs src/launch/write_kernel_units.cc (a host
# program over kernel_set.h's tables) at configure time, then includes the list it writes. CMake
# only builds what the program lists; what the set holds (rows, pattern sets, vector counts, the
# diagnostic subset, the kernel count) is C++'s alone. dev/profile/ptxas_report.sh runs the same
# program to compile the units without configuring a build.
#
# arf_generate_kernel_rows(<directory>) writes <directory>/row_*.cu and sets in the caller's scope:
#   ARF_KERNEL_ROW_SOURCES             the generated units, one per row
#   ARF_KERNEL_NON_DIAGNOSTIC_SOURCES  the units outside the stress variants' diagnostic subset
#   ARF_DECLARED_KERNELS               the kernels the rows declare
function(arf_generate_kernel_rows dir)
  set(src ${CMAKE_CURRENT_SOURCE_DIR}/src)
  # What the program's output depends on: the list, the header that reads it, the program. A change
  # elsewhere that alters the set fails the CPU test KernelSet.CountsAgree until CMake runs again.
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
    ${src}/launch/kernel_set.def ${src}/launch/kernel_set.h ${src}/launch/write_kernel_units.cc)
  file(MAKE_DIRECTORY ${dir})
  try_run(run_result compiled
    SOURCES ${src}/launch/write_kernel_units.cc
    CMAKE_FLAGS "-DINCLUDE_DIRECTORIES=${src};${CMAKE_CURRENT_SOURCE_DIR}/include"
    CXX_STANDARD 20 CXX_STANDARD_REQUIRED ON CXX_EXTENSIONS OFF
    NO_CACHE
    COMPILE_OUTPUT_VARIABLE compile_output
    RUN_OUTPUT_VARIABLE run_output
    ARGS ${dir})
  if(NOT compiled)
    message(FATAL_ERROR "src/launch/write_kernel_units.cc does not compile:\n${compile_output}")
  endif()
  if(NOT run_result EQUAL 0)
    message(FATAL_ERROR "src/launch/write_kernel_units.cc failed (${run_result}):\n${run_output}")
  endif()
  include(${dir}/kernel_units.cmake)
  if(NOT ARF_KERNEL_ROW_SOURCES)
    message(FATAL_ERROR "src/launch/kernel_set.def declares no kernel")
  endif()
  set(ARF_KERNEL_ROW_SOURCES ${ARF_KERNEL_ROW_SOURCES} PARENT_SCOPE)
  set(ARF_KERNEL_NON_DIAGNOSTIC_SOURCES ${ARF_KERNEL_NON_DIAGNOSTIC_SOURCES} PARENT_SCOPE)
  set(ARF_DECLARED_KERNELS ${ARF_DECLARED_KERNELS} PARENT_SCOPE)
endfunction()
