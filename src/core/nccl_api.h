// NCCL for the `nccl` algorithm (ncclAllReduce + our epilogue kernel), loaded at run time: the
// library does not link NCCL, so a machine without it still loads arfusion and simply has no
// `nccl` algorithm (plans say why). <nccl.h> is included for its types only. The one NCCL loader
// of the project: arfusion-bench's NCCL column uses it too (export/tool_api.h).
#pragma once

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <string>

#include "arfusion/arfusion.h"
#include "base/status.h"
#include "common/kernel_params.h"

namespace arf::nccl {

struct Api {
  ncclResult_t (*get_unique_id)(ncclUniqueId*) = nullptr;
  ncclResult_t (*comm_init_rank_config)(ncclComm_t*, int, ncclUniqueId, int, ncclConfig_t*) = nullptr;
  ncclResult_t (*comm_get_async_error)(ncclComm_t, ncclResult_t*) = nullptr;
  ncclResult_t (*comm_abort)(ncclComm_t) = nullptr;
  ncclResult_t (*comm_destroy)(ncclComm_t) = nullptr;
  // NCCL 2.14+ (the algorithm's minimum); null in an older library, which api() then refuses.
  ncclResult_t (*comm_finalize)(ncclComm_t) = nullptr;
  ncclResult_t (*all_reduce)(const void*, void*, size_t, ncclDataType_t, ncclRedOp_t, ncclComm_t,
                             cudaStream_t) = nullptr;
  const char* (*get_error_string)(ncclResult_t) = nullptr;
  // For arfCommInitRankFromNccl: the caller's communicator's place, and the id broadcast.
  ncclResult_t (*comm_count)(const ncclComm_t, int*) = nullptr;
  ncclResult_t (*comm_user_rank)(const ncclComm_t, int*) = nullptr;
  ncclResult_t (*comm_cu_device)(const ncclComm_t, int*) = nullptr;
  ncclResult_t (*broadcast)(const void*, void*, size_t, ncclDataType_t, int, ncclComm_t,
                            cudaStream_t) = nullptr;
  // Not needed by the library (null when the NCCL build lacks it): arfusion-bench's baseline
  // makes its in-process communicators with it.
  ncclResult_t (*comm_init_all)(ncclComm_t*, int, const int*) = nullptr;
  int version = 0;  // ncclGetVersion
  std::string path;
};

// The NCCL library: dlopen()s $ARF_NCCL_LIBRARY, or libnccl.so.2, once (thread-safe), resolves
// every entry point above, and never unloads it (NCCL keeps threads alive until exit). Null with
// *why set when it cannot be loaded or lacks an entry point the library needs.
const Api* library(std::string* why);

// The NCCL of the `nccl` algorithm: library(), unless ARF_NCCL=0 in the environment disables it
// on purpose (then nothing is loaded), and only NCCL 2.14 or newer (the non-blocking config
// Comm::init fills). Null with *why set when NCCL cannot be used.
const Api* api(std::string* why);

// NCCL result -> Status (arfNcclError naming `what` and NCCL's text).
Status status(const Api& api, ncclResult_t result, const std::string& what);

// The outcome of an NCCL call that returned `started`. A non-blocking communicator (the config
// Comm::init uses; a caller's may be one too) answers most calls with ncclInProgress while NCCL
// finishes them on its own thread, and takes its next call only once ncclCommGetAsyncError says
// they are done: polled here against timeout_seconds (Timeout naming `what`), never a hang.
Status settle(const Api& api, ncclComm_t comm, ncclResult_t started, const std::string& what,
              double timeout_seconds);

// Ends one rank's use of `comm`, bounded, following NCCL's teardown rules: with `abort`, or when
// the communicator does not finish in time, ncclCommAbort, which makes NCCL's kernels still
// waiting for peers give up (a kernel whose peer died never finishes on its own, and synchronizing
// the device first would wait for it forever); otherwise ncclCommFinalize (it flushes the
// communicator's work; polled against timeout_seconds: ncclCommGetAsyncError leaves
// ncclInProgress once NCCL is done), then ncclCommDestroy. Returns the first failure: Timeout
// naming ncclCommFinalize when it did not finish (the communicator was aborted instead), else
// NCCL's error. The handle is gone afterwards either way.
Status shut_down(const Api& api, ncclComm_t comm, bool abort, double timeout_seconds);

// ncclBfloat16 / ncclFloat16 for an activation dtype.
ncclDataType_t dtype_of(DType dtype);

// One rank's NCCL communicator, created without blocking and polled to completion against a
// deadline, so a peer that never joins costs a bounded wait (ncclCommAbort), never a hang.
class Comm {
 public:
  Comm() = default;
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  ~Comm();  // aborts a communicator that was not destroyed (errors dropped)

  // Collective over `world` ranks passing the same id. Timeout (naming the phase) when the
  // creation has not completed after timeout_seconds. max_ctas > 0 bounds NCCL's kernels to that
  // many CTAs (ncclConfig_t.maxCTAs; one rank per GPU, so the communicator's max_ctas as is).
  // Sets nothing current: the caller has made this rank's device current.
  Status init(const Api& api, const ncclUniqueId& id, int rank, int world, double timeout_seconds,
              int max_ctas = 0);
  bool ready() const { return comm_ != nullptr; }
  ncclComm_t get() const { return comm_; }
  // Stream-ordered all-reduce (sum) of `count` elements; enqueued (settled, see settle()), not
  // waited for on the stream.
  Status all_reduce(const void* in, void* out, size_t count, DType dtype, cudaStream_t stream) const;
  // shut_down: finalize + destroy, or abort (`abort`, or finalize did not finish within
  // timeout_seconds). Call before synchronizing the device (see shut_down). Idempotent.
  Status close(bool abort, double timeout_seconds);

 private:
  const Api* api_ = nullptr;
  ncclComm_t comm_ = nullptr;
  double timeout_seconds_ = 0;  // init's bound, also for each call's settling
};

// Where a caller's NCCL communicator puts this process, and a rendezvous id every rank of it
// agrees on: rank 0 draws a fresh one and broadcasts it over `comm` on `stream`, waited for against
// timeout_seconds (Timeout when a peer never joins the broadcast: the NCCL communicator is then in
// an unknown state). Collective over `comm`'s ranks.
struct NcclPlacement {
  int rank = 0;
  int world = 0;
  int device = -1;
  arfUniqueId id{};
};
Result<NcclPlacement> placement_from_nccl(const Api& api, ncclComm_t comm, cudaStream_t stream,
                                          double timeout_seconds);

}  // namespace arf::nccl
