#!/usr/bin/env bash
# Registers, stack frame, spills and static instruction count of every kernel of the library, from
# the real sm_90 ptxas (-Xptxas -v) and the cubin's sections (readelf: .text bytes / 16, the size of
# an sm_90 instruction, its end padding included), no GPU and no cuobjdump needed.
#   dev/profile/ptxas_report.sh [-r REV] OUT.tsv      compile src/launch/*.cu and the kernel set's units
#                                                 (write_kernel_units.cc) of the working tree (or
#                                                 of commit REV, exported with git archive) -> one
#                                                 row per kernel: name, regs, stack, spill st, spill
#                                                 ld, SASS instructions
#                                                 and the report OUT.md beside it (--report)
#   dev/profile/ptxas_report.sh --report T.tsv        the Markdown report of a table: what the columns
#                                                 mean, the totals, the kernels that spill, every row
#   dev/profile/ptxas_report.sh --compare A.tsv B.tsv markdown table of A (before) against B (after)
# ARF_PTXAS_UNITS=GLOB compiles only the units whose file name matches (e.g. '*quant*': the
# quantized kernels, about half the time of all); --compare then lists the others as absent.
# Kernel names are demangled and shortened: "lamport w1 bf16 quant<fp8_group> v2" is
# oneshot_lamport_kernel<__nv_bfloat16, 1, ResidualRmsNormQuantEpilogue<.., 2, Fp8PerGroupQuant>>.
# Flags are the build's device flags (CMakeLists.txt) with -cubin: ptxas sees what the build's does.
set -euo pipefail
cd "$(dirname "$0")/../.."

if [[ ${1:-} == --report ]]; then
  exec python3 - "$2" <<'EOF'
import sys
rows = []
for line in open(sys.argv[1]):
    name, *vals = line.rstrip("\n").split("\t")
    rows.append((name, *[int(v) for v in vals]))
spilling = sorted((r for r in rows if r[3] or r[4]), key=lambda r: (-r[3], r[0]))
print("# ptxas report: registers, stack, spills and static instructions of every kernel (sm_90)\n")
print(f"Table: `{sys.argv[1]}`, written by `dev/profile/ptxas_report.sh` (the real sm_90 ptxas with the")
print("build's device flags, no GPU). Columns: registers a thread; stack frame, spill stores and spill")
print("loads in bytes; static SASS instructions (the cubin's .text section over 16 bytes, end padding")
print("included). Names: `lamport wN` = oneshot_lamport_kernel at world N (w1: the streaming kernel),")
print("`local` = local_epilogue_kernel, `vN` = N 16-byte vectors per thread, `norm` = residual + RMSNorm,")
print("`quant<p>` = residual + RMSNorm + quantization p, `quant_only<p>` = a split call's second kernel.\n")
print(f"Kernels: {len(rows)}; with spills: {len(spilling)}; spill stores summed: "
      f"{sum(r[3] for r in rows):,} B; spill loads summed: {sum(r[4] for r in rows):,} B; "
      f"SASS instructions summed: {sum(r[5] for r in rows if len(r) > 5):,}.\n")
def table(title, rs):
    print(f"## {title}\n")
    print("| kernel | regs | stack B | spill st B | spill ld B | SASS instr |")
    print("|---|---|---|---|---|---|")
    for r in rs:
        print("| " + " | ".join(str(v) for v in r) + (" | ? |" if len(r) < 6 else " |"))
    print()
table("Kernels that spill (most spill stores first)", spilling)
table("Every kernel", rows)
EOF
fi

if [[ ${1:-} == --compare ]]; then
  exec python3 - "$2" "$3" <<'EOF'
import sys
def load(path):  # tables written before the instruction column have 4 values a row
    rows = {}
    for line in open(path):
        name, *vals = line.rstrip("\n").split("\t")
        rows[name] = [int(v) for v in vals] + [None] * (5 - len(vals))
    return rows
a, b = load(sys.argv[1]), load(sys.argv[2])
def show(v): return "?" if v is None else f"{v}"
def cell(old, new, i):
    if old is None: return f"- / {show(new[i])}"
    if new is None: return f"{show(old[i])} / -"
    return show(old[i]) if old[i] == new[i] else f"**{show(old[i])} -> {show(new[i])}**"
print("| kernel | regs | stack B | spill st B | spill ld B | SASS instr |")
print("|---|---|---|---|---|---|")
for name in sorted(set(a) | set(b)):
    o, n = a.get(name), b.get(name)
    print(f"| {name} | " + " | ".join(cell(o, n, i) for i in range(5)) + " |")
def total(rows, i): return sum(v[i] for v in rows.values() if v[i] is not None)
def spilling(rows): return sum(1 for v in rows.values() if v[2] or v[3])
print()
print(f"kernels: {len(a)} -> {len(b)}; with spills: {spilling(a)} -> {spilling(b)}; "
      f"spill stores summed: {total(a, 2)} -> {total(b, 2)} B; spill loads summed: "
      f"{total(a, 3)} -> {total(b, 3)} B")
both = [k for k in set(a) & set(b) if a[k][4] is not None and b[k][4] is not None]
if both:
    print(f"SASS instructions summed over the {len(both)} kernels counted in both: "
          f"{sum(a[k][4] for k in both)} -> {sum(b[k][4] for k in both)}")
EOF
fi

rev=
if [[ ${1:-} == -r ]]; then rev=$2; shift 2; fi
out=${1:?usage: dev/profile/ptxas_report.sh [-r REV] OUT.tsv | --compare A.tsv B.tsv}
nvcc=${NVCC:-/usr/local/cuda/bin/nvcc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
root=$PWD
if [[ -n $rev ]]; then
  git archive "$rev" src include cmake | tar -x -C "$tmp"
  root=$tmp
fi
# The launcher's unit (its own kernel, the shared-device gate): src/launch/, src/kernels/ before.
shopt -s nullglob
units=("$root"/src/launch/*.cu "$root"/src/kernels/*.cu)
shopt -u nullglob
# The kernel set's units, as the build writes them: by src/launch/write_kernel_units.cc, or (older
# commits) by cmake/kernel_rows.cmake in script mode.
if [[ -f $root/src/launch/write_kernel_units.cc ]]; then
  mkdir -p "$tmp/units"
  "${CXX:-c++}" -std=c++20 -I"$root/src" -I"$root/include" "$root/src/launch/write_kernel_units.cc" \
    -o "$tmp/write_kernel_units"
  "$tmp/write_kernel_units" "$tmp/units"
  units+=("$tmp"/units/row_*.cu)
elif [[ -f $root/src/launch/kernel_set.def ]]; then
  cmake -DARF_KERNEL_SET="$root/src/launch/kernel_set.def" -DARF_KERNEL_UNIT_DIR="$tmp/units" \
    -P "$root/cmake/kernel_rows.cmake" >/dev/null
  units+=("$tmp"/units/row_*.cu)
fi
if [[ -n ${ARF_PTXAS_UNITS:-} ]]; then
  kept=()
  for u in "${units[@]}"; do
    # shellcheck disable=SC2053  # the glob is the point
    [[ $(basename "$u") == $ARF_PTXAS_UNITS ]] && kept+=("$u")
  done
  ((${#kept[@]})) || { echo "ptxas_report: no unit matches ARF_PTXAS_UNITS=$ARF_PTXAS_UNITS" >&2; exit 1; }
  units=("${kept[@]}")
fi
printf '%s\n' "${units[@]}" | xargs -P "$(nproc)" -I{} sh -c \
  '"$0" -I"$1/include" -I"$1/src" -O3 -DNDEBUG -arch=sm_90 -cubin --expt-relaxed-constexpr \
     -std=c++20 -Xptxas -v -o "$3/$(basename "$2").cubin" "$2" > "$3/$(basename "$2").log" 2>&1 ||
   { cat "$3/$(basename "$2").log" >&2; exit 255; }' "$nvcc" "$root" {} "$tmp"
cat "$tmp"/*.log > "$out.log"
python3 -c '
import glob, os, re, subprocess, sys
text = open(sys.argv[1]).read()
# Static instructions per kernel: its .text section, 16 bytes an sm_90 instruction.
instructions = {}
for cubin in glob.glob(os.path.join(sys.argv[2], "*.cubin")):
    sections = subprocess.run(["readelf", "-S", "-W", cubin], capture_output=True, text=True).stdout
    for m in re.finditer(r"\]\s+\.text\.(\S+)\s+PROGBITS\s+\S+\s+\S+\s+([0-9a-f]+)", sections):
        instructions[m.group(1)] = int(m.group(2), 16) // 16
# Entry function, then its "Function properties" line(s), then "Used N registers".
entries = re.findall(r"Compiling entry function .(\w+). for .sm_90.\n"
                     r"ptxas info\s+: Function properties for \w+\n"
                     r"\s+(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads\n"
                     r"ptxas info\s+: Used (\d+) registers", text)
names = subprocess.run(["c++filt"], input="\n".join(e[0] for e in entries), capture_output=True,
                       text=True, check=True).stdout.split("\n")
def compact(n):
    n = n.replace("arf::", "").replace("(KernelParams)", "").replace("__nv_bfloat16", "bf16")
    n = n.removeprefix("void ").replace("(anonymous namespace)::", "")
    n = n.replace("__half", "fp16")
    quant = {"Fp8PerTensorQuant": "fp8_tensor", "Fp8PerTokenQuant": "fp8_token",
             "Fp8PerGroupQuant": "fp8_group", "Fp4Quant<true>": "nvfp4", "Fp4Quant<false>": "mxfp4",
             "Nvfp4Quant": "nvfp4", "Mxfp4Quant": "mxfp4"}
    m = re.match(r"(\w+?)(?:_kernel)?<(bf16|fp16), (?:(\d+), )?(\w+)<(?:bf16|fp16), (\d+)(?:, (?!true|false)([\w<>]+))?(?:, (?:true|false))?>\s*>$", n)
    if not m: return n.replace(" ", "")
    kern, dt, world, epi, vecs, q = m.groups()
    kern = {"oneshot_lamport": "lamport", "oneshot_pull": "pull", "local_epilogue": "local",
            "streaming_epilogue": "streaming"}.get(kern, kern)
    epi = {"AllReduceEpilogue": "allreduce", "ResidualRmsNormEpilogue": "norm",
           "ResidualRmsNormQuantEpilogue": "quant", "QuantOnlyEpilogue": "quant_only"}.get(epi, epi)
    if q: epi += "<" + quant.get(q, q) + ">"
    return " ".join(x for x in [kern, "w" + world if world else None, dt, epi, "v" + vecs] if x)
rows = sorted((compact(n), e[4], e[1], e[2], e[3], str(instructions[e[0]])) for n, e in zip(names, entries))
sys.stdout.write("".join("\t".join(r) + "\n" for r in rows))
print(f"{len(rows)} kernels", file=sys.stderr)
' "$out.log" "$tmp" > "$out"
bash "$0" --report "$out" > "${out%.tsv}.md"
echo "ptxas_report: $out and ${out%.tsv}.md" >&2
