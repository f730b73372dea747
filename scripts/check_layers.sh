#!/usr/bin/env bash
# Include lint: the layers of src/ point one way, and tools reach the library only through the
# public headers or the exported internal interface. Reads #include lines only (no build, well
# under a second); exit 1 naming every include that breaks a rule. Run by .ci/run.
#
# A quoted include in src/ is written from src/ or include/ ("launch/launch.h",
# "arfusion/arfusion.h") and must exist there. Allowed, per directory of the including file
# (std, CUDA, NCCL and third-party headers in <...> are allowed everywhere; an internal header in
# <...> is judged like a quoted one):
#
#   include/arfusion/  include/ only: the public headers stand alone.
#   src/base/          base/, and arfusion/arfusion.h (the status codes Status carries).
#   src/common/        base/, common/: the vocabulary every layer below core shares (the kernel
#                      contract and workspace layout, quantized formats and layouts, the launch
#                      plan, the protocol's index arithmetic). No public header.
#   src/kernels/       base/, common/, kernels/: device code never reaches up into the launcher,
#                      the kernel registry, the policy or the transport. No public header.
#   src/launch/        base/, common/, kernels/, launch/: the kernel registry and the launcher.
#   src/policy/        base/, common/, policy/.
#   src/transport/     base/, common/kernel_params.h (the workspace layout and the records its
#                      kernels fill), common/protocol_index.h (the flag words' encoding, for a
#                      workspace whose counters start near the wrap), transport/,
#                      arfusion/arfusion.h (ids, status codes). Never the launcher: the
#                      transport's own kernels live in src/transport/*.cu.
#   src/reference/     base/, common/, reference/.
#   src/core/          anything in src/ except export/, and include/.
#   src/export/        anything in src/ and include/: the interface it re-exports.
#   tools/, bench/     include/ (arfusion/...), src/export/ (export/...), and files of tools/ or
#                      bench/ (beside the including file or in tools/common/).
#   tools/stress/      include/ (arfusion/...) and its own files only: the soak is written as an
#                      outside program is (tools/stress/README.md).
#   examples/          include/ only.
#   tests/             anything (not checked).
#
# The Python package python/arfusion has one rule: no import cycle among its modules, imports
# inside functions included (scripts/check_python_imports.py, which this script runs).
#
# --self-test: the lint against planted faults, in a copy of the checked files (a temporary git
# work tree; the real tree is never touched): the copy passes as is; with a forbidden include added
# to every file of src/kernels/ (the launcher, then the registry: device code never reaches up to
# them) and new files of other layers that include what their layer may not (an untracked file is
# checked too), it fails naming each of those files. Exit 0 when every planted fault is caught.
# Run by .ci/run.
set -euo pipefail
cd "$(dirname "$0")/.."

if [[ ${1:-} == --self-test ]]; then
  copy=$(mktemp -d)
  trap 'rm -rf "$copy"' EXIT
  git ls-files -z --cached --others --exclude-standard -- include src tools bench examples \
      scripts/check_layers.sh scripts/check_python_imports.py python/arfusion |
    while IFS= read -r -d '' f; do [[ -f $f ]] && printf '%s\0' "$f"; done |
    tar --null -T - -cf - | tar -xf - -C "$copy"
  git -C "$copy" init -q
  lint() { bash "$copy/scripts/check_layers.sh" >"$copy/.out" 2>&1; }
  if ! lint; then
    echo "check_layers --self-test: the unmodified copy fails:"
    cat "$copy/.out"
    exit 1
  fi
  mapfile -t kernel_files < <(cd "$copy" && git ls-files --others -- 'src/kernels/*')
  if ((${#kernel_files[@]} == 0)); then
    echo "check_layers --self-test: no file in src/kernels/"
    exit 1
  fi
  # layer file -> the include planted in it
  declare -A planted=(
    [src/kernels/planted_fault.cuh]=policy/plan.h
    [src/common/planted_fault.h]=kernels/vec.cuh
    [src/launch/planted_fault.h]=policy/plan.h
    [src/policy/planted_fault.h]=launch/kernel_set.h
    [src/transport/planted_fault.h]=launch/launch.h
    [src/base/planted_fault.h]=common/kernel_params.h
    [tools/planted_fault.h]=policy/policy.h
  )
  bad=0
  for inc in launch/launch.h launch/kernel_set.h; do
    for f in "${kernel_files[@]}"; do
      cp "$copy/$f" "$copy/$f.saved"
      printf '#include "%s"\n' "$inc" >>"$copy/$f"
    done
    for f in "${!planted[@]}"; do printf '#pragma once\n#include "%s"\n' "${planted[$f]}" >"$copy/$f"; done
    if lint; then
      echo "check_layers --self-test: NOT CAUGHT: the lint passed with every planted include ($inc)"
      bad=1
    fi
    for f in "${kernel_files[@]}" "${!planted[@]}"; do
      if ! grep -q "check_layers: $f:" "$copy/.out"; then
        echo "check_layers --self-test: NOT CAUGHT: the include planted in $f"
        bad=1
      fi
    done
    for f in "${kernel_files[@]}"; do mv "$copy/$f.saved" "$copy/$f"; done
    for f in "${!planted[@]}"; do rm "$copy/$f"; done
  done
  ((bad == 0)) || exit 1
  echo "check_layers --self-test: ok (includes of launch/ planted in all ${#kernel_files[@]} files of" \
    "src/kernels/ and ${#planted[@]} forbidden includes in new files of other layers: all caught)"
  exit 0
fi

fail=0
root=$(pwd)
layers="base common core kernels launch policy transport reference export"

violation() {  # file line include why
  echo "check_layers: $1:$2: #include \"$3\": $4"
  fail=1
}

# The rule of a directory of src/ or include/, as space-separated allowed prefixes (a prefix
# ending in / allows a directory, anything else one exact header).
allowed_in() {
  case "$1" in
    include) echo "arfusion/" ;;
    base) echo "base/ arfusion/arfusion.h" ;;
    common) echo "base/ common/" ;;
    kernels) echo "base/ common/ kernels/" ;;
    launch) echo "base/ common/ kernels/ launch/" ;;
    policy) echo "base/ common/ policy/" ;;
    transport) echo "base/ common/kernel_params.h common/protocol_index.h transport/ arfusion/arfusion.h" ;;
    reference) echo "base/ common/ reference/" ;;
    core) echo "base/ common/ launch/ policy/ transport/ reference/ core/ arfusion/" ;;
    export) echo "base/ common/ launch/ policy/ transport/ reference/ core/ export/ arfusion/" ;;
    *) echo "" ;;
  esac
}

matches_rule() {  # include rule...
  local inc=$1 p
  shift
  for p in "$@"; do
    if [[ $p == */ ]]; then
      [[ $inc == "$p"* ]] && return 0
    else
      [[ $inc == "$p" ]] && return 0
    fi
  done
  return 1
}

is_internal() {  # include: names a header of a src/ layer
  local first=${1%%/*}
  [[ $1 == */* ]] && [[ " $layers " == *" $first "* ]]
}

check_library_file() {  # file line include quoted(0/1) dir
  local file=$1 line=$2 inc=$3 quoted=$4 dir=$5
  if [[ $quoted == 0 ]] && ! is_internal "$inc" && [[ $inc != arfusion/* ]]; then
    return 0  # a system or third-party header
  fi
  if [[ ! -f src/$inc && ! -f include/$inc ]]; then
    violation "$file" "$line" "$inc" "no such header under src/ or include/"
    return 0
  fi
  # shellcheck disable=SC2046
  if ! matches_rule "$inc" $(allowed_in "$dir"); then
    violation "$file" "$line" "$inc" "$dir may include only: $(allowed_in "$dir")"
  fi
}

check_tool_file() {  # file line include quoted(0/1)
  local file=$1 line=$2 inc=$3 quoted=$4
  [[ $inc == arfusion/* || $inc == export/* ]] && return 0
  if [[ $quoted == 0 ]]; then
    is_internal "$inc" && violation "$file" "$line" "$inc" \
      "tools and bench include only include/, src/export/ and their own files"
    return 0
  fi
  local here resolved
  here=$(dirname "$file")
  for candidate in "$here/$inc" "tools/common/$inc"; do
    if [[ -f $candidate ]]; then
      resolved=$(realpath -m --relative-to="$root" "$candidate")
      if [[ $resolved == tools/* || $resolved == bench/* ]]; then
        return 0
      fi
    fi
  done
  violation "$file" "$line" "$inc" "tools and bench include only include/, src/export/ and their own files"
}

check_outside_file() {  # file line include quoted(0/1): tools/stress
  local file=$1 line=$2 inc=$3 quoted=$4
  [[ $inc == arfusion/* ]] && return 0
  if [[ $quoted == 0 ]] && ! is_internal "$inc" && [[ $inc != export/* ]]; then
    return 0  # a system or third-party header
  fi
  if [[ $quoted == 1 && -f $(dirname "$file")/$inc ]]; then
    [[ $(realpath -m --relative-to="$root" "$(dirname "$file")/$inc") == tools/stress/* ]] && return 0
  fi
  violation "$file" "$line" "$inc" "tools/stress includes only include/ and its own files (an outside program)"
}

checked=0
while IFS= read -r file; do
  case "$file" in
    include/*) kind=library dir=include ;;
    src/*)
      dir=${file#src/}
      dir=${dir%%/*}
      kind=library
      if [[ -z $(allowed_in "$dir") ]]; then
        echo "check_layers: $file: src/$dir/ is not a known layer (add its rule to this script)"
        fail=1
        continue
      fi
      ;;
    tools/stress/*) kind=outside dir= ;;
    tools/* | bench/*) kind=tool dir= ;;
    examples/*) kind=library dir=include ;;
    *) continue ;;
  esac
  checked=$((checked + 1))
  lineno=0
  while IFS= read -r text; do
    lineno=$((lineno + 1))
    [[ $text =~ ^[[:space:]]*#[[:space:]]*include[[:space:]]*([\"\<])([^\"\>]+)[\"\>] ]] || continue
    inc=${BASH_REMATCH[2]}
    quoted=0
    [[ ${BASH_REMATCH[1]} == '"' ]] && quoted=1
    if [[ $kind == library ]]; then
      check_library_file "$file" "$lineno" "$inc" "$quoted" "$dir"
    elif [[ $kind == outside ]]; then
      check_outside_file "$file" "$lineno" "$inc" "$quoted"
    else
      check_tool_file "$file" "$lineno" "$inc" "$quoted"
    fi
  done <"$file"
done < <(git ls-files --cached --others --exclude-standard -- include src tools bench examples |
         grep -E '\.(h|hpp|c|cc|cpp|cu|cuh)$' | sort -u)

python3 scripts/check_python_imports.py python/arfusion || fail=1

if [[ $fail != 0 ]]; then
  echo "check_layers: FAILED (rules: the header of scripts/check_layers.sh, docs/architecture.md \"Layers\")"
  exit 1
fi
echo "check_layers: ok ($checked files)"
