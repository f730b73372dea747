// oneshot_lamport: every rank pushes its input rows into slot[rank] of every peer's current Lamport
// buffer, then polls its OWN buffer until no -0.0 sentinel remains, reduces in rank order 0..N-1 and
// runs the epilogue. No barrier: the protocol (three rotating buffers, lazy clear) is in protocol.cuh.
// At world 1 this is the streaming epilogue kernel (no push, no poll, no protocol state:
// streaming_epilogue.cuh).
#pragma once

#include "kernels/debug_stall.cuh"
#include "kernels/pdl.cuh"
#include "kernels/protocol.cuh"
#include "kernels/row_epilogue.cuh"
#include "kernels/streaming_epilogue.cuh"

namespace arf {

// Clears (to -0.0) what the previous Lamport call wrote into the buffer now two calls from reuse.
// Spread over every thread of the grid; our own slot is never written (own data stays local).
template <int kWorld>
__device__ __forceinline__ void lamport_clear_previous(const KernelParams& p,
                                                       const protocol::LamportState& s) {
#if defined(ARF_NEGATIVE_CONTROL_NO_LAMPORT_CLEAR)
  return;  // negative control only (cmake/stress.cmake): stale slots; arfusion-stress must catch it
#endif
  const int64_t vecs_per_slot = s.clear_elems / kElemsPerVec;
  const int64_t total = vecs_per_slot * (kWorld - 1);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += stride) {
    int slot = static_cast<int>(i / vecs_per_slot);
    slot += (slot >= p.rank);  // skip our own slot
    const int64_t vec = i - (i / vecs_per_slot) * vecs_per_slot;
    const int64_t offset =
        protocol::lamport_slot_offset(s.clear_buffer, slot, kWorld, p.lamport_slot_elems);
    st_v4(elem_ptr(p.peers.lamport[p.rank], offset + vec * kElemsPerVec), neg_zero_vec());
  }
}

template <typename T, int kWorld, int kVecs>
__device__ __forceinline__ void lamport_push_rows(const KernelParams& p, const protocol::LamportState& s) {
  const int64_t slot_offset = protocol::lamport_slot_offset(s.buffer, p.rank, kWorld, p.lamport_slot_elems);
  for (int64_t row = blockIdx.x; row < p.num_rows; row += gridDim.x) {
    const RowSlice rs = row_slice(p, row);
#pragma unroll
    for (int k = 0; k < kVecs; ++k) {
      if (!rs.owns(k)) continue;
      const uint4 x = canonicalize(ld_v4(elem_ptr(p.input, rs.elem(k))));
#pragma unroll
      for (int peer = 0; peer < kWorld; ++peer) {
        if (peer != p.rank) st_v4(elem_ptr(p.peers.lamport[peer], slot_offset + rs.elem(k)), x);
      }
    }
  }
}

// Polls our slots of vector k of a row until every peer's value has landed, then sums in rank order.
template <typename T, int kWorld>
__device__ __forceinline__ uint4 lamport_reduce_vec(const KernelParams& p, const protocol::LamportState& s,
                                                    int64_t elem) {
  uint4 vals[kWorld];
#pragma unroll
  for (int src = 0; src < kWorld; ++src) {
    vals[src] = (src == p.rank) ? canonicalize(ld_v4(elem_ptr(p.input, elem)))
                                : protocol::ld_volatile_v4(elem_ptr(
                                      p.peers.lamport[p.rank],
                                      protocol::lamport_slot_offset(s.buffer, src, kWorld, p.lamport_slot_elems) + elem));
  }
#pragma unroll
  for (int src = 0; src < kWorld; ++src) {
    if (src == p.rank || !has_neg_zero(vals[src])) continue;
    const char* slot = elem_ptr(p.peers.lamport[p.rank],
                                protocol::lamport_slot_offset(s.buffer, src, kWorld, p.lamport_slot_elems) + elem);
    protocol::spin_until(
        [&] {
          vals[src] = protocol::ld_volatile_v4(slot);
          return !has_neg_zero(vals[src]);
        },
        p, src, Phase::kLamportPoll, s.buffer);
  }
  float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
  for (int src = 0; src < kWorld; ++src) add_to<T>(acc, vals[src]);
  return round_sum<T>(acc);
}

// Thread map: CTA b owns rows b, b + G, ...; thread t owns vectors t + k*B, k < Epilogue::kVecs, of
// each row (RowSlice).
template <typename T, int kWorld, typename Epilogue>
__global__ void __launch_bounds__(kMaxBlockThreads, kMinCtasPerSm) oneshot_lamport_kernel(const KernelParams p) {
  pdl_wait();
  if constexpr (kWorld == 1) {
    // Nothing to exchange: the epilogue over the (canonicalised) input, as a streaming kernel.
    stream_rows<Epilogue, true>(p);
  } else {
    const protocol::Entry entry = protocol::enter<true>(p);
    if (entry.aborted) return;
    const uint32_t call = static_cast<uint32_t>(entry.call);
    const protocol::LamportState s = entry.lamport;
    debug::stall_lamport(p, debug::StallPoint::kBeforePublish);
    protocol::lamport_publish_header<kWorld>(p, s.buffer, call);
    lamport_push_rows<T, kWorld, Epilogue::kVecs>(p, s);  // first, so peers can start reducing
    lamport_clear_previous<kWorld>(p, s);
    debug::stall_lamport(p, debug::StallPoint::kBeforeRead);
    for_each_owned_row<Epilogue>(p, [&](const RowSlice& rs, int k) {
      return lamport_reduce_vec<T, kWorld>(p, s, rs.elem(k));
    });
    debug::stall_lamport(p, debug::StallPoint::kBeforeArrive);
    // A failed check or wait leaves the index and the rotation alone: the communicator has failed.
    // One decision per CTA (call_exit has a barrier): another CTA may set the abort word meanwhile.
    if (!protocol::lamport_check_headers<kWorld>(p, s.buffer, call) ||
        __syncthreads_or(protocol::aborted(p)) != 0) {
      return;
    }
    protocol::call_exit(p, entry, true);
  }
  pdl_launch_dependents();
}

}  // namespace arf
