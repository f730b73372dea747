# The Python package's tests (python/, python/tests/): registered with ctest, run against the
# libarfusion.so this build links (ARF_SHARED_LIBRARY_TARGET, CMakeLists.txt).
#  - python_cpu (label cpu): the ctypes layer, no GPU and no torch (python/tests/cpu, unittest).
#  - python_gpu (label gpu): arfusion.torch on a GPU (python/tests/run_gpu_tests.sh: N = 2, 4, 8
#    processes on one GPU, torch >= 2.6); exit 77 = skipped (no torch >= 2.6 or no GPU), with a
#    "SKIPPED: ..." line. $ARF_PYTHON (default python3 on PATH) is the interpreter that has torch.
#  - torch_ops_syntax (label cpu): csrc/ops_stable.cc compiles (-fsyntax-only, with and without
#    the quantized op) against a stand-in of the stable-ABI headers it uses
#    (python/tests/cpu/stable_abi_stub): our code, not torch's API, on machines without torch.
#  - python_gpu_cpp_ops (label gpu): the same scenarios through the ops' C++ kernels (torch's
#    stable ABI, built into <build>/torch_ops by the test; torch >= 2.10, else skipped).
#  - torch_tp_example (label gpu): examples/torch_tp run as a user would (torchrun, 2 ranks).
# Not registered in sanitizer builds: an ASan-instrumented library cannot load into a plain
# Python interpreter.
if(NOT ARF_BUILD_TESTS OR ARF_SANITIZE)
  return()
endif()
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_Interpreter_FOUND)
  message(STATUS "arfusion: no Python 3 interpreter; python_cpu/python_gpu tests not registered")
  return()
endif()

set(ARF_PYTHON_DIR ${CMAKE_CURRENT_SOURCE_DIR}/python)
set(ARF_PYTHON_ENV "ARFUSION_LIBRARY=$<TARGET_FILE:${ARF_SHARED_LIBRARY_TARGET}>"
  "PYTHONPATH=${ARF_PYTHON_DIR}")

add_test(NAME python_cpu
  COMMAND ${Python3_EXECUTABLE} -m unittest discover -s ${ARF_PYTHON_DIR}/tests/cpu -t ${ARF_PYTHON_DIR}/tests/cpu -v)
set_tests_properties(python_cpu PROPERTIES LABELS cpu TIMEOUT 300 ENVIRONMENT "${ARF_PYTHON_ENV}")

add_test(NAME python_gpu COMMAND bash ${ARF_PYTHON_DIR}/tests/run_gpu_tests.sh)
set_tests_properties(python_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 1500
  ENVIRONMENT "${ARF_PYTHON_ENV}")

add_test(NAME torch_tp_example COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/examples/torch_tp/run_example.sh)
set_tests_properties(torch_tp_example PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 600
  ENVIRONMENT "${ARF_PYTHON_ENV}")

add_test(NAME python_gpu_cpp_ops COMMAND bash ${ARF_PYTHON_DIR}/tests/run_gpu_tests.sh --cpp-ops)
set_tests_properties(python_gpu_cpp_ops PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 1500
  ENVIRONMENT "${ARF_PYTHON_ENV};ARFUSION_TORCH_OPS_DIR=${CMAKE_BINARY_DIR}/torch_ops")

set(ARF_TORCH_OPS_SYNTAX ${CMAKE_CXX_COMPILER} -std=c++17 -fsyntax-only -Wall -Wextra -Werror
  -I${ARF_PYTHON_DIR}/tests/cpu/stable_abi_stub -I${CMAKE_CURRENT_SOURCE_DIR}/include)
foreach(dir IN LISTS CUDAToolkit_INCLUDE_DIRS)
  list(APPEND ARF_TORCH_OPS_SYNTAX -I${dir})
endforeach()
add_test(NAME torch_ops_syntax COMMAND sh -c
  "\"$0\" \"$@\" ${ARF_PYTHON_DIR}/arfusion/torch/csrc/ops_stable.cc && \"$0\" \"$@\" -DARF_TORCH_OPS_QUANT ${ARF_PYTHON_DIR}/arfusion/torch/csrc/ops_stable.cc"
  ${ARF_TORCH_OPS_SYNTAX})
set_tests_properties(torch_ops_syntax PROPERTIES LABELS cpu TIMEOUT 120)
