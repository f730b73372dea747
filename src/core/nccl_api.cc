// NCCL loaded at run time (nccl_api.h).
#include "core/nccl_api.h"

#include <dlfcn.h>

#include <chrono>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "base/cuda_check.h"

namespace arf::nccl {
namespace {

template <typename Fn>
void resolve(void* handle, const char* name, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*fn == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
}

struct Loaded {
  Api api;
  std::string why;  // non-empty: unusable
};

Loaded load_library() {
  Loaded l;
  const char* env = std::getenv("ARF_NCCL_LIBRARY");
  l.api.path = env != nullptr && env[0] != '\0' ? env : "libnccl.so.2";
  void* handle = dlopen(l.api.path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* e = dlerror();
    l.why = "dlopen(" + l.api.path + ") failed: " + (e != nullptr ? e : "unknown error");
    return l;
  }
  std::string missing;
  resolve(handle, "ncclGetUniqueId", &l.api.get_unique_id, &missing);
  resolve(handle, "ncclCommInitRankConfig", &l.api.comm_init_rank_config, &missing);
  resolve(handle, "ncclCommGetAsyncError", &l.api.comm_get_async_error, &missing);
  resolve(handle, "ncclCommAbort", &l.api.comm_abort, &missing);
  resolve(handle, "ncclCommDestroy", &l.api.comm_destroy, &missing);
  resolve(handle, "ncclAllReduce", &l.api.all_reduce, &missing);
  resolve(handle, "ncclGetErrorString", &l.api.get_error_string, &missing);
  resolve(handle, "ncclCommCount", &l.api.comm_count, &missing);
  resolve(handle, "ncclCommUserRank", &l.api.comm_user_rank, &missing);
  resolve(handle, "ncclCommCuDevice", &l.api.comm_cu_device, &missing);
  resolve(handle, "ncclBroadcast", &l.api.broadcast, &missing);
  ncclResult_t (*get_version)(int*) = nullptr;
  resolve(handle, "ncclGetVersion", &get_version, &missing);
  if (!missing.empty()) {
    l.why = l.api.path + " lacks " + missing;
    return l;
  }
  std::string optional;
  resolve(handle, "ncclCommInitAll", &l.api.comm_init_all, &optional);
  resolve(handle, "ncclCommFinalize", &l.api.comm_finalize, &optional);
  get_version(&l.api.version);
  return l;
}

Loaded load_for_algorithm() {
  Loaded l;
  if (const char* off = std::getenv("ARF_NCCL"); off != nullptr && std::string(off) == "0") {
    l.why = "disabled by ARF_NCCL=0";
    return l;
  }
  const Api* loaded = library(&l.why);
  if (loaded == nullptr) return l;
  l.api = *loaded;
  // ncclConfig_t grew over releases; the non-blocking config this library fills needs 2.14+.
  if (l.api.version < 21400 || l.api.comm_finalize == nullptr) {
    l.why = l.api.path + " is NCCL " + std::to_string(l.api.version) + "; 2.14 or newer is needed";
  }
  return l;
}

const Api* usable(const Loaded& loaded, std::string* why) {
  if (!loaded.why.empty()) {
    if (why != nullptr) *why = loaded.why;
    return nullptr;
  }
  return &loaded.api;
}

}  // namespace

const Api* library(std::string* why) {
  static const Loaded loaded = load_library();
  return usable(loaded, why);
}

const Api* api(std::string* why) {
  static const Loaded loaded = load_for_algorithm();
  return usable(loaded, why);
}

Status status(const Api& api, ncclResult_t result, const std::string& what) {
  if (result == ncclSuccess) return Status::ok();
  return Status(arfNcclError, what + " failed: " + api.get_error_string(result) + " (" +
                                  std::to_string(static_cast<int>(result)) + ")");
}

ncclDataType_t dtype_of(DType dtype) { return dtype == DType::kFp16 ? ncclFloat16 : ncclBfloat16; }

Status settle(const Api& api, ncclComm_t comm, ncclResult_t started, const std::string& what,
              double timeout_seconds) {
  if (started != ncclInProgress) return status(api, started, what);
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  ncclResult_t state = started;
  for (int polls = 0;; ++polls) {
    const ncclResult_t polled = api.comm_get_async_error(comm, &state);
    if (polled != ncclSuccess) state = polled;
    if (state != ncclInProgress) return status(api, state, what);
    if (std::chrono::steady_clock::now() > deadline) {
      return Status(arfTimeout, what + ": not complete after " + std::to_string(timeout_seconds) +
                                    " s (a peer did not take part)");
    }
    // A collective settles in microseconds: spin briefly before sleeping (creation takes longer).
    if (polls < 200) {
      std::this_thread::yield();
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(polls < 2000 ? 20 : 1000));
    }
  }
}

Status shut_down(const Api& api, ncclComm_t comm, bool abort, double timeout_seconds) {
  // Both release the communicator before returning; on a non-blocking one they may still answer
  // ncclInProgress, which is not a failure (the handle must not be polled after this).
  auto released = [&api](ncclResult_t result, const char* what) {
    return result == ncclInProgress ? Status::ok() : status(api, result, what);
  };
  if (!abort) {
    const Status finalized =
        settle(api, comm, api.comm_finalize(comm), "ncclCommFinalize", timeout_seconds);
    if (finalized.is_ok()) return released(api.comm_destroy(comm), "ncclCommDestroy");
    (void)api.comm_abort(comm);
    return Status(finalized.code(), finalized.message() + "; the NCCL communicator was aborted");
  }
  return released(api.comm_abort(comm), "ncclCommAbort");
}

Comm::~Comm() { (void)close(/*abort=*/true, 0); }

Status Comm::init(const Api& api, const ncclUniqueId& id, int rank, int world,
                  double timeout_seconds, int max_ctas) {
  api_ = &api;
  timeout_seconds_ = timeout_seconds;
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;  // returns at once; completion is polled against our deadline
  if (max_ctas > 0) config.maxCTAs = max_ctas;  // a field of every config since NCCL 2.14
  ncclComm_t comm = nullptr;
  const ncclResult_t started = api.comm_init_rank_config(&comm, world, id, rank, &config);
  const Status made =
      settle(api, comm, started, "NCCL communicator creation (rank " + std::to_string(rank) + ")",
             timeout_seconds);
  if (!made.is_ok()) {
    if (comm != nullptr) (void)api.comm_abort(comm);
    return made;
  }
  comm_ = comm;
  return Status::ok();
}

Status Comm::all_reduce(const void* in, void* out, size_t count, DType dtype,
                        cudaStream_t stream) const {
  if (comm_ == nullptr) return internal_error("NCCL communicator not initialised");
  // Non-blocking communicator: the call usually answers ncclInProgress (NCCL enqueues from its
  // own thread); the work is on `stream` and the communicator ready for the next call only once
  // it has settled.
  return settle(*api_, comm_,
                api_->all_reduce(in, out, count, dtype_of(dtype), ncclSum, comm_, stream),
                "ncclAllReduce", timeout_seconds_);
}

Status Comm::close(bool abort, double timeout_seconds) {
  if (comm_ == nullptr) return Status::ok();
  ncclComm_t comm = comm_;
  comm_ = nullptr;
  return shut_down(*api_, comm, abort, timeout_seconds);
}

Result<NcclPlacement> placement_from_nccl(const Api& api, ncclComm_t comm, cudaStream_t stream,
                                          double timeout_seconds) {
  NcclPlacement p;
  ARF_RETURN_IF_ERROR(status(api, api.comm_count(comm, &p.world), "ncclCommCount"));
  ARF_RETURN_IF_ERROR(status(api, api.comm_user_rank(comm, &p.rank), "ncclCommUserRank"));
  ARF_RETURN_IF_ERROR(status(api, api.comm_cu_device(comm, &p.device), "ncclCommCuDevice"));
  ARF_CUDA_RETURN_IF_ERROR(cudaSetDevice(p.device));
  if (p.rank == 0) {
    const arfStatus_t made = arfGetUniqueId(&p.id);
    if (made != arfSuccess) return internal_error("arfGetUniqueId failed");
  }
  void* buffer = nullptr;
  ARF_CUDA_RETURN_IF_ERROR(cudaMalloc(&buffer, sizeof(p.id)));
  Status s =
      cuda_status(cudaMemcpyAsync(buffer, &p.id, sizeof(p.id), cudaMemcpyHostToDevice, stream),
                  "id -> device", __FILE__, __LINE__);
  if (s.is_ok()) {
    s = settle(api, comm, api.broadcast(buffer, buffer, sizeof(p.id), ncclUint8, 0, comm, stream),
               "ncclBroadcast(rendezvous id)", timeout_seconds);
  }
  // Polled, not synchronized (nor a copy to pageable memory, which would block the same way): a
  // rank that never joins the broadcast costs the bound, not a hang.
  const auto deadline =
      std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (s.is_ok()) {
    const cudaError_t q = cudaStreamQuery(stream);
    if (q == cudaSuccess) break;
    if (q != cudaErrorNotReady) {
      s = cuda_status(q, "id broadcast", __FILE__, __LINE__);
    } else if (std::chrono::steady_clock::now() > deadline) {
      s = Status(arfTimeout, "rank " + std::to_string(p.rank) + ": the rendezvous id broadcast " +
                                 "over the caller's NCCL communicator did not complete within " +
                                 std::to_string(timeout_seconds) + " s (a rank did not join; the " +
                                 "NCCL communicator's state is unknown)");
      return s;  // the buffer may still be in use by the stuck broadcast: leaked on purpose
    } else {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
  }
  if (s.is_ok()) {
    s = cuda_status(cudaMemcpy(&p.id, buffer, sizeof(p.id), cudaMemcpyDeviceToHost), "id -> host",
                    __FILE__, __LINE__);
  }
  (void)cudaFree(buffer);
  ARF_RETURN_IF_ERROR(s);
  return p;
}

}  // namespace arf::nccl
