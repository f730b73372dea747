#!/usr/bin/env bash
# Makes (once) and names the virtual environment an engine's CPU tests run in:
#   bash python/tests/engines/engine_venv.sh vllm     # prints the venv's path on its last line
#   bash python/tests/engines/engine_venv.sh sglang
#   bash python/tests/engines/engine_venv.sh --cached vllm   # only name it: exit 77 with
#                                                            # "SKIPPED: vllm not installed ..."
#                                                            # where it is not made yet
# Each engine pins its own torch, so each gets a venv of its own, cached under
# ${XDG_CACHE_HOME:-$HOME/.cache}/arfusion (never in the repository) and reused while its stamp
# names the same packages.
#
# What is installed: the engine's own wheel without its dependencies, then its declared
# dependencies (read from the wheel's metadata) except the GPU kernel and media packages named
# in SKIP below. The tests use the engine's configuration, compilation, plugin, distributed and
# layer modules on the CPU; none imports those packages there, and some of the engines' exact
# pins are not on PyPI at all (vLLM 0.34.0 pins a flashinfer-python release PyPI lacks), so a
# plain `pip install vllm==0.34.0` cannot resolve.
#
# Exit 77 with "SKIPPED: <engine> not installed (...)" where pip cannot install it here (no index
# reachable, no wheel for this interpreter); any other failure exits 1.
set -uo pipefail
cached_only=0
if [[ ${1:-} == --cached ]]; then cached_only=1; shift; fi
engine=${1:?usage: engine_venv.sh [--cached] vllm|sglang}
case $engine in
  vllm) version=${ARF_VLLM_VERSION:-0.34.0} ;;
  sglang) version=${ARF_SGLANG_VERSION:-0.5.23} ;;
  *) echo "engine_venv.sh: unknown engine '$engine' (vllm or sglang)" >&2; exit 2 ;;
esac
# GPU kernel libraries, video/audio decoders and other packages the CPU tests never import
# (SGLang's modules import torchvision, so it stays there).
SKIP="flashinfer-python flashinfer-cubin flashinfer-jit-cache tilelang pynvvideocodec
  nvidia-cutlass-dsl quack-kernels tokenspeed-mla humming-kernels apache-tvm-ffi
  nvidia-cudnn-frontend fastsafetensors instanttensor torchaudio torchcodec
  flash-attn-4 sglang-kernel sgl-deep-ep sgl-deep-gemm sgl-flash-mla nvshmem4py-cu13
  nvidia-mathdx cuda-python torch-memory-saver deepseek-recipe tml-renderers av decord2
  soundfile timm py-spy kernels zentorch"
[[ $engine == vllm ]] && SKIP="$SKIP torchvision"
wants="$engine==$version"
py="${ARF_PYTHON:-python3}"
pyver=$("$py" -c 'import sys; print("%d.%d" % sys.version_info[:2])') || exit 1
cache="${XDG_CACHE_HOME:-$HOME/.cache}/arfusion"
venv="$cache/venv-py$pyver-$engine-$version"
stamp="$venv/.arfusion-packages"
stamp_text="$wants without: $(echo $SKIP)"
if [[ -x $venv/bin/python && $(cat "$stamp" 2>/dev/null) == "$stamp_text" ]]; then
  echo "$venv"
  exit 0
fi

if ((cached_only)); then
  echo "SKIPPED: $engine not installed (no venv at $venv; make it with: bash python/tests/engines/engine_venv.sh $engine, or ARF_ENGINE_VENVS=1 bash scripts/test.sh; see python/tests/engines/README.md for what a cold install costs)"
  exit 77
fi
log=$(mktemp)
trap 'rm -f "$log"' EXIT
start=$SECONDS
skipped() {
  tail -5 "$log" >&2
  echo "SKIPPED: $engine not installed ($1: pip failed, above)"
  rm -rf "$venv"
  exit 77
}
echo "engine_venv: making $venv ($wants; a cold install downloads about 4 GB, mostly torch's CUDA libraries)" >&2
rm -rf "$venv"
mkdir -p "$cache"
if ! "$py" -m venv "$venv" >"$log" 2>&1; then
  cat "$log" >&2; echo "FAILED: $py -m venv $venv" >&2; rm -rf "$venv"; exit 1
fi
pip=("$venv/bin/python" -m pip install --disable-pip-version-check -q)
"${pip[@]}" --no-deps "$wants" >"$log" 2>&1 || skipped "$wants cannot be installed here"
# The engine's declared requirements for this platform, less SKIP (names compared normalized).
reqs=$("$venv/bin/python" - "$engine" $SKIP <<'PY'
import re, sys
from importlib.metadata import requires
try:
    from packaging.requirements import Requirement
except ImportError:  # a fresh venv: pip's own copy
    from pip._vendor.packaging.requirements import Requirement
engine, skip = sys.argv[1], {re.sub(r"[-_.]+", "-", s).lower() for s in sys.argv[2:]}
for text in requires(engine) or []:
    r = Requirement(text)
    if r.marker is not None and not r.marker.evaluate({"extra": ""}):
        continue
    if re.sub(r"[-_.]+", "-", r.name).lower() in skip:
        continue
    print(str(r).split(";")[0].strip())
PY
) || { echo "FAILED: reading $engine's requirements" >&2; rm -rf "$venv"; exit 1; }
mapfile -t req_list <<<"$reqs"
"${pip[@]}" "${req_list[@]}" >"$log" 2>&1 || skipped "the dependencies of $wants cannot be installed here"
echo "$stamp_text" >"$stamp"
echo "engine_venv: $wants installed in $((SECONDS - start)) s ($(du -sh "$venv" | cut -f1))" >&2
echo "$venv"
