// Host-only bootstrap of the `ipc` transport (one process per GPU): how the `world` processes of
// a job find each other, agree, and hand each other file descriptors. No CUDA here: the transport
// exports its cuMem workspace as a POSIX FD, passes it through all_gather_fds, then imports, maps
// and access-enables every peer's.
//  - A job is keyed by a random 16-byte UniqueId (32 hex digits in an env var). Rank 0 listens on
//    a Unix stream socket in Linux's ABSTRACT namespace, "\0arfusion-<hex id>": no filesystem
//    file, so nothing to clean up after a crash and no stale file blocking a re-run; the name dies
//    with rank 0's socket, and jobs with different ids never meet. (Abstract names are per network
//    namespace: containers must share it.)
//  - Abstract sockets have no permissions, so anyone could connect or squat the name: both ends
//    check SO_PEERCRED (set by the kernel, unforgeable) and refuse a uid other than our effective
//    uid. Owning user only.
//  - A star around rank 0: the others connect (bounded retries) and send a hello (version, id,
//    rank, world) that rank 0 validates. Each collective is "all send to rank 0, rank 0 sends the
//    whole to all"; FDs are relayed by rank 0 with SCM_RIGHTS. One listener and world-1
//    connections instead of a mesh, and simple failure detection: rank 0 sees every peer.
//  - Every wait is a poll() against a deadline. A peer that exits is seen at once (EOF); rank 0
//    then sends an abort with the cause to all, so every rank fails fast naming rank and phase.
#pragma once

#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include "base/status.h"

namespace arf::ipc {

// Hard limits of the bootstrap (not of the kernels, which stop at ARF_MAX_RANKS): they bound the
// memory a malformed or hostile message can make us allocate, and the FDs per SCM_RIGHTS message
// (the kernel's SCM_MAX_FD is 253).
inline constexpr int kMaxWorld = 64;
inline constexpr size_t kMaxBlobBytes = size_t{1} << 20;  // per rank, per all_gather
// Bumped whenever the wire format changes; ranks of different versions refuse each other.
inline constexpr uint32_t kProtocolVersion = 1;

// The key of one rendezvous. Random, so two jobs on one host (or two communicators in one job)
// never share it by accident. Value type; thread-safe like an int.
struct UniqueId {
  std::array<uint8_t, 16> bytes{};

  // 16 bytes from getrandom() (the kernel's urandom source). Internal on failure.
  static Result<UniqueId> generate();
  // Parses exactly 32 hex digits (either case, surrounding whitespace ignored), as hex() prints
  // them. InvalidArgument saying what is wrong otherwise.
  static Result<UniqueId> parse(std::string_view text);
  std::string hex() const;  // 32 lower-case hex digits
  friend bool operator==(const UniqueId&, const UniqueId&) = default;
};

// The abstract-namespace socket name for `id`, INCLUDING its leading NUL byte (the name's length
// is part of the address; there is no trailing NUL).
std::string abstract_socket_name(const UniqueId& id);

// Owns one file descriptor and closes it on destruction. Move-only. Not thread-safe (like any
// value); the descriptor itself may of course be used from any thread.
class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(other.release()) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) reset(other.release());
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;

  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  int release() {  // gives up ownership without closing
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }
  // Closes the current descriptor (if any; a close() error is not actionable: the descriptor is
  // gone either way), then owns `fd`.
  void reset(int fd = -1) {
    if (fd_ >= 0) ::close(fd_);
    fd_ = fd;
  }

 private:
  int fd_ = -1;
};

// Outcome of Bootstrap::vote: the AND of every rank's ballot and who said no (ascending).
struct VoteResult {
  bool all_yes = true;
  std::vector<int> no_ranks;
};

// One rank's membership in a formed group. Obtained from connect(); destroying it closes every
// socket (peers that are still in a collective with us then fail with "rank R closed its
// connection"). Move-only.
//
// Contract common to all collectives below:
//  - Collective: every rank of the group must make the same sequence of calls (same function,
//    same blob size). A rank calling a different collective, or a different size, makes all ranks
//    fail with InvalidArgument naming both.
//  - Blocking, bounded: each call blocks until every rank has contributed. Rank 0 gives up
//    timeout_seconds (from connect) after its call began, with Timeout naming the phase and the
//    ranks that did not contribute, and sends that report to the others. A rank > 0 waits for it
//    and gives up on its own only after timeout_seconds + max(0.2 s, 10%) (the backstop for a
//    rank 0 that is stuck or absent), so while rank 0 lives every rank gets rank 0's report.
//  - A peer that exits or closes its connection fails everyone with CommFailed naming it, within
//    milliseconds (EOF is detected by poll), not after the timeout.
//  - After any failure the object is unusable: every later call returns CommFailed with the
//    first error (the byte streams are in an unknown state).
//  - Not thread-safe: one thread at a time per Bootstrap. Distinct Bootstraps are independent.
//  - Signal-safe writes: sends use MSG_NOSIGNAL, so a dead peer never raises SIGPIPE.
class Bootstrap {
 public:
  // Forms the group of `world` ranks keyed by `id`; this process is `rank`. Rank 0 listens (and
  // must be unique: a second rank 0 gets InvalidArgument "already in use"), the others connect,
  // retrying with backoff until the deadline (so start order does not matter). Returns when all
  // `world` ranks have joined. Errors, all within the bounds of the contract above:
  //  - InvalidArgument: bad rank/world/timeout; or a hello that disagrees (protocol version, id,
  //    world size, duplicate rank), reported to every rank that has joined, naming the mismatch;
  //  - Timeout: rank 0 names the ranks that never joined, and any connections it refused (other
  //    users'), and tells the joined ones; a rank > 0 that finds nobody listening within
  //    timeout_seconds says so (phase "connect");
  //  - CommFailed: a joined rank, or rank 0, closed its connection (exited or failed);
  //  - Internal: a socket call failed (errno text), or rank 0 runs as another user (refused).
  // Creates descriptors with CLOEXEC; blocks the calling thread only.
  static Result<Bootstrap> connect(const UniqueId& id, int rank, int world,
                                   double timeout_seconds);

  Bootstrap(Bootstrap&&) noexcept = default;
  Bootstrap& operator=(Bootstrap&&) noexcept = default;
  ~Bootstrap() = default;  // the Fd members close the sockets

  int rank() const { return rank_; }
  int world() const { return world_; }
  const UniqueId& id() const { return id_; }

  // Every rank contributes `mine` (the same size on every rank, <= kMaxBlobBytes) and receives
  // all contributions concatenated in rank order (world * mine.size() bytes).
  Result<std::vector<uint8_t>> all_gather(std::span<const uint8_t> mine);

  // all_gather of one trivially copyable value per rank (e.g. a struct of device facts).
  template <typename T>
  Result<std::vector<T>> all_gather_value(const T& mine) {
    static_assert(std::is_trivially_copyable_v<T>, "all_gather_value copies bytes");
    Result<std::vector<uint8_t>> bytes =
        all_gather({reinterpret_cast<const uint8_t*>(&mine), sizeof(T)});
    if (!bytes.is_ok()) return bytes.status();
    std::vector<T> out(static_cast<size_t>(world_));
    std::memcpy(out.data(), bytes.value().data(), out.size() * sizeof(T));
    return out;
  }

  // Returns once every rank has called barrier().
  Status barrier();

  // Every rank casts `yes`; all ranks receive the same VoteResult (AND + the ranks that said no).
  // This is how ranks agree to enable a path that one of them found broken (e.g. a failed probe).
  Result<VoteResult> vote(bool yes);

  // Every rank contributes one open descriptor `fd` (not consumed: the caller keeps owning it)
  // and receives `world` descriptors indexed by rank, each a new descriptor (CLOEXEC) referring
  // to that rank's open file: the peers' arrive through rank 0 by SCM_RIGHTS, its own is a dup.
  // The caller owns the result. Any kind of descriptor works (cuMem POSIX handle, memfd, ...).
  Result<std::vector<Fd>> all_gather_fds(int fd);

 private:
  using Deadline = std::chrono::steady_clock::time_point;
  struct Gathered;
  Bootstrap(const UniqueId& id, int rank, int world, double timeout_seconds);
  Status rendezvous_root();
  Status rendezvous_peer();
  Result<Gathered> collective(uint16_t op, std::span<const uint8_t> mine, int fd);
  Result<Gathered> collective_root(uint16_t op, std::span<const uint8_t> mine, int fd,
                                   Deadline deadline);
  Result<Gathered> collective_peer(uint16_t op, std::span<const uint8_t> mine, int fd,
                                   Deadline deadline);
  void abort_peers(const Status& why);  // rank 0: best-effort "abort" to every joined peer
  Status fail(Status why);              // records the first failure (sticky), returns it
  std::string where(const char* phase, uint32_t seq) const;

  UniqueId id_;
  int rank_ = 0;
  int world_ = 1;
  double timeout_seconds_ = 0;
  uint32_t seq_ = 0;        // collectives done so far; every rank must be at the same one
  std::vector<Fd> peers_;   // rank 0: peers_[r] = socket to rank r; others: peers_[0] = to rank 0
  Status failure_;          // first failure; once set, every call returns CommFailed
};

}  // namespace arf::ipc
