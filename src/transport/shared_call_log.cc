// SharedCallLog: see shared_call_log.h.
#include "transport/shared_call_log.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <utility>

namespace arf::ipc {
namespace {

local::CallSignature unpack(const int64_t (&f)[6]) {
  local::CallSignature s;
  s.pattern = static_cast<int>(f[0]);
  s.algorithm = static_cast<int>(f[1]);
  s.fallback = static_cast<int>(f[2]);
  s.dtype = static_cast<int>(f[3]);
  s.num_elems = f[4];
  s.row_elems = f[5];
  return s;
}

Status errno_status(const char* what) {
  return internal_error(std::string(what) + ": " + std::strerror(errno));
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
  log.rings_[static_cast<size_t>(rank)] = static_cast<Entry*>(p);  // zero-filled: seq 0
  return log;
}

SharedCallLog::SharedCallLog(SharedCallLog&& o) noexcept
    : world_(o.world_), rank_(o.rank_), own_fd_(std::move(o.own_fd_)), rings_(std::move(o.rings_)) {
  o.rings_.assign(static_cast<size_t>(o.world_), nullptr);
}

SharedCallLog& SharedCallLog::operator=(SharedCallLog&& o) noexcept {
  if (this != &o) {
    unmap();
    world_ = o.world_;
    rank_ = o.rank_;
    own_fd_ = std::move(o.own_fd_);
    rings_ = std::move(o.rings_);
    o.rings_.assign(static_cast<size_t>(o.world_), nullptr);
  }
  return *this;
}

SharedCallLog::~SharedCallLog() { unmap(); }

void SharedCallLog::unmap() {
  for (Entry*& ring : rings_) {
    if (ring != nullptr) ::munmap(ring, kBytes);
    ring = nullptr;
  }
}

Status SharedCallLog::attach(const std::vector<Fd>& fds) {
  if (static_cast<int>(fds.size()) != world_) return internal_error("call log: wrong fd count");
  for (int r = 0; r < world_; ++r) {
    if (r == rank_) continue;
    void* p = ::mmap(nullptr, kBytes, PROT_READ, MAP_SHARED, fds[static_cast<size_t>(r)].get(), 0);
    if (p == MAP_FAILED) return errno_status("mmap(peer call log)");
    rings_[static_cast<size_t>(r)] = static_cast<Entry*>(p);
  }
  return Status::ok();
}

Status SharedCallLog::record(uint64_t call_index, const local::CallSignature& signature) {
  Entry& mine = rings_[static_cast<size_t>(rank_)][call_index % kWindow];
  const int64_t fields[6] = {signature.pattern, signature.algorithm, signature.fallback,
                             signature.dtype,   signature.num_elems, signature.row_elems};
  // Publish first, so a peer that reaches this call later compares against it.
  mine.seq.store(2 * call_index + 1, std::memory_order_relaxed);
  std::atomic_thread_fence(std::memory_order_release);
  for (int k = 0; k < 6; ++k) mine.fields[k].store(fields[k], std::memory_order_relaxed);
  mine.seq.store(2 * call_index + 2, std::memory_order_release);

  for (int r = 0; r < world_; ++r) {
    const Entry* ring = rings_[static_cast<size_t>(r)];
    if (r == rank_ || ring == nullptr) continue;
    const Entry& peer = ring[call_index % kWindow];
    const uint64_t complete = 2 * call_index + 2;
    if (peer.seq.load(std::memory_order_acquire) != complete) continue;  // not there, or lapped
    int64_t got[6];
    for (int k = 0; k < 6; ++k) got[k] = peer.fields[k].load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (peer.seq.load(std::memory_order_relaxed) != complete) continue;  // overwritten meanwhile
    const local::CallSignature theirs = unpack(got);
    if (theirs == signature) continue;
    return invalid_argument("call " + std::to_string(call_index) + ": rank " +
                            std::to_string(rank_) + " issued " + signature.text() + " but rank " +
                            std::to_string(r) + " issued " + theirs.text() +
                            "; every rank must issue the same sequence of calls");
  }
  return Status::ok();
}

}  // namespace arf::ipc
