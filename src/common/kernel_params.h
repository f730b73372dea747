// The contract between host and kernels: the named per-rank workspace layout (ControlBlock, the
// peer-visible regions), the error record a bounded wait fills in, and the POD KernelParams every
// kernel receives by value. Included by host C++ (no CUDA-only constructs) and by device code.
#pragma once

#include <cstddef>
#include <cstdint>

#include "common/quant_layout.h"

namespace arf {

inline constexpr int kMaxRanks = 8;
// Flag slots per rank and the hard ceiling on any grid: one epoch counter and kMaxRanks incoming
// flag words per CTA index.
inline constexpr int kMaxCtas = 512;
// Grid ceiling of kernels without peer waits or per-CTA state (world-1 epilogue, the second kernel
// of a split call), under CUDA's 2^31-1 limit on gridDim.x; they run one wave of persistent CTAs
// (policy.h, protocol_free_grid_cap), far below it.
inline constexpr int kMaxProtocolFreeGrid = 1 << 30;
// Threads per CTA never exceed kMaxBlockThreads. Kernels are built with
// __launch_bounds__(kMaxBlockThreads, kMinCtasPerSm): ptxas holds every thread to 65536 /
// (kMaxBlockThreads x kMinCtasPerSm) = 64 registers, so an SM keeps kResidentThreadsPerSm threads
// of any kernel resident whatever its block: two CTAs of up to 512 threads, one of more. That is
// what lets the planner compute co-residency without asking the runtime (resident_ctas_per_sm).
inline constexpr int kMaxBlockThreads = 1024;
inline constexpr int kMinCtasPerSm = 1;
inline constexpr int kResidentThreadsPerSm = kMaxBlockThreads * kMinCtasPerSm;
// Each thread owns up to this many 16-byte vectors of a row: 1024 threads x 2 x 8 = 16384 columns.
// Two, not more: a third and fourth vector per thread is what made ptxas spill at 64 registers.
inline constexpr int kMaxVecsPerThread = 2;
inline constexpr int kElemsPerVec = 8;  // 16 bytes of bf16/fp16
inline constexpr int kMaxHidden = kMaxBlockThreads * kMaxVecsPerThread * kElemsPerVec;
// Blocks of up to this many threads run rows up to 8192 columns (2 vectors a thread), two CTAs per
// SM; only wider rows take larger blocks (launch_plan.h, block_threads_for_row).
inline constexpr int kNarrowBlockThreads = 512;
// Rows a streaming CTA keeps staged in shared memory (streaming_epilogue.cuh), each an input row and
// a residual_in row; the host sizes the launch's dynamic shared memory by the same count
// (kernel_set.h, staged_rows_smem_bytes). Three: one being computed while two are in flight.
inline constexpr int kStagedRowBuffers = 3;
// CTAs of `block` threads an SM is guaranteed to keep resident (the launch bounds above); register
// use is the only limit that matters here, as shared memory per CTA is sized to fit the same count
// (kernel_set.h, kMaxStagedRowsSmemBytes). Precondition: 0 < block <= kMaxBlockThreads.
constexpr int resident_ctas_per_sm(int block) { return kResidentThreadsPerSm / block; }
// CTAs per SM a kernel that waits for peers may take (policy.h, co_resident_grid_cap): those the
// SM keeps resident, at most two, the count every tuned limit and soak of blocks up to 512 threads
// was measured with. Precondition as above.
constexpr int co_resident_ctas_per_sm(int block) {
  return resident_ctas_per_sm(block) < 2 ? resident_ctas_per_sm(block) : 2;
}
// Why three: docs/protocol.md, "oneshot_lamport". The negative-control build
// ARF_NEGATIVE_CONTROL_TWO_LAMPORT_BUFFERS (cmake/stress.cmake) has two, so that a peer one call
// ahead pushes into the buffer a rank is still clearing: the soak must catch it.
#if defined(ARF_NEGATIVE_CONTROL_TWO_LAMPORT_BUFFERS)
inline constexpr int kLamportBuffers = 2;
#else
inline constexpr int kLamportBuffers = 3;
#endif
// The Lamport sentinel, -0.0 in both bf16 and fp16: an empty slot (the workspace is filled with it,
// data never carries it, vec.cuh canonicalises).
inline constexpr uint32_t kNegZeroBits = 0x8000u;

enum class DType : int { kBf16 = 0, kFp16 = 1, kFp32 = 2 };
enum class Algorithm : int {
  kAuto = 0,
  kOneshotLamport = 1,
  kOneshotPull = 2,
  kTwoshot = 3,
  kUnfused = 4,
  kNccl = 5,
};
enum class Pattern : int {
  kAllReduce = 0,
  kResidualRmsNorm = 1,
  kFp8PerTensor = 2,  // the quantized patterns are residual_rmsnorm + quantization (arfusion.h)
  kFp8PerToken = 3,
  kFp8PerGroup = 4,
  kNvfp4 = 5,
  kMxfp4 = 6,
};
inline constexpr bool is_quant_pattern(Pattern p) { return static_cast<int>(p) >= 2; }

// The codes a kernel writes into ErrorRecord::code: the values of arfTimeout and arfInternal
// (core/comm_errors.cc asserts that they are equal), spelled here so device code needs nothing
// from the public header.
inline constexpr int32_t kErrorCodeTimeout = 5;
inline constexpr int32_t kErrorCodeInternal = 6;
// A wait given up because a peer released this call (ControlBlock::release_from): arfCommFailed.
inline constexpr int32_t kErrorCodeReleased = 7;

// KernelParams::scale_format values: arfScaleFormat_t's (core/quant_rules.cc asserts that they are
// equal).
inline constexpr int kScaleFormatFp32 = 0;
inline constexpr int kScaleFormatUe8m0AsFp32 = 1;
inline constexpr int kScaleFormatUe8m0Packed = 2;

// Phases named in timeout and integrity reports (ErrorRecord::phase).
enum class Phase : int {
  kNone = 0,
  kLamportPoll = 1,
  kPullStartBarrier = 2,
  kPullEndBarrier = 3,
  kTwoshotScatterBarrier = 4,
  kTwoshotGatherBarrier = 5,
  kSharedDeviceGate = 6,  // ranks sharing a GPU: waiting for every device mate to reach the call
};

// One rank's protocol state, in its device workspace. Written only by this rank's kernels; peers
// read call_index and calls_entered for diagnostics (a timeout report says where the peer was).
struct ControlBlock {
  uint32_t lamport_buffer;    // buffer (0..2) the next Lamport call reads; rotated, never a raw count
                              // (a count % 3 would repeat a buffer when a 32-bit counter wraps)
  uint32_t exit_arrivals;     // CTAs finished with the current collective kernel (the last one
                              // advances call_index and, for Lamport, rotates the buffers)
  uint64_t lamport_calls;     // Lamport calls completed (debug-stall key, diagnostics)
  uint64_t lamport_clear_elems[kLamportBuffers];  // per-slot elements written into buffer i at its last use
  // Index of the next collective call of this rank: every collective kernel (any algorithm, eager
  // or graph replay) reads it at entry and its last CTA advances it at exit. Identical on every
  // rank at the same call; the call index of error reports and arfCommGetFirstLostCall.
  uint64_t call_index;
  uint64_t calls_entered;     // call_index + 1 of the last collective kernel whose CTA 0 started
  // Calls from this index on are released: their kernels give up at entry or at their next wait
  // (protocol.cuh, spin_until). Written by a peer's release kernel (kernels/release_kernel.cuh)
  // when that peer's host found that the ranks no longer issue the same calls; UINT64_MAX (set at
  // initialisation) while no call is released. Lowered, never raised.
  uint64_t release_from;
  uint32_t gate_epoch;        // shared-device gates this rank passed (protocol.cuh, shared_device_gate)
  uint32_t abort;             // set by the first expired wait: every later wait gives up at once
  uint32_t cta_epoch[kMaxCtas];  // per-CTA barrier epoch, monotonic (see PeerBarrier in protocol.cuh)
};

// Host-mapped (pinned) so the host can read it while a kernel is still spinning. The first error wins
// (`claim` is taken with a compare-and-swap); the detail fields are written next and `code` last,
// after a system fence, so a host that sees a non-zero code sees the complete record.
struct ErrorRecord {
  int32_t code;   // 0 = none, else kErrorCodeTimeout, kErrorCodeInternal for an integrity
                  // failure, kErrorCodeReleased (arfStatus_t values); published last
  int32_t claim;  // 0 until the first failing wait claims the record
  int32_t rank;
  int32_t peer;
  int32_t phase;  // Phase
  int32_t cta;
  uint32_t epoch;  // the CTA's barrier epoch, the Lamport buffer or the gate epoch at the time
  uint32_t seen_call;       // integrity failure: the (low 32 bits of the) call index the peer published
  uint64_t call;            // the recording rank's call index (ControlBlock::call_index)
  uint64_t peer_entered;    // the peer's calls_entered when the wait expired
  uint64_t peer_completed;  // the peer's call_index when the wait expired
};

// Flag words per rank: kMaxCtas rows of barrier flags, then one row of shared-device gate words.
inline constexpr int kFlagRows = kMaxCtas + 1;
inline constexpr int kGateRow = kMaxCtas;

// Words of the per-call integrity check of Lamport calls (verify_calls): one slot header per
// [kLamportBuffers][kMaxCtas][kMaxRanks] (buffer, CTA, source rank). Written by peers. Barriers
// carry the call index in their flag words instead (protocol_index.h, flag_word).
inline constexpr int64_t kVerifyWords = int64_t{kLamportBuffers} * kMaxCtas * kMaxRanks;

// Peer-visible regions of every rank, indexed by rank (own rank included).
struct PeerBuffers {
  void* lamport[kMaxRanks];   // [3][world][lamport_slot_elems], initialised to -0.0
  void* pull[kMaxRanks];      // oneshot_pull copy-in buffer [capacity elems]
  void* scatter[kMaxRanks];   // twoshot reduce-scatter inbox [world][scatter_slot_elems]
  void* gather[kMaxRanks];    // twoshot all-gather inbox [capacity elems]
  uint64_t* flags[kMaxRanks];  // [kFlagRows][kMaxRanks]: flags[cta * kMaxRanks + src_rank]
  uint32_t* verify[kMaxRanks];  // [kVerifyWords] (verify_calls)
  const ControlBlock* ctrl[kMaxRanks];  // read for diagnostics only
};

// Everything a kernel needs, passed by value (well under the 4 KiB parameter limit).
struct KernelParams {
  int rank;
  int world;
  int64_t num_elems;  // elements of this call per rank (rows * row_elems, last row may be partial)
  int row_elems;      // columns per row (hidden), multiple of 8
  int num_rows;       // ceil(num_elems / row_elems)

  const void* input;
  void* allreduce_out;
  const void* residual_in;
  void* residual_out;
  void* norm_out;
  const void* gamma;
  // Sandwich calls (arfFusedArgs_t::post_gamma): the all-reduced row is first normalised with this
  // gamma (same dtype, offset and eps as gamma), rounded, and that is what the residual is added
  // to. Null: the residual is added to the all-reduced row itself. Uniform over the grid, so
  // kernels branch on it at run time instead of doubling the kernel set.
  const void* post_gamma;
  int gamma_fp32;      // 1: gamma and post_gamma are fp32, else activation dtype
  float gamma_offset;  // 0, or 1 for (1 + gamma)
  float eps;

  // Quantized patterns (norm_out may be null there: no side output).
  void* quant_out;
  void* scale_out;
  const float* scale_in;  // FP8 per-tensor scale / NVFP4 global scale (device)
  int scale_layout;       // quant::ScaleLayout
  int scale_format;       // kScaleFormat* (arfScaleFormat_t; FP8 per-group)
  int scale_rule;         // quant::Fp8ScaleRule (arfFp8ScaleRule_t; FP8 per-token / per-group)
  // Where scale (t, c) goes in scale_out (FP8 per-group, NVFP4, MXFP4; zero otherwise), set by the
  // host once per call. Kernels read it from the parameter bank at each scale store, rare (one
  // lane in 2, 4 or 16) and not on the row's critical path, instead of holding the coefficients in
  // registers for the CTA's whole life: under the 64-register cap those registers were spills.
  quant::ScaleAddressing scale_addr;
  int fallback_level;     // 1, 2 or 3 for quantized patterns (launch.cu), else 1
  // Local [capacity] scratch rows: the all-reduced or normed rows between the kernels of fallback
  // levels 2 and 3 when the caller passes no norm_out. Only this rank touches it.
  void* scratch;

  PeerBuffers peers;
  int64_t lamport_slot_elems;  // stride between rank slots inside one Lamport buffer
  int64_t scatter_slot_elems;  // stride between source slots inside a scatter inbox
  ControlBlock* ctrl;          // this rank's control block (device memory)
  ErrorRecord* error;          // this rank's error record (host-mapped, device pointer)
  uint64_t timeout_ns;         // bound of every spin-wait
  // Host side only: launch with programmatic dependent launch (kernels/pdl.cuh).
  int programmatic_launch;
  int verify_calls;    // 1: the per-call integrity check (protocol.cuh)
  int norm_rounding;   // arfNormRounding_t: 1 rounds y * rsqrt(...) to the dtype before gamma
  // Bit r set: rank r shares this rank's GPU (and is not this rank). The shared-device gate waits
  // for exactly these ranks; 0 on a rank alone on its GPU (no gate is launched).
  uint32_t device_mates;
};

inline constexpr size_t dtype_bytes(DType t) { return t == DType::kFp32 ? 4 : 2; }
// As the tuning table's JSON, the kernel units' file names and the launcher's messages spell it.
inline constexpr const char* dtype_name(DType t) {
  return t == DType::kBf16 ? "bf16" : t == DType::kFp16 ? "fp16" : "fp32";
}

}  // namespace arf
