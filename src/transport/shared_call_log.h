// The cross-process form of CallSignatureLog (call_signature.h), for the ipc transport: each rank
// publishes its call i (the signature of a launched call, or that it refused the call and why) in
// its own small shared ring (a memfd every peer maps read-only); the rank that records call i
// compares it with every peer that has already published call i (compare_calls). Like the local
// log it is best effort: a peer that has not reached call i yet, or is more than kWindow calls
// ahead, is not compared (the later rank compares instead, or the bounded wait reports the stall)
// and nothing is ever flagged wrongly. Of two ranks recording the same call at once at least one
// sees the other: each publishes, then issues a sequentially consistent fence, then reads.
//
// The same memfd carries the rank's failure notice: once its communicator failed, the reason,
// which peers read at their next call (Group::peer_failure), as ranks of one process read each
// other's.
//
// Each entry is a seqlock: the writer stores seq = 2i+1, then the fields, then seq = 2i+2 with
// release; a reader accepts the fields only if it saw seq == 2i+2 (acquire) before and after
// copying them. Atomics of 8 bytes are lock-free, hence address-free, so they work across the
// processes' mappings.
#pragma once

#include <atomic>
#include <cstdint>
#include <string>
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
  // the same index (compare_calls: InvalidArgument for differing launched calls, CommFailed when
  // one rank refused what another launched). The call stays published either way: peers that
  // reach it compare against it and fail too. One thread at a time.
  Status record(uint64_t call_index, const local::CallEntry& entry);
  // A launched call with this signature.
  Status record(uint64_t call_index, const local::CallSignature& signature) {
    return record(call_index, local::CallEntry{signature, false, {}});
  }

  // Publishes this rank's failure (the first one only; its text cut to kReasonBytes - 1). Never
  // blocks; safe from any thread.
  void mark_failed(const std::string& why);
  // The first peer (lowest rank) that published a failure, as "rank R failed: <its reason>";
  // OK while none did. Safe from any thread.
  Status peer_failure() const;

  static constexpr size_t kReasonBytes = 248;

 private:
  static constexpr int kFields = 8;  // the signature's seven, then "refused"
  static constexpr int kReasonWords = kReasonBytes / 8;
  struct Entry {
    std::atomic<uint64_t> seq;  // 2i+1 while call i is written, 2i+2 once complete
    std::atomic<int64_t> fields[kFields];
    std::atomic<uint64_t> reason[kReasonWords];  // the refusal's text, when refused
  };
  struct Failure {
    std::atomic<uint64_t> state;  // 0: healthy; 1: being written; 2: published
    std::atomic<uint64_t> reason[kReasonWords];
  };
  static_assert(std::atomic<uint64_t>::is_always_lock_free, "cross-process atomics");
  static constexpr size_t kBytes = sizeof(Failure) + sizeof(Entry) * kWindow;
  static Failure* failure_of(void* mapping) { return static_cast<Failure*>(mapping); }
  static Entry* ring_of(void* mapping) {
    return reinterpret_cast<Entry*>(static_cast<char*>(mapping) + sizeof(Failure));
  }

  SharedCallLog(int world, int rank) : world_(world), rank_(rank), maps_(world, nullptr) {}
  void unmap();

  int world_ = 0;
  int rank_ = 0;
  Fd own_fd_;
  std::vector<void*> maps_;  // [rank]: own read/write, peers read-only; null until attached
};

}  // namespace arf::ipc
