// NCCL, loaded at run time. The bench does not link NCCL: a build machine without it still builds
// the bench, and a run without it still measures arfusion (the NCCL column is skipped, with why).
// <nccl.h> is included for its types only.
#pragma once

#include <nccl.h>

#include <string>

namespace arf::bench {

struct NcclApi {
  void* handle = nullptr;
  ncclResult_t (*comm_init_all)(ncclComm_t*, int, const int*) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  const char* (*get_error_string)(ncclResult_t) = nullptr;
  // Resolved so that a caller driving several ranks from one thread can group their calls; the
  // bench drives each rank from its own thread and does not need them.
  ncclResult_t (*group_start)() = nullptr;
  ncclResult_t (*group_end)() = nullptr;
  int version = 0;  // ncclGetVersion, when the library has it
  std::string path;
};

// dlopen()s $ARF_NCCL_LIBRARY, or libnccl.so.2, and resolves the entry points above.
// Returns "" or why NCCL is unavailable. Never unloads (NCCL keeps threads alive until exit).
std::string load_nccl(NcclApi* api);

}  // namespace arf::bench
