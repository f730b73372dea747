// SharedCallLog: see shared_call_log.h.
#include "transport/shared_call_log.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace arf::ipc {
namespace {

Status errno_status(const char* what) {
  return internal_error(std::string(what) + ": " + std::strerror(errno));
}

// Text in 8-byte atomic words (relaxed; the enclosing seqlock or state word orders them).
template <size_t kWords>
void store_text(std::atomic<uint64_t> (&words)[kWords], const std::string& text) {
  char bytes[kWords * 8] = {};
  std::memcpy(bytes, text.data(), std::min(text.size(), sizeof(bytes) - 1));
  for (size_t w = 0; w < kWords; ++w) {
    uint64_t v = 0;
    std::memcpy(&v, bytes + 8 * w, 8);
    words[w].store(v, std::memory_order_relaxed);
  }
}

template <size_t kWords>
std::string load_text(const std::atomic<uint64_t> (&words)[kWords]) {
  char bytes[kWords * 8 + 1] = {};
  for (size_t w = 0; w < kWords; ++w) {
    const uint64_t v = words[w].load(std::memory_order_relaxed);
    std::memcpy(bytes + 8 * w, &v, 8);
  }
  return std::string(bytes);
}

}  // namespace

Result<SharedCallLog> SharedCallLog::create(int world, int rank) {
  SharedCallLog log(world, rank);
  const int fd = static_cast<int>(::memfd_create("arfusion-call-log", MFD_CLOEXEC));
  if (fd < 0) return errno_status("memfd_create(call log)");
  log.own_fd_.reset(fd);
  if (::ftruncate(fd, static_cast<off_t>(kBytes)) != 0) return errno_status("ftruncate(call log)");
  void* p = ::mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) return errno_status("mmap(call log)");
  log.maps_[static_cast<size_t>(rank)] = p;  // zero-filled: healthy, no call published
  return log;
}

SharedCallLog::SharedCallLog(SharedCallLog&& o) noexcept
    : world_(o.world_), rank_(o.rank_), own_fd_(std::move(o.own_fd_)), maps_(std::move(o.maps_)) {
  o.maps_.assign(static_cast<size_t>(o.world_), nullptr);
}

SharedCallLog& SharedCallLog::operator=(SharedCallLog&& o) noexcept {
  if (this != &o) {
    unmap();
    world_ = o.world_;
    rank_ = o.rank_;
    own_fd_ = std::move(o.own_fd_);
    maps_ = std::move(o.maps_);
    o.maps_.assign(static_cast<size_t>(o.world_), nullptr);
  }
  return *this;
}

SharedCallLog::~SharedCallLog() { unmap(); }

void SharedCallLog::unmap() {
  for (void*& map : maps_) {
    if (map != nullptr) ::munmap(map, kBytes);
    map = nullptr;
  }
}

Status SharedCallLog::attach(const std::vector<Fd>& fds) {
  if (static_cast<int>(fds.size()) != world_) return internal_error("call log: wrong fd count");
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    void* p = ::mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, fds[static_cast<size_t>(r)].get(), 0);
    if (p == MAP_FAILED) return errno_status("mmap(peer call log)");
    maps_[static_cast<size_t>(r)] = p;
  }
  return Status::ok();
}

Status SharedCallLog::record(uint64_t call_index, const local::CallEntry& entry) {
  Entry& mine = ring_of(maps_[static_cast<size_t>(rank_)])[call_index % kWindow];
  const local::CallSignature& sig = entry.signature;
  const int64_t fields[kFields] = {sig.pattern, sig.algorithm, sig.fallback, sig.dtype,
                                   sig.num_elems, sig.row_elems, sig.post_norm,
                                   entry.refused ? 1 : 0};
  // Publish first, so a peer that reaches this call later compares against it.
  mine.seq.store(2 * call_index + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  for (int k = 0; k < kFields; ++k) mine.fields[k].store(fields[k], std::memory_order_relaxed);
  store_text(mine.reason, entry.refused ? entry.reason : std::string());
  mine.seq.store(2 * call_index + 2, std::memory_order_release);
  // Publish-then-read on both sides: with a full fence between, two ranks recording the same call
  // at once cannot both miss the other (store buffering), so a refusal is never missed by both.
  std::atomic_thread_fence(std::memory_order_seq_cst);

  for (int r = 0; r < world_; ++r) {
    void* map = maps_[static_cast<size_t>(r)];
    if (r == rank_ || map == nullptr) continue;
    const Entry& peer = ring_of(map)[call_index % kWindow];
    const uint64_t complete = 2 * call_index + 2;
    if (peer.seq.load(std::memory_order_acquire) != complete) continue;  // not there, or lapped
    int64_t got[kFields];
    for (int k = 0; k < kFields; ++k) got[k] = peer.fields[k].load(std::memory_order_relaxed);
    const std::string reason = load_text(peer.reason);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (peer.seq.load(std::memory_order_relaxed) != complete) continue;  // overwritten meanwhile
    local::CallEntry theirs;
    theirs.signature = {static_cast<int>(got[0]), static_cast<int>(got[1]), static_cast<int>(got[2]),
                        static_cast<int>(got[3]), got[4], got[5], static_cast<int>(got[6])};
    theirs.refused = got[7] != 0;
    theirs.reason = reason;
    Status same = local::compare_calls(call_index, rank_, entry, r, theirs);
    if (!same.is_ok()) return same;
  }
  return Status::ok();
}

void SharedCallLog::mark_failed(const std::string& why) {
  Failure* f = failure_of(maps_[static_cast<size_t>(rank_)]);
  uint64_t healthy = 0;
  if (!f->state.compare_exchange_strong(healthy, 1, std::memory_order_acq_rel)) return;
  store_text(f->reason, why);
  f->state.store(2, std::memory_order_release);
}

Status SharedCallLog::peer_failure() const {
  for (int r = 0; r < world_; ++r) {
    void* map = maps_[static_cast<size_t>(r)];
    if (r == rank_ || map == nullptr) continue;
    const Failure* f = failure_of(map);
    if (f->state.load(std::memory_order_acquire) != 2) continue;
    return Status(arfCommFailed, "rank " + std::to_string(r) + " failed: " + load_text(f->reason));
  }
  return Status::ok();
}

}  // namespace arf::ipc
