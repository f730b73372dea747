#!/usr/bin/env bash
# The kernel budget of a built library (ctest kernel_budget, label cpu; cmake/kernels.cmake
# registers it with the figures below for the configuration the budget was measured on):
#   - the library holds exactly the kernels src/launch/kernel_set.def declares (no kernel built
#     outside the list, none of the list missing);
#   - that count is within the kernel budget;
#   - the library file is within the size budget.
# Kernels are counted by their host entry points (nvcc gives every __global__ instantiation a
# host stub of the same name): the templates of the kernel set are arf::*_kernel<...>(KernelParams).
# Needs nm (binutils). Raising a budget is a reviewed change of cmake/kernels.cmake.
# Usage: check_kernel_budget.sh LIBRARY DECLARED_KERNELS KERNEL_BUDGET BYTES_BUDGET [NM]
# Exit: 0 within budget, 1 over it (or a count that differs from the list), 2 usage.
set -euo pipefail

if (($# < 4)); then
  echo "usage: $0 LIBRARY DECLARED_KERNELS KERNEL_BUDGET BYTES_BUDGET [NM]" >&2
  exit 2
fi
library=$1 declared=$2 kernel_budget=$3 bytes_budget=$4 nm=${5:-nm}

if [[ ! -f $library ]]; then
  echo "check_kernel_budget: $library does not exist (build it first)" >&2
  exit 2
fi

kernels=$("$nm" -C --defined-only "$library" |
  grep -cE '^[0-9a-f]+ [tTW] void arf::[a-z_]+_kernel<.*>\(arf::KernelParams\)$' || true)
bytes=$(stat -c %s "$library")
mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
budget_mib=$(awk -v b="$bytes_budget" 'BEGIN { printf "%.1f", b / 1048576 }')

echo "check_kernel_budget: $library: $kernels kernels (kernel_set.def: $declared, budget $kernel_budget)," \
  "$bytes bytes = $mib MiB (budget $bytes_budget = $budget_mib MiB)"
status=0
if ((kernels != declared)); then
  echo "check_kernel_budget: FAIL: the library has $kernels kernels, kernel_set.def declares $declared" >&2
  status=1
fi
if ((kernels > kernel_budget)); then
  echo "check_kernel_budget: FAIL: $kernels kernels exceed the budget of $kernel_budget (cmake/kernels.cmake)" >&2
  status=1
fi
if ((bytes > bytes_budget)); then
  echo "check_kernel_budget: FAIL: $bytes bytes exceed the budget of $bytes_budget (cmake/kernels.cmake)" >&2
  status=1
fi
exit $status
