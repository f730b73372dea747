# The torch op library of the Python package: python/arfusion/torch/csrc/ops_stable.cc (the CUDA
# kernels and schemas of torch.ops.arfusion.*, written against torch's stable C ABI) compiled
# against the torch installation ARF_TORCH_DIR names (the torch package directory, holding
# include/ and lib/). The package's build backend (python/_build_backend/arfusion_build.py) sets
# ARF_TORCH_DIR to the installing interpreter's torch and builds the target; it is not part of
# `all`. TORCH_TARGET_VERSION pins the stable ABI to 2.10, the oldest torch arfusion.torch
# supports, so a library built against a newer torch's headers loads into any torch >= 2.10.
#
# Output: <build>/torch_ops/libarfusion_torch_ops.so, RUNPATH $ORIGIN/.. (libarfusion.so beside
# the directory, in the build tree and in the installed package alike). torch's own libraries are
# not searched for: `import torch` has loaded them before arfusion.torch loads this one.
set(ARF_TORCH_DIR "" CACHE PATH "torch package directory to build the Python package's op library against")
set(ARF_TORCH_CXX11_ABI 1 CACHE STRING "torch._C._GLIBCXX_USE_CXX11_ABI of that torch")
if(NOT ARF_TORCH_DIR)
  return()
endif()
if(NOT EXISTS ${ARF_TORCH_DIR}/include/torch/csrc/stable/library.h OR
   NOT EXISTS ${ARF_TORCH_DIR}/lib/libtorch_cuda.so)
  message(WARNING "arfusion: ARF_TORCH_DIR=${ARF_TORCH_DIR} holds no CUDA build of torch with the "
                  "stable ABI headers (include/torch/csrc/stable/library.h, lib/libtorch_cuda.so); "
                  "arfusion_torch_ops not defined")
  return()
endif()

add_library(arfusion_torch_ops SHARED EXCLUDE_FROM_ALL
  ${CMAKE_CURRENT_SOURCE_DIR}/python/arfusion/torch/csrc/ops_stable.cc)
target_include_directories(arfusion_torch_ops PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/include)
target_include_directories(arfusion_torch_ops SYSTEM PRIVATE ${ARF_TORCH_DIR}/include
  ${CUDAToolkit_INCLUDE_DIRS})
target_compile_definitions(arfusion_torch_ops PRIVATE TORCH_TARGET_VERSION=0x020a000000000000
  _GLIBCXX_USE_CXX11_ABI=${ARF_TORCH_CXX11_ABI})
target_compile_options(arfusion_torch_ops PRIVATE ${ARF_WARNINGS} -Werror)
# The library file, not the target: the target's interface would link the CUDA runtime statically
# into this library as well.
add_dependencies(arfusion_torch_ops ${ARF_SHARED_LIBRARY_TARGET})
target_link_libraries(arfusion_torch_ops PRIVATE $<TARGET_FILE:${ARF_SHARED_LIBRARY_TARGET}>
  ${ARF_TORCH_DIR}/lib/libtorch_cpu.so ${ARF_TORCH_DIR}/lib/libtorch_cuda.so
  ${ARF_TORCH_DIR}/lib/libc10.so)
set_target_properties(arfusion_torch_ops PROPERTIES
  LIBRARY_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/torch_ops
  CXX_VISIBILITY_PRESET hidden
  BUILD_WITH_INSTALL_RPATH ON
  INSTALL_RPATH "$ORIGIN/..")
