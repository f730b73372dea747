// The protocol's index and epoch arithmetic, __host__ __device__ so host code runs it too: its tests
// (tests/cpu/test_protocol_index.cc) and the protocol model, which takes its rules from here
// (tests/protocol_model). The reasons behind each rule are in protocol.cuh and docs/protocol.md;
// this file only computes.
#pragma once

#include <cstdint>

#include "common/kernel_params.h"

#include "base/host_device.h"

namespace arf::protocol {

// Lamport rotation. Call k reads buffer b(k); b(k+1) = (b(k)+1) % 3. At call k a rank clears the
// buffer it read at call k-1, i.e. (b+2) % 3, and a peer at most one call ahead writes (b+1) % 3.
ARF_HD constexpr uint32_t lamport_next_buffer(uint32_t buffer) { return (buffer + 1) % kLamportBuffers; }
ARF_HD constexpr uint32_t lamport_clear_buffer(uint32_t buffer) {
  return (buffer + kLamportBuffers - 1) % kLamportBuffers;
}

// Element offset of slot `src_rank` inside Lamport buffer `buffer`, 64-bit throughout.
ARF_HD constexpr int64_t lamport_slot_offset(uint32_t buffer, int src_rank, int world,
                                             int64_t slot_elems) {
  return (static_cast<int64_t>(buffer) * world + src_rank) * slot_elems;
}

// Barrier epochs are monotonic 32-bit counters compared modulo 2^32: "seen >= want" holds across the
// wrap as long as no peer is 2^31 barriers ahead (a peer is at most one barrier ahead).
ARF_HD constexpr bool epoch_reached(uint32_t seen, uint32_t want) {
  return static_cast<int32_t>(seen - want) >= 0;
}

// Incoming flag word of CTA `cta` (kGateRow: the shared-device gate) written by `src_rank`.
ARF_HD constexpr int flag_index(int cta, int src_rank) { return cta * kMaxRanks + src_rank; }

// A flag word holds the barrier (or gate) epoch in its low half and the writer's call index (low
// 32 bits) in its high half, stored and loaded as one 64-bit access so the pair is consistent.
ARF_HD constexpr uint64_t flag_word(uint32_t epoch, uint32_t call) {
  return static_cast<uint64_t>(call) << 32 | epoch;
}
ARF_HD constexpr uint32_t flag_epoch(uint64_t word) { return static_cast<uint32_t>(word); }
ARF_HD constexpr uint32_t flag_call(uint64_t word) { return static_cast<uint32_t>(word >> 32); }

// The per-call integrity rule of a barrier: when my wait for `want` ends, the peer's flag holds
// `want` written in my call, or `want + 1` written by the peer's next barrier, which is either
// later in my call or the first barrier of the next call (a peer can be at most one barrier
// ahead: passing a barrier needs my flag). Anything else means the ranks paired CTAs of
// different calls.
ARF_HD constexpr bool barrier_call_consistent(uint64_t seen, uint32_t want, uint32_t my_call) {
  const uint32_t e = flag_epoch(seen), c = flag_call(seen);
  if (e == want) return c == my_call;
  return e == want + 1 && (c == my_call || c == my_call + 1);
}

// The Lamport slot header of (buffer, CTA, source rank) in the verify region: the source's call
// index, written before its data, so a reader that saw the data sees this call's header or later.
ARF_HD constexpr int64_t lamport_header_index(uint32_t buffer, int cta, int src_rank) {
  return (static_cast<int64_t>(buffer) * kMaxCtas + cta) * kMaxRanks + src_rank;
}

// Two-shot: a row of row_vecs 16-byte vectors is split into `world` contiguous parts; part p
// (owned and reduced by rank p) is vectors [p * part, min((p + 1) * part, row_vecs)).
ARF_HD constexpr int twoshot_part_vecs(int row_vecs, int world) { return (row_vecs + world - 1) / world; }
ARF_HD constexpr int twoshot_owner(int vec, int part_vecs) { return vec / part_vecs; }

// Element offset, inside one source slot of the owner's scatter inbox, of (row, vector j of the part).
ARF_HD constexpr int64_t twoshot_scatter_offset(int64_t row, int j, int part_vecs) {
  return (row * part_vecs + j) * kElemsPerVec;
}

}  // namespace arf::protocol
