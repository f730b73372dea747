// One rank's workspace: the named regions of kernel_params.h carved out of ONE device allocation,
// plus the host-mapped ErrorRecord a bounded wait fills in. The layout is a pure function of the
// communicator's capacity (CPU-testable); allocation and initialisation need the rank's device.
// All sizes are 64-bit: FlashInfer shipped an illegal-address bug from a 32-bit workspace size
// (flashinfer #1223) at max_token 131072.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "kernels/kernel_params.h"

namespace arf {

// Byte offsets of each region from the allocation base, each 256-byte aligned, and element counts.
struct WorkspaceLayout {
  int world = 1;
  DType dtype = DType::kBf16;
  int64_t lamport_slot_elems = 0;  // oneshot_max_tokens * max_hidden: one source rank's slot
  int64_t scatter_slot_elems = 0;  // max_tokens * ceil(max_hidden / 8 / world) * 8
  int64_t capacity_elems = 0;      // max_tokens * max_hidden: pull and gather regions
  int64_t ctrl_offset = 0;         // ControlBlock
  int64_t flags_offset = 0;        // uint32 [kMaxCtas][kMaxRanks]
  int64_t lamport_offset = 0;      // [kLamportBuffers][world][lamport_slot_elems]
  int64_t pull_offset = 0;         // [capacity_elems]
  int64_t scatter_offset = 0;      // [world][scatter_slot_elems]
  int64_t gather_offset = 0;       // [capacity_elems]
  // [capacity_elems], local: the rows between the two kernels of a quantized call at fallback
  // level 2 or 3 when the caller passes no norm_out (KernelParams::scratch). Never peer-visible.
  int64_t scratch_offset = 0;
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

// A rank's allocated workspace. A plain handle (copyable): ownership is explicit, through
// free_workspace, because after the rendezvous the LAST rank to leave frees every rank's workspace
// (local.h), which may be a different thread than the one that allocated it.
struct Workspace {
  int device = -1;
  WorkspaceLayout layout;
  void* base = nullptr;  // device allocation of layout.total_bytes
  ErrorRecord* error_host = nullptr;    // pinned, host-mapped, portable
  ErrorRecord* error_device = nullptr;  // the same record as the device sees it

  ControlBlock* ctrl() const;
  uint32_t* flags() const;
  void* lamport() const;
  void* pull() const;
  void* scatter() const;
  void* gather() const;
  void* scratch() const;
};

// Allocates and initialises the workspace on `device` (makes it current): ControlBlock and flags
// zeroed, Lamport buffers filled with -0.0 (the "not yet written" sentinel), ErrorRecord zeroed.
// Synchronizes before returning, so a peer that receives these pointers never sees uninitialised
// memory. On failure nothing stays allocated. Not graph-capturable.
Result<Workspace> allocate_workspace(const WorkspaceLayout& layout, int device);

// Frees what allocate_workspace allocated (sets the workspace's device first) and resets the handle.
// Safe on an empty handle. The caller guarantees no kernel still uses the memory.
Status free_workspace(Workspace* workspace);

}  // namespace arf
