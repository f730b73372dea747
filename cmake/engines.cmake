# The engine integrations' CPU tests (python/tests/engines, label cpu): arfusion inside vLLM and
# SGLang as PyPI installs them, each in a venv of its own cached under
# ${XDG_CACHE_HOME:-~/.cache}/arfusion (python/tests/engines/engine_venv.sh makes it; a cold
# install is long, see python/tests/engines/README.md, so the tests never make it themselves):
#  - engine_vllm_cpu: the pass in vLLM's pass manager after vLLM's IR lowering, the plugin (entry
#    point, vLLM's loader, the ARFUSION_VLLM switch), two workers started with vLLM's distributed
#    initialization, vLLM's Llama layers compiled over the real TP group;
#  - engine_sglang_cpu: the drop-in's signature, op schema, conventions and SGLang's call site,
#    and the example patch applied to the installed SGLang.
# Each skips ("SKIPPED: <engine> not installed ...", exit 77) where its venv is absent. They
# install this tree's package into the venv with its one install command, building it (the op
# library against the venv's torch) in build-python-<engine>/ (python/tests/engines/
# run_engine_tests.sh).
if(NOT ARF_BUILD_TESTS OR ARF_SANITIZE)
  return()
endif()
foreach(engine vllm sglang)
  add_test(NAME engine_${engine}_cpu
    COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/python/tests/engines/run_engine_tests.sh ${engine})
  set_tests_properties(engine_${engine}_cpu PROPERTIES LABELS cpu SKIP_RETURN_CODE 77
    TIMEOUT 1800 RESOURCE_LOCK arfusion_python_package)
endforeach()

# The SGLang drop-in on a GPU (label gpu): examples/sglang/run_example.sh, 2 ranks sharing a GPU,
# bit for bit against the unfused algorithm (exit 77 = skipped: no torch >= 2.10 with CUDA, or no
# GPU), against the package installed as python_gpu and torch_tp_example install it (this build
# directory, into <build>/python-gpu).
add_test(NAME sglang_drop_in_example
  COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/examples/sglang/run_example.sh)
set_tests_properties(sglang_drop_in_example PROPERTIES LABELS gpu SKIP_RETURN_CODE 77 TIMEOUT 900
  RESOURCE_LOCK arfusion_python_gpu_install
  ENVIRONMENT "ARFUSION_BUILD_DIR=${CMAKE_BINARY_DIR};ARF_PY_INSTALL_DIR=${CMAKE_BINARY_DIR}/python-gpu")
