// Device memory that other processes can map: the CUDA virtual memory management API (cuMem*)
// with POSIX file-descriptor handles, for the ipc transport's workspaces (transport/ipc.h).
//
// The driver API is reached through the runtime's cudaGetDriverEntryPointByVersion, so the library
// does not link libcuda: a machine without a driver (the CPU-only CI) still loads the library and
// runs its CPU tests, and only these calls fail there (Unsupported, with the reason).
//
// Lifetime: physical memory lives while any process holds a handle or a mapping of it, so a rank
// may release its own allocation while a peer's kernel still writes into it: the peer's mapping
// keeps the memory alive until the peer releases its import.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"

namespace arf::cumem {

// One mapping of a cuMem allocation in this process, read/write for `device`.
struct Mapping {
  uint64_t handle = 0;  // CUmemGenericAllocationHandle (own allocation or imported)
  void* ptr = nullptr;  // mapped virtual address, `bytes` long
  size_t bytes = 0;     // a multiple of the allocation granularity
  int device = -1;      // the device whose access was enabled (and, for create, the owner)
};

// Unsupported with the reason when `device` cannot create POSIX-FD-exportable cuMem allocations
// (no driver, driver too old, virtual memory management or FD handles not supported).
Status check_supported(int device);

// Allocates at least min_bytes on `device`, exportable as a POSIX file descriptor, maps it and
// enables read/write access from `device`. Contents are undefined. Needs `device`'s primary context
// (the caller has made it current with the runtime). On failure nothing stays allocated.
Result<Mapping> create_exportable(int device, size_t min_bytes);

// A new file descriptor (owned by the caller) that another process can import.
Result<int> export_fd(const Mapping& mapping);

// Imports a peer's allocation from `fd` (which stays owned by the caller), maps `bytes` of it
// (the exporter's Mapping::bytes) and enables read/write access from `device` (this process's).
// Unsupported when the import or the access cannot be had (e.g. no P2P path between the devices).
Result<Mapping> import_fd(int fd, size_t bytes, int device);

// Unmaps, frees the address range and releases the handle. Safe on an empty Mapping; resets it.
// The caller guarantees no kernel of this process still uses the mapping.
Status release(Mapping* mapping);

}  // namespace arf::cumem
