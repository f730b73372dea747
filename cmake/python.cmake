# The Python package's tests (python/, python/tests/), all against the package as its one install
# command installs it (pip install --no-build-isolation ./python), never the source tree:
#  - python_cpu (label cpu): python/tests/cpu in a venv without torch (the ctypes layer, the
#    layout the ops allocate from, the import structure, the build backend's diagnoses,
#    arfusion.torch's ImportError).
#  - python_torch_cpu_<major>_<minor> (label cpu), one per ARF_TORCH_CPU_VERSIONS (the oldest torch
#    arfusion.torch supports and the newest it is tested with): python/tests/cpu and
#    python/tests/torch_cpu in a venv with that torch from PyPI, numpy and transformers: the op
#    library built against that torch's headers, its registration and fakes, the compile pass
#    traced on the CPU. Skipped ("SKIPPED: ...") only where those cannot be installed.
#    python/tests/run_venv_tests.sh makes the venvs (once, cached under
#    ${XDG_CACHE_HOME:-~/.cache}/arfusion) and installs the package into them; they share the
#    package's build directory (build-python/), hence the resource lock.
#  - python_gpu (label gpu): arfusion.torch on a GPU (python/tests/run_gpu_tests.sh: the package
#    installed as a user installs it, into <build>/python-gpu with this build directory's
#    libarfusion.so and the op library built against the interpreter's torch; then N = 2, 4, 8
#    processes on one GPU); exit 77 = skipped (no torch >= 2.10 with CUDA, or no GPU), with a
#    "SKIPPED: ..." line. $ARF_PYTHON (default python3 on PATH) is the interpreter that has torch.
#  - torch_tp_example (label gpu): examples/torch_tp run as a user would (torchrun, 2 ranks),
#    against the same installed package.
#  - hf_models_gpu (label gpu): the compile pass on Hugging Face models with a real communicator
#    (python/tests/run_hf_models_gpu.sh: the same installed package, 2 processes on one GPU, eager
#    vs compiled without and with the pass, cross-rank bitwise; torch >= 2.10 and transformers,
#    else skipped); hf_models_gpu_controls: its negative controls (exit 0 = every fault caught by
#    its check).
# Not registered in sanitizer builds: an ASan-instrumented library cannot load into a plain
# Python interpreter.
if(NOT ARF_BUILD_TESTS OR ARF_SANITIZE)
  return()
endif()
find_package(Python3 COMPONENTS Interpreter)
if(NOT Python3_Interpreter_FOUND)
  message(STATUS "arfusion: no Python 3 interpreter; the Python package's tests are not registered")
  return()
endif()

set(ARF_PYTHON_DIR ${CMAKE_CURRENT_SOURCE_DIR}/python)

set(ARF_TORCH_CPU_VERSIONS "2.10.0;2.15.0" CACHE STRING
  "torch versions (from PyPI) the Python package's CPU tests run with, each in a venv of its own")
add_test(NAME python_cpu COMMAND bash ${ARF_PYTHON_DIR}/tests/run_venv_tests.sh none)
set_tests_properties(python_cpu PROPERTIES LABELS cpu TIMEOUT 900 SKIP_RETURN_CODE 77
  RESOURCE_LOCK arfusion_python_package ENVIRONMENT "ARF_PYTHON=${Python3_EXECUTABLE}")
foreach(version IN LISTS ARF_TORCH_CPU_VERSIONS)
  if(NOT version MATCHES "^([0-9]+)\\.([0-9]+)")
    message(FATAL_ERROR "ARF_TORCH_CPU_VERSIONS: '${version}' is not a torch version")
  endif()
  set(name python_torch_cpu_${CMAKE_MATCH_1}_${CMAKE_MATCH_2})
  add_test(NAME ${name} COMMAND bash ${ARF_PYTHON_DIR}/tests/run_venv_tests.sh ${version})
  set_tests_properties(${name} PROPERTIES LABELS cpu TIMEOUT 1800 SKIP_RETURN_CODE 77
    RESOURCE_LOCK arfusion_python_package ENVIRONMENT "ARF_PYTHON=${Python3_EXECUTABLE}")
endforeach()

# The GPU tests install the package once per run into <build>/python-gpu, reusing this build.
set(ARF_PYTHON_GPU_ENV "ARFUSION_BUILD_DIR=${CMAKE_BINARY_DIR}" "ARF_PY_INSTALL_DIR=${CMAKE_BINARY_DIR}/python-gpu")
add_test(NAME python_gpu COMMAND bash ${ARF_PYTHON_DIR}/tests/run_gpu_tests.sh)
set_tests_properties(python_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 1800
  RESOURCE_LOCK arfusion_python_gpu_install ENVIRONMENT "${ARF_PYTHON_GPU_ENV}")

add_test(NAME torch_tp_example COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/examples/torch_tp/run_example.sh)
set_tests_properties(torch_tp_example PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900
  RESOURCE_LOCK arfusion_python_gpu_install ENVIRONMENT "${ARF_PYTHON_GPU_ENV}")

add_test(NAME hf_models_gpu COMMAND bash ${ARF_PYTHON_DIR}/tests/run_hf_models_gpu.sh)
set_tests_properties(hf_models_gpu PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900
  RESOURCE_LOCK arfusion_python_gpu_install ENVIRONMENT "${ARF_PYTHON_GPU_ENV}")
add_test(NAME hf_models_gpu_controls
  COMMAND bash ${ARF_PYTHON_DIR}/tests/run_hf_models_gpu.sh --negative-controls)
set_tests_properties(hf_models_gpu_controls PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900
  RESOURCE_LOCK arfusion_python_gpu_install ENVIRONMENT "${ARF_PYTHON_GPU_ENV}")
