// The cross-process form of CallSignatureLog (call_signature.h), for the ipc transport: each rank
// publishes the signature of its call i in its own small shared ring (a memfd every peer maps
// read-only); the rank that records call i compares it with every peer that has already published
// call i. Like the local log it is best effort: a peer that has not reached call i yet, or is more
// than kWindow calls ahead, is not compared (the later rank compares instead, or the bounded wait
// reports the stall) and nothing is ever flagged wrongly.
//
// Each entry is a seqlock: the writer stores seq = 2i+1, then the fields, then seq = 2i+2 with
// release; a reader accepts the fields only if it saw seq == 2i+2 (acquire) before and after
// copying them. Atomics of 8 bytes are lock-free, hence address-free, so they work across the
// processes' mappings.
#pragma once

#include <atomic>
#include <cstdint>
#include <vector>

#include "base/status.h"
#include "transport/call_signature.h"
#include "transport/ipc_bootstrap.h"

namespace arf::ipc {

class SharedCallLog {
 public:
  static constexpr int kWindow = 256;

  // This rank's ring, in a fresh memfd (zeroed: no call published).
  static Result<SharedCallLog> create(int world, int rank);
  SharedCallLog(SharedCallLog&&) noexcept;
  SharedCallLog& operator=(SharedCallLog&&) noexcept;
  SharedCallLog(const SharedCallLog&) = delete;
  SharedCallLog& operator=(const SharedCallLog&) = delete;
  ~SharedCallLog();

  int fd() const { return own_fd_.get(); }  // for all_gather_fds
  // Maps every peer's ring (fds[r] from all_gather_fds; fds[rank] is ignored).
  Status attach(const std::vector<Fd>& fds);

  // Publishes this rank's call `call_index` and compares it with every peer's published call of
  // the same index. InvalidArgument naming both ranks and signatures on a mismatch (the call is
  // still published: peers that reach it compare against it and fail too). One thread at a time.
  Status record(uint64_t call_index, const local::CallSignature& signature);

 private:
  struct Entry {
    std::atomic<uint64_t> seq;  // 2i+1 while call i is written, 2i+2 once complete
    std::atomic<int64_t> fields[6];
  };
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "cross-process atomics");
  static constexpr size_t kBytes = sizeof(Entry) * kWindow;

  SharedCallLog(int world, int rank) : world_(world), rank_(rank), rings_(world, nullptr) {}
  void unmap();

  int world_ = 0;
  int rank_ = 0;
  Fd own_fd_;
  std::vector<Entry*> rings_;  // [rank]: own read/write, peers read-only; null until attached
};

}  // namespace arf::ipc
