// arfusion — optional header-only C++ RAII wrapper over the C API (arfusion.h).
//
// Differences from the C API: failures throw arfusion::Error (status() + the detail string), and a
// Comm destroys its communicator when it goes out of scope. Every contract of arfusion.h still
// holds (stream ordering, one host thread per communicator at a time, collective calls).
//
//   arfCommConfig_t config;
//   arfCommConfigInit(&config);
//   config.max_tokens = 256;
//   std::vector<arfusion::Comm> comms = arfusion::Comm::init_all({0, 0, 0, 0}, config);
//   // one thread per rank: comms[r].fused_allreduce(args_r, stream_r);
#pragma once

#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "arfusion/arfusion.h"

namespace arfusion {

// A failed arfusion call. what() = "<function>: <status string>: <arfGetLastErrorString()>".
class Error : public std::runtime_error {
 public:
  Error(arfStatus_t status, const std::string& what) : std::runtime_error(what), status_(status) {}
  arfStatus_t status() const noexcept { return status_; }

 private:
  arfStatus_t status_;
};

// Throws Error unless status is arfSuccess. Reads the calling thread's last-error string, so call
// it on the thread that made the failing call.
inline void check(arfStatus_t status, const char* function) {
  if (status == arfSuccess) return;
  throw Error(status, std::string(function) + ": " + arfGetStatusString(status) + ": " +
                          arfGetLastErrorString());
}

// One rank's communicator. Move-only; the destructor calls arfCommDestroy (collective, never waits
// for other ranks; errors during destruction are dropped — call destroy() to see them).
class Comm {
 public:
  Comm() = default;  // empty: owns nothing
  explicit Comm(arfComm_t comm) noexcept : comm_(comm) {}  // adopts an existing handle
  Comm(const Comm&) = delete;
  Comm& operator=(const Comm&) = delete;
  Comm(Comm&& other) noexcept : comm_(std::exchange(other.comm_, nullptr)) {}
  Comm& operator=(Comm&& other) noexcept {
    if (this != &other) {
      reset();
      comm_ = std::exchange(other.comm_, nullptr);
    }
    return *this;
  }
  ~Comm() { reset(); }

  // arfCommInitRank: collective, blocks until every rank of config.id has joined.
  static Comm init_rank(const arfCommConfig_t& config) {
    arfComm_t comm = nullptr;
    check(arfCommInitRank(&comm, &config), "arfCommInitRank");
    return Comm(comm);
  }

  // arfCommInitAll: all ranks of the local transport from this thread; devices[r] is rank r's
  // device (repeats allowed: virtual ranks on one GPU).
  static std::vector<Comm> init_all(const std::vector<int>& devices, const arfCommConfig_t& config) {
    std::vector<arfComm_t> handles(devices.size(), nullptr);
    check(arfCommInitAll(handles.data(), static_cast<int>(devices.size()), devices.data(), &config),
          "arfCommInitAll");
    std::vector<Comm> comms;
    comms.reserve(handles.size());
    for (arfComm_t h : handles) comms.emplace_back(h);
    return comms;
  }

  // Stream-ordered, graph-capture safe (arfFusedAllReduce).
  void fused_allreduce(const arfFusedArgs_t& args, cudaStream_t stream) {
    check(arfFusedAllReduce(comm_, &args, stream), "arfFusedAllReduce");
  }

  // out = sum over ranks of in (arfAllReduce).
  void allreduce(const void* in, void* out, size_t count, arfDataType_t dtype, cudaStream_t stream) {
    check(arfAllReduce(comm_, in, out, count, dtype, stream), "arfAllReduce");
  }

  // The plan the same call would run; pure, rank-symmetric (arfPlan).
  arfPlan_t plan(const arfFusedArgs_t& args) const {
    arfPlan_t p{};
    check(arfPlan(comm_, &args, &p), "arfPlan");
    return p;
  }

  int rank() const {
    int r = -1;
    check(arfCommGetRank(comm_, &r), "arfCommGetRank");
    return r;
  }

  int world_size() const {
    int w = 0;
    check(arfCommGetWorldSize(comm_, &w), "arfCommGetWorldSize");
    return w;
  }

  // Does not throw: arfSuccess while healthy, arfTimeout once a device wait expired (details in
  // arfGetLastErrorString()). The communicator then refuses further work with arfCommFailed.
  arfStatus_t async_error() const noexcept { return arfCommGetAsyncError(comm_); }

  // Destroys now and throws on failure; the Comm is empty afterwards.
  void destroy() { check(arfCommDestroy(std::exchange(comm_, nullptr)), "arfCommDestroy"); }

  arfComm_t get() const noexcept { return comm_; }
  arfComm_t release() noexcept { return std::exchange(comm_, nullptr); }
  explicit operator bool() const noexcept { return comm_ != nullptr; }

 private:
  void reset() noexcept {
    if (comm_ != nullptr) (void)arfCommDestroy(std::exchange(comm_, nullptr));
  }

  arfComm_t comm_ = nullptr;
};

}  // namespace arfusion
