# -DARF_SANITIZE="address;undefined" (any list of -fsanitize= values): every host C++ translation
# unit of every target is compiled and linked with those sanitizers, for running the CPU tests
# (ctest -L cpu) under ASan/UBSan. CUDA translation units are left alone: nvcc cannot instrument
# device code, and their host halves go through nvcc's own host pass; they are linked against the
# sanitizer runtime like any uninstrumented library. Errors abort the test (no recovery), so a
# report fails ctest. The CI job (device code as PTX only: the CPU tests never launch a kernel, and
# skipping ptxas saves about a third of the build):
#
#   cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CUDA_ARCHITECTURES=90-virtual \
#     -DARF_SANITIZE="address;undefined"
#   cmake --build build-asan --target arfusion_cpu_tests arfusion_bench_tests arfusion_stress_tests
#   ASAN_OPTIONS=protect_shadow_gap=0 ctest --test-dir build-asan -L cpu --output-on-failure
#
# (protect_shadow_gap=0: the CUDA driver maps memory where ASan's shadow gap would be; harmless
# where no driver is loaded.)
set(ARF_SANITIZE "" CACHE STRING "Sanitizers for host C++ code, e.g. address;undefined (empty: off)")
set(ARF_SANITIZE_EXTRA_FLAGS "" CACHE STRING
    "Appended after the -fsanitize flags (compile and link), e.g. -fno-sanitize=enum")

# Applied to every target of the directory once all of them exist (deferred to the end of
# CMakeLists.txt: optional parts included after this file add targets too).
function(arf_apply_sanitizers)
  list(JOIN ARF_SANITIZE "," sanitizers)
  set(compile_flags -fsanitize=${sanitizers} -fno-omit-frame-pointer -fno-sanitize-recover=all
      ${ARF_SANITIZE_EXTRA_FLAGS})
  get_property(targets DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} PROPERTY BUILDSYSTEM_TARGETS)
  foreach(target IN LISTS targets)
    get_target_property(type ${target} TYPE)
    if(type MATCHES "^(STATIC_LIBRARY|OBJECT_LIBRARY|SHARED_LIBRARY|EXECUTABLE)$")
      target_compile_options(${target} PRIVATE $<$<COMPILE_LANGUAGE:CXX>:${compile_flags}>)
      # tests that enumerate billions of arithmetic cases sample them here (the unsanitized
      # build, which CI runs too, enumerates them all)
      target_compile_definitions(${target} PRIVATE ARF_SANITIZED_BUILD=1)
    endif()
    if(type MATCHES "^(SHARED_LIBRARY|EXECUTABLE)$")
      # The host compiler links (for CUDA-language executables too), so it takes the flag as is.
      target_link_options(${target} PRIVATE -fsanitize=${sanitizers} ${ARF_SANITIZE_EXTRA_FLAGS})
    endif()
  endforeach()
  message(STATUS "arfusion: host C++ code built with -fsanitize=${sanitizers}")
endfunction()

if(ARF_SANITIZE)
  cmake_language(DEFER DIRECTORY ${CMAKE_CURRENT_SOURCE_DIR} CALL arf_apply_sanitizers)
endif()
