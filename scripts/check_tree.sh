#!/usr/bin/env bash
# Tree checks that need no build (CI runs them first; well under a few seconds):
#   size        no tracked source file (.h .hpp .cc .cpp .cu .cuh .py) over 800 lines, the hard limit
#               of the style guide; a file that was already over it when the check came in is listed
#               in size_ceilings below and may not grow past its count then (it must be split).
#   references  (scripts/check_references.py) no tracked text file, Markdown and cmake/ included,
#               cites a document the repository does not hold or a tracker's numbers; every relative
#               link of a Markdown file resolves; every bench/results/... path a Markdown file names
#               exists. A comment or a page states the reason itself.
# Usage: bash scripts/check_tree.sh              Exit: 0 clean, 1 offenders.
#        bash scripts/check_tree.sh --self-test  plants each fault in a scratch repository and shows
#                                                that the check fails on it (and passes without).
# ARF_CHECK_TREE_ROOT=DIR checks another tree (the self-test uses it).
set -euo pipefail
script_dir=$(cd "$(dirname "$0")" && pwd)

# ---- self-test: every check must fail on the fault it names -----------------------------------
self_test() {
  local tmp; tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' RETURN
  local failed=0
  plant() {  # plant NAME FILE CONTENT EXPECTED: a clean tree plus FILE must fail, saying EXPECTED
    local name=$1 file=$2 content=$3 expected=$4 repo="$tmp/$1" out
    mkdir -p "$repo/docs" "$repo/src" "$repo/bench/results/area"
    printf '# Record\n\nSee [the other page](other.md) and `bench/results/area/run.json`.\n' >"$repo/docs/index.md"
    printf '# Other\n' >"$repo/docs/other.md"
    printf '{}\n' >"$repo/bench/results/area/run.json"
    printf '// A comment that states its reason.\nint f() { return 1; }\n' >"$repo/src/f.cc"
    if [[ -n $file ]]; then mkdir -p "$(dirname "$repo/$file")"; printf '%b' "$content" >"$repo/$file"; fi
    git -C "$repo" init -q && git -C "$repo" add -A
    if out=$(ARF_CHECK_TREE_ROOT="$repo" bash "$script_dir/check_tree.sh" 2>&1); then
      if [[ -z $file ]]; then echo "self-test: clean tree passes"; return; fi
      echo "self-test: FAILED: planted $name ($file) and the check passed"; failed=1
    elif [[ -z $file ]]; then
      echo "self-test: FAILED: the clean tree does not pass:"; echo "$out"; failed=1
    elif grep -q -- "$expected" <<<"$out"; then
      echo "self-test: $name caught: $(grep -m1 -- "$expected" <<<"$out")"
    else
      echo "self-test: FAILED: planted $name, the check failed for another reason:"; echo "$out"; failed=1
    fi
  }
  plant clean "" "" ""
  plant bad-link docs/bad.md '[gone](missing.md)\n' "link 'missing.md' does not resolve"
  plant bad-anchor-link docs/bad.md '[gone](../src/nothing.cc#L3)\n' "does not resolve"
  plant outside-doc docs/bad.md 'The reason is in ../shared/design.md.\n' "outside the repository"
  plant design-md src/g.cc '// bitwise equal (design.md, numerics 3)\n' "design document"
  plant issue-number cmake/x.cmake '# works around issue 12\n' "an issue number"
  plant tracker-number src/h.cc '// as in vLLM #43616\n' "tracker"
  plant seed-write-up tests/t.py '# the seed-004 bug\n' "seed write-up"
  plant missing-result docs/bad.md 'Figure: `bench/results/area/gone.json`.\n' "does not exist"
  plant missing-result-glob README.md 'Files: bench/results/area/none_*.json\n' "matches no file"
  plant missing-result-braces README.md 'Files: `bench/results/area/{run,gone}.json`\n' "gone.json' does not exist"
  plant oversize src/big.cc "$(printf 'int x;\\n%.0s' $(seq 801))" "lines (limit 800)"
  return "$failed"
}
if [[ ${1:-} == --self-test ]]; then
  self_test && echo "self-test: OK (every planted fault caught)" && exit 0
  exit 1
fi

cd "${ARF_CHECK_TREE_ROOT:-$script_dir/..}"
max_lines=800
# path -> line count when the limit came in; shrink the number as the file shrinks, delete the
# entry once the file is under the limit. Empty: every tracked source is under the limit.
declare -A size_ceilings=()

list_files() {  # tracked files matching the globs (the working tree's copy), or every file outside git
  if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    git ls-files -z -- "$@" | while IFS= read -r -d '' f; do [[ -f $f ]] && printf '%s\n' "$f"; done
  else
    local args=() g
    for g in "$@"; do args+=(-o -path "./$g"); done
    find . -path ./build\* -prune -o -type f \( -false "${args[@]}" \) -print | sed 's#^\./##'
  fi
}

status=0

# ---- size -------------------------------------------------------------------------------------
size_offenders=0
while IFS= read -r f; do
  n=$(wc -l <"$f")
  ceiling=${size_ceilings[$f]:-}
  if [[ -n $ceiling ]]; then
    if ((n > ceiling)); then
      echo "check_tree: $f: $n lines, more than its recorded $ceiling (over the $max_lines-line limit: split it, never grow it)"
      size_offenders=$((size_offenders + 1))
    elif ((n > max_lines)); then
      echo "check_tree: note: $f: $n lines (limit $max_lines; recorded ceiling $ceiling)"
    fi
  elif ((n > max_lines)); then
    echo "check_tree: $f: $n lines (limit $max_lines)"
    size_offenders=$((size_offenders + 1))
  fi
done < <(list_files '*.h' '*.hpp' '*.cc' '*.cpp' '*.cu' '*.cuh' '*.py')
((size_offenders == 0)) || status=1

# ---- references --------------------------------------------------------------------------------
python3 "$script_dir/check_references.py" --root . || status=1

((status == 0)) && echo "check_tree: OK (size limit $max_lines lines; references)"
exit "$status"
