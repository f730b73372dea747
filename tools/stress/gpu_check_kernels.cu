// Kernels of --verify gpu (gpu_verifier.h). The comparison logic is gpu_check.h's, shared with
// the CPU test that checks it against the host verifier.
#include "gpu_verifier.h"

namespace arf::stress {
namespace {

constexpr int kThreads = 256;

struct DeviceSink {
  gv::CheckState* state;
  int call_in_step;
  __device__ void note(int rank, int kind, int64_t elem) {
    unsigned long long* count = gv::kind_is_cross_rank(kind) ? &state->call_cross[call_in_step]
                                                              : &state->call_wrong[call_in_step];
    atomicAdd(count, 1ull);
    atomicMin(&state->step_key,
              static_cast<unsigned long long>(gv::pack_key(call_in_step, rank, kind, elem)));
  }
};

// One block per row of the call: phase 1 (all-reduce / residual_out reference and checks) over the
// row's columns, the row's residual_out reference kept in shared memory; thread 0 sums its squares
// in column order (the CPU reference's order: norm_exact is then bitwise the CPU's); phase 2 checks
// norm_out.
__global__ void check_call_kernel(gv::CallView view, int call_in_step, gv::CheckState* state) {
  extern __shared__ uint16_t row_ref[];
  __shared__ double inv_rms;
  DeviceSink sink{state, call_in_step};
  const int64_t base = static_cast<int64_t>(blockIdx.x) * view.hidden;
  for (int64_t c = threadIdx.x; c < view.hidden; c += blockDim.x) {
    row_ref[c] = gv::check_sum_element(view, base + c, sink);
  }
  if (!view.norm) return;  // uniform over the block
  __syncthreads();
  if (threadIdx.x == 0) inv_rms = gv::inv_rms_of_row(row_ref, view.hidden, view.eps, view.fp16);
  __syncthreads();
  for (int64_t c = threadIdx.x; c < view.hidden; c += blockDim.x) {
    gv::check_norm_element(view, base + c, row_ref[c], inv_rms, sink);
  }
}

// One thread, after the step's check kernels on the same stream: per-call counts into the totals,
// the step's lowest key into the first bad record (kept from the first bad step on: steps run in
// call order), the scratch reset for the next step.
__global__ void finalize_kernel(FinalizeParams p, gv::CheckState* s) {
  for (int i = 0; i < p.num_calls; ++i) {
    const unsigned long long w = s->call_wrong[i], x = s->call_cross[i];
    s->wrong += w;
    s->cross += x;
    if (w + x > 0) ++s->bad_calls;
    s->call_wrong[i] = 0;
    s->call_cross[i] = 0;
  }
  ++s->steps;
  if (s->step_key == gv::kNoKey) return;
  if (s->first_valid == 0) {
    const gv::KeyFields f = gv::unpack_key(s->step_key);
    const int64_t at = p.offset[f.call_in_step] +
                       (gv::kind_is_out_b(f.kind) ? p.out_words[f.call_in_step] : 0) + f.elem;
    s->first_valid = 1;
    s->first_step = p.step;
    s->first_key = s->step_key;
    s->first_got = p.slot[f.rank][at];
    s->first_rank0 = p.slot[0][at];
  }
  s->step_key = gv::kNoKey;
}

}  // namespace

cudaError_t launch_check_call(const gv::CallView& view, int64_t tokens, int call_in_step,
                              gv::CheckState* state, cudaStream_t stream) {
  if (tokens <= 0) return cudaSuccess;
  const size_t shared = static_cast<size_t>(view.hidden) * sizeof(uint16_t);
  check_call_kernel<<<static_cast<unsigned>(tokens), kThreads, shared, stream>>>(view, call_in_step,
                                                                                  state);
  return cudaGetLastError();
}

cudaError_t launch_finalize(const FinalizeParams& params, gv::CheckState* state,
                            cudaStream_t stream) {
  finalize_kernel<<<1, 1, 0, stream>>>(params, state);
  return cudaGetLastError();
}

cudaError_t preload_check_kernels() {
  cudaFuncAttributes attributes;
  cudaError_t err = cudaFuncGetAttributes(&attributes, check_call_kernel);
  if (err != cudaSuccess) return err;
  return cudaFuncGetAttributes(&attributes, finalize_kernel);
}

}  // namespace arf::stress
