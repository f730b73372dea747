// local_epilogue_kernel: the epilogue alone over rows another kernel produced, with no protocol.
// The second kernel of the unfused path, of the nccl algorithm and of fallback levels 2 and 3.
#pragma once

#include "kernels/pdl.cuh"
#include "kernels/streaming_epilogue.cuh"

namespace arf {

// The second kernel of the unfused path and of fallback levels 2 and 3: the epilogue over `input`
// (no protocol, any grid), as a streaming kernel. Same RowSlice and block size as the fused
// kernels -> bitwise the same rows. `input` is read raw: it is already an all-reduced (canonical)
// sum, or, for level 2's quantize-only epilogue, the norm, whose -0.0 must keep its sign as in the
// one-kernel level.
template <typename T, typename Epilogue>
__global__ void __launch_bounds__(kMaxBlockThreads, kMinCtasPerSm) local_epilogue_kernel(const KernelParams p) {
  pdl_wait();
  stream_rows<Epilogue, false>(p);
  pdl_launch_dependents();
}

}  // namespace arf
