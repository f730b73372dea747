#!/usr/bin/env bash
# The compile pass on the Hugging Face models on a GPU, one command (ctest: hf_models_gpu and,
# with --negative-controls, hf_models_gpu_controls; label gpu):
#   bash python/tests/run_hf_models_gpu.sh [--models Llama,...] [--negative-controls] [--json FILE]
# Interpreter: $ARF_PYTHON (default python3; torch >= 2.10 with CUDA, and transformers). The
# package is installed first, as a user installs it (python/tests/install_package.sh), into
# $ARF_PY_INSTALL_DIR (default build-python/gpu-install), and the ranks import it from there
# (PYTHONPATH). Exit 77 (skipped) with a "SKIPPED: ..." line without torch >= 2.10, transformers
# or a GPU (hf_models_gpu.py says which).
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
source "$here/package_env.sh"
arf_skip_without_interpreter
arf_skip_without_torch
arf_install_package
exec "$arf_py" "$here/gpu/hf_models_gpu.py" "$@"
