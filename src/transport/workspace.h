// One rank's workspace: the named regions of kernel_params.h carved out of ONE device allocation,
// plus the host-mapped ErrorRecord a bounded wait fills in. The layout is a pure function of the
// communicator's capacity (CPU-testable); allocation and initialisation need the rank's device.
// All sizes are 64-bit: FlashInfer shipped an illegal-address bug from a 32-bit workspace size
// at max_token 131072.
#pragma once

#include <cstdint>

#include "base/status.h"
#include "common/kernel_params.h"
#include "transport/cumem.h"

namespace arf {

// Byte offsets of each region from the allocation base, each 256-byte aligned, and element counts.
struct WorkspaceLayout {
  int world = 1;
  DType dtype = DType::kBf16;
  int64_t lamport_slot_elems = 0;  // oneshot_max_tokens * max_hidden: one source rank's slot
  int64_t scatter_slot_elems = 0;  // max_tokens * ceil(max_hidden / 8 / world) * 8
  int64_t capacity_elems = 0;      // max_tokens * max_hidden: pull and gather regions
  int64_t ctrl_offset = 0;         // ControlBlock
  int64_t flags_offset = 0;        // uint64 [kFlagRows][kMaxRanks]: barrier and gate flag words
  int64_t verify_offset = 0;       // uint32 [kVerifyWords]: Lamport slot headers (verify_calls)
  int64_t lamport_offset = 0;      // [kLamportBuffers][world][lamport_slot_elems]
  int64_t pull_offset = 0;         // [capacity_elems]
  int64_t scatter_offset = 0;      // [world][scatter_slot_elems]
  int64_t gather_offset = 0;       // [capacity_elems]
  // [capacity_elems], local: the rows between the two kernels of a quantized call at fallback
  // level 2 or 3 when the caller passes no norm_out (KernelParams::scratch). Never peer-visible.
  int64_t scratch_offset = 0;
  // uint64 [kMaxRanks]: slot r is written by rank r during the ipc transport's init probe.
  int64_t probe_offset = 0;
  int64_t total_bytes = 0;

  int64_t lamport_elems() const { return kLamportBuffers * world * lamport_slot_elems; }
};

inline constexpr int64_t kWorkspaceAlignBytes = 256;

// Pure. Preconditions (checked by the communicator's config validation, which this re-checks):
// world in [1, kMaxRanks], max_tokens >= 1, oneshot_max_tokens in [1, max_tokens], max_hidden a
// multiple of 8 in [8, kMaxHidden], dtype bf16/fp16. Returns InvalidArgument if the total would
// overflow int64.
Result<WorkspaceLayout> workspace_layout(int world, DType dtype, int64_t max_tokens,
                                         int64_t max_hidden, int64_t oneshot_max_tokens);

// Where a workspace's memory comes from.
enum class WorkspaceMemory {
  kPrivate,    // cudaMalloc + cudaHostAlloc'd ErrorRecord: ranks of one process (local transport)
  kShareable,  // cuMem exportable as a POSIX FD + ErrorRecord in a memfd: other processes map both
};

// A rank's allocated workspace, or (imported) a peer's as mapped into this process. A plain handle
// (copyable): ownership is explicit, through free_workspace, because after the rendezvous the LAST
// rank to leave frees every rank's workspace in the local transport (local.h), which may be a
// different thread than the one that allocated it.
struct Workspace {
  int device = -1;  // the device that accesses it (own: the owner's; imported: this process's)
  WorkspaceLayout layout;
  void* base = nullptr;  // device allocation of layout.total_bytes
  ErrorRecord* error_host = nullptr;    // pinned, host-mapped, portable (imported: read-only)
  ErrorRecord* error_device = nullptr;  // the same record as the device sees it (own only)
  WorkspaceMemory memory = WorkspaceMemory::kPrivate;
  bool imported = false;  // a peer's workspace mapped into this process
  cumem::Mapping mapping;  // kShareable: the device memory behind `base`
  int error_fd = -1;       // kShareable: the memfd holding the ErrorRecord

  ControlBlock* ctrl() const;
  uint64_t* flags() const;
  uint32_t* verify() const;
  void* lamport() const;
  void* pull() const;
  void* scatter() const;
  void* gather() const;
  void* scratch() const;
  uint64_t* probe() const;
};

// Allocates and initialises the workspace on `device` (makes it current): ControlBlock and flags
// zeroed but for release_from (UINT64_MAX: no call released), Lamport buffers filled with -0.0
// (the "not yet written" sentinel), ErrorRecord zeroed.
// counters_before_wrap > 0 (ARF_DEBUG_COUNTERS_NEAR_WRAP, a debug setting every rank must share):
// the call index starts at 2^32 - counters_before_wrap, and every CTA's barrier epoch, the gate
// epoch and every flag word's epoch at the same value modulo 2^32, so that a short run crosses
// their 32-bit wrap. Synchronizes before returning, so a peer that receives these pointers never
// sees uninitialised memory. On failure nothing stays allocated. Not graph-capturable.
Result<Workspace> allocate_workspace(const WorkspaceLayout& layout, int device,
                                     WorkspaceMemory memory = WorkspaceMemory::kPrivate,
                                     uint32_t counters_before_wrap = 0);

// Maps a peer's kShareable workspace into this process for `device`: `memory_fd` from the peer's
// export (mapping.bytes long), `error_fd` its ErrorRecord memfd (mapped read-only). Both fds stay
// the caller's. Unsupported when the memory cannot be imported or accessed from `device`.
Result<Workspace> import_workspace(const WorkspaceLayout& layout, int device, int memory_fd,
                                   size_t mapped_bytes, int error_fd);

// Frees (own) or unmaps (imported) what allocate_workspace / import_workspace made (sets the
// workspace's device first) and resets the handle. Safe on an empty handle. The caller guarantees
// no kernel of this process still uses the memory.
Status free_workspace(Workspace* workspace);

}  // namespace arf
