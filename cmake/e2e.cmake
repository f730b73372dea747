# The end-to-end tensor-parallel decoder benchmark's tests (bench/e2e/):
#  - e2e_cpu (label cpu): its pure-Python parts — command line, plan, bf16 ulp / cosine /
#    agreement / percentiles, timing aggregation, the JSON document and the text table — with the
#    stdlib only (no torch, no GPU, no library).
#  - e2e_gpu (label gpu): the correctness gates only, small (2 layers, TP 2 as two processes,
#    16-token prompt, 16 decode steps; bash bench/e2e/run.sh --ctest), against the package
#    installed into <build>/python-gpu with this build's libarfusion.so (python/tests/
#    install_package.sh); exit 77 = skipped (no torch >= 2.10 or no GPU), with a "SKIPPED: ..." line.
#    $ARF_PYTHON (default python3 on PATH) is the interpreter that has torch. Not in sanitizer
#    builds (an ASan-instrumented library cannot load into a plain interpreter).
if(NOT ARF_BUILD_TESTS)
  return()
endif()
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_Interpreter_FOUND)
  message(STATUS "arfusion: no Python 3 interpreter; e2e_cpu/e2e_gpu tests not registered")
  return()
endif()
set(ARF_E2E_DIR ${CMAKE_CURRENT_SOURCE_DIR}/bench/e2e)

add_test(NAME e2e_cpu
  COMMAND ${Python3_EXECUTABLE} -m unittest discover -s ${ARF_E2E_DIR}/tests -t ${ARF_E2E_DIR}/tests -v)
set_tests_properties(e2e_cpu PROPERTIES LABELS cpu TIMEOUT 300)

if(NOT ARF_SANITIZE)
  add_test(NAME e2e_gpu
    COMMAND bash ${ARF_E2E_DIR}/run.sh --ctest --results ${CMAKE_CURRENT_BINARY_DIR}/e2e_ctest)
  set_tests_properties(e2e_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900
    RESOURCE_LOCK arfusion_python_gpu_install
    ENVIRONMENT "ARFUSION_BUILD_DIR=${CMAKE_BINARY_DIR};ARF_PY_INSTALL_DIR=${CMAKE_BINARY_DIR}/python-gpu")
endif()
