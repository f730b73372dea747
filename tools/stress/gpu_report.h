// Host-only part of --verify gpu that the CPU tests exercise: the first bad record of the check
// kernels (gpu_check.h key fields, the bad element's bits and rank 0's) as the host verifier's
// Mismatch (verify.h), so both verifiers report the same text.
#pragma once

#include <cstdint>

#include "dataset.h"
#include "gpu_check.h"
#include "schedule.h"
#include "verify.h"

namespace arf::stress {

// The want bits of a comparison against the reference come from the host reference of the call's
// data set (the device reference is bitwise the same: test_gpu_check.cc); against rank 0 they are
// rank 0's bits.
Mismatch first_mismatch(const CallSpec& call, const gv::KeyFields& f, uint16_t got,
                        uint16_t rank0, const DataSet& set, int64_t hidden, DType dtype);

}  // namespace arf::stress
