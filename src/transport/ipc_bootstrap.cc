// The ipc bootstrap (see ipc_bootstrap.h): abstract-namespace Unix socket star around rank 0,
// length-prefixed messages, SCM_RIGHTS relay, and poll() against a deadline for every wait.
//
// Wire format: every message is a 16-byte Header (host byte order: all ranks are on one host)
// followed by header.payload_bytes bytes; descriptors, if any, ride on the header's first byte as
// one SCM_RIGHTS control message. Per connection the exchange strictly alternates (a peer sends
// one message, rank 0 answers one), so a reader never has to look past the current message.
#include "transport/ipc_bootstrap.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <climits>
#include <cstddef>
#include <cstdio>
#include <thread>
#include <type_traits>
#include <utility>

#include "transport/random_bytes.h"

namespace arf::ipc {

// One received message; its descriptors are owned (closed unless moved out).
struct WireMessage {
  struct Header {
    uint32_t magic;
    uint16_t op;
    uint16_t num_fds;
    uint32_t seq;  // collective index (0 for hello, welcome, abort)
    uint32_t payload_bytes;
  } header{};
  std::vector<uint8_t> payload;
  std::vector<Fd> fds;
};

namespace {

using Clock = std::chrono::steady_clock;
using Deadline = Clock::time_point;
using Header = WireMessage::Header;
static_assert(sizeof(Header) == 16);

constexpr uint32_t kMagic = 0x42465241;  // "ARFB"
constexpr size_t kMaxPayloadBytes = size_t{kMaxWorld} * kMaxBlobBytes;
// An abort must get out even while rank 0 gives up; it is tiny, so a short grace suffices, and
// a peer that cannot take it sees EOF instead.
constexpr auto kAbortGrace = std::chrono::milliseconds(50);

enum Op : uint16_t { kHello = 1, kWelcome, kAbort, kAllGather, kBarrier, kVote, kFds };

const char* op_name(uint16_t op) {
  static constexpr const char* kNames[] = {"unknown",    "hello",   "welcome", "abort",
                                           "all_gather", "barrier", "vote",    "all_gather_fds"};
  return op < std::size(kNames) ? kNames[op] : kNames[0];
}

// What a rank > 0 says first: everything rank 0 needs to tell a misconfigured rank what is wrong.
struct Hello {
  uint8_t id[16];
  uint32_t version;
  int32_t rank;
  int32_t world;
  int32_t pid;
};

// Concatenates strings and numbers into a message.
template <typename... Args>
std::string cat(const Args&... args) {
  std::string out;
  auto append = [&out](const auto& a) {
    if constexpr (std::is_arithmetic_v<std::decay_t<decltype(a)>>) {
      out += std::to_string(a);
    } else {
      out += a;
    }
  };
  (append(args), ...);
  return out;
}

std::string errno_text(const char* what) { return cat(what, ": ", std::strerror(errno)); }

std::string secs(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g s", s);
  return buf;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string out;
  for (int r : ranks) out += cat(out.empty() ? "" : ", ", r);
  return out;
}

Deadline deadline_after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// A rank > 0 waits this much longer than rank 0 before giving up on its own: rank 0 enforces the
// timeout of every phase and knows who is missing, so while it is alive its report (sent to all)
// must win the race; the rank's own expiry is the backstop for a rank 0 that is stuck or gone.
double peer_wait_seconds(double timeout_seconds) {
  return timeout_seconds + std::max(0.2, 0.1 * timeout_seconds);
}

// Waits until an entry of `fds` is ready or the deadline passes: the number ready, 0 on expiry,
// -1 (errno set) on failure. The wait is rounded up to whole ms so it never ends early; EINTR is
// retried against the same deadline.
int poll_until(std::vector<pollfd>& fds, Deadline deadline) {
  for (;;) {
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now());
    const int ms = static_cast<int>(std::clamp<long long>(left.count(), 0, INT_MAX));
    const int n = ::poll(fds.data(), fds.size(), ms);
    if (n >= 0 || errno != EINTR) return n;
  }
}

// Outcome of an I/O step; the caller turns it into a Status naming the rank and the phase.
enum class Io { kOk, kMore, kClosed, kTimeout, kError };
struct IoResult {
  Io kind = Io::kOk;
  std::string detail;
};

// Reads one message from a non-blocking socket, a piece at a time, as data arrives.
class Reader {
 public:
  // Consumes what is available without blocking: kOk when the message is complete, kMore when it
  // needs more data, kClosed on EOF/reset, kError on a malformed message or a failed call.
  IoResult step(int fd) {
    for (;;) {
      const bool in_header = got_ < sizeof(Header);
      const size_t body = in_header ? 0 : got_ - sizeof(Header);
      if (!in_header && body == msg_.payload.size()) {
        if (msg_.fds.size() == msg_.header.num_fds) return {Io::kOk, {}};
        return {Io::kError, cat("message carried ", msg_.fds.size(), " descriptor(s), not ",
                                msg_.header.num_fds)};
      }
      uint8_t* dst = in_header ? reinterpret_cast<uint8_t*>(&msg_.header) + got_
                               : msg_.payload.data() + body;
      const size_t want = in_header ? sizeof(Header) - got_ : msg_.payload.size() - body;
      bool truncated = false;
      const ssize_t n = recv_some(fd, dst, want, &truncated);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return {Io::kMore, {}};
      if (n == 0 || (n < 0 && errno == ECONNRESET)) return {Io::kClosed, {}};
      if (n < 0) return {Io::kError, errno_text("recvmsg")};
      if (truncated) return {Io::kError, "descriptors were truncated (MSG_CTRUNC)"};
      got_ += static_cast<size_t>(n);
      if (got_ != sizeof(Header)) continue;
      const Header& h = msg_.header;
      if (h.magic != kMagic) return {Io::kError, "not an arfusion bootstrap message (bad magic)"};
      if (h.payload_bytes > kMaxPayloadBytes || h.num_fds > kMaxWorld) {
        return {Io::kError,
                cat("header out of bounds (", h.payload_bytes, " bytes, ", h.num_fds, " fds)")};
      }
      msg_.payload.resize(h.payload_bytes);
    }
  }
  WireMessage take() { return std::move(msg_); }

 private:
  // recvmsg that keeps the descriptors that arrive (MSG_CMSG_CLOEXEC: they never leak into exec).
  ssize_t recv_some(int fd, void* buf, size_t len, bool* truncated) {
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxWorld)];
    iovec iov{buf, len};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control;
    msg.msg_controllen = sizeof(control);
    const ssize_t n = ::recvmsg(fd, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (n < 0) return n;
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) continue;
      for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); ++i) {
        int received;
        std::memcpy(&received, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
        msg_.fds.emplace_back(received);
      }
    }
    *truncated = (msg.msg_flags & MSG_CTRUNC) != 0;
    return n;
  }

  WireMessage msg_;
  size_t got_ = 0;
};

// Blocks (bounded) until one whole message has been read.
IoResult recv_message(int fd, Deadline deadline, WireMessage* out) {
  Reader reader;
  for (;;) {
    IoResult r = reader.step(fd);
    if (r.kind == Io::kOk) *out = reader.take();
    if (r.kind != Io::kMore) return r;
    std::vector<pollfd> p{{fd, POLLIN, 0}};
    const int n = poll_until(p, deadline);
    if (n == 0) return {Io::kTimeout, {}};
    if (n < 0) return {Io::kError, errno_text("poll")};
  }
}

// Sends one message (bounded); `fds` ride on its first byte. MSG_NOSIGNAL: a peer that is gone
// yields EPIPE, never a SIGPIPE that would kill this process.
IoResult send_message(int fd, uint16_t op, uint32_t seq, std::span<const uint8_t> payload,
                      std::span<const int> fds, Deadline deadline) {
  const Header h{kMagic, op, static_cast<uint16_t>(fds.size()), seq,
                 static_cast<uint32_t>(payload.size())};
  const auto* head = reinterpret_cast<const uint8_t*>(&h);
  std::vector<uint8_t> buf(head, head + sizeof(h));
  buf.insert(buf.end(), payload.begin(), payload.end());
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int) * kMaxWorld)];
  for (size_t sent = 0; sent < buf.size();) {
    iovec iov{buf.data() + sent, buf.size() - sent};
    msghdr msg{};
    msg.msg_iov = &iov;
    msg.msg_iovlen = 1;
    if (sent == 0 && !fds.empty()) {
      msg.msg_control = control;
      msg.msg_controllen = CMSG_SPACE(sizeof(int) * fds.size());
      cmsghdr* c = CMSG_FIRSTHDR(&msg);
      c->cmsg_level = SOL_SOCKET;
      c->cmsg_type = SCM_RIGHTS;
      c->cmsg_len = CMSG_LEN(sizeof(int) * fds.size());
      std::memcpy(CMSG_DATA(c), fds.data(), sizeof(int) * fds.size());
    }
    const ssize_t n = ::sendmsg(fd, &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) sent += static_cast<size_t>(n);
    if (n > 0 || (n < 0 && errno == EINTR)) continue;
    if (errno == EPIPE || errno == ECONNRESET) return {Io::kClosed, {}};
    if (errno != EAGAIN && errno != EWOULDBLOCK) return {Io::kError, errno_text("sendmsg")};
    std::vector<pollfd> p{{fd, POLLOUT, 0}};
    const int ready = poll_until(p, deadline);
    if (ready == 0) return {Io::kTimeout, {}};
    if (ready < 0) return {Io::kError, errno_text("poll")};
  }
  return {Io::kOk, {}};
}

// A rank > 0's half of every exchange: send our part to rank 0, read its answer. Even when the
// send fails because rank 0 is gone, its last words (an abort naming the cause) may be waiting in
// our receive buffer, so they are read before "closed" is reported.
IoResult send_then_recv(int fd, uint16_t op, std::span<const uint8_t> payload,
                        std::span<const int> fds, uint32_t seq, Deadline deadline,
                        WireMessage* reply) {
  const IoResult sent = send_message(fd, op, seq, payload, fds, deadline);
  if (sent.kind != Io::kOk && sent.kind != Io::kClosed) return sent;
  const IoResult got = recv_message(fd, sent.kind == Io::kOk ? deadline : Clock::now(), reply);
  return sent.kind == Io::kOk || got.kind == Io::kOk ? got : sent;
}

// The Status of a failed exchange with `peer` ("rank 3") in phase `where`.
Status io_status(const IoResult& io, const std::string& where, const std::string& peer,
                 double waited_seconds) {
  switch (io.kind) {
    case Io::kClosed:
      return Status(arfCommFailed,
                    cat(where, ": ", peer, " closed its connection (it exited or failed)"));
    case Io::kTimeout:
      return Status(arfTimeout, cat(where, ": ", peer, " did not answer within ",
                                    secs(waited_seconds),
                                    " (it has not reached this phase, or is stuck)"));
    default: return internal_error(cat(where, ": with ", peer, ": ", io.detail));
  }
}

std::vector<uint8_t> abort_payload(const Status& why) {
  const int32_t code = static_cast<int32_t>(why.code());
  std::vector<uint8_t> p(sizeof(code) + why.message().size());
  std::memcpy(p.data(), &code, sizeof(code));
  std::memcpy(p.data() + sizeof(code), why.message().data(), why.message().size());
  return p;
}

// The error a rank > 0 reports when rank 0 aborted the group: rank 0's code and reason.
Status status_from_abort(const WireMessage& m, const std::string& where) {
  int32_t code = arfInternal;
  std::string text;
  if (m.payload.size() >= sizeof(code)) {
    std::memcpy(&code, m.payload.data(), sizeof(code));
    text.assign(m.payload.begin() + sizeof(code), m.payload.end());
  }
  return Status(static_cast<arfStatus_t>(code), cat(where, ": aborted by rank 0: ", text));
}

void abstract_address(const UniqueId& id, sockaddr_un* addr, socklen_t* len) {
  const std::string name = abstract_socket_name(id);
  *addr = sockaddr_un{};
  addr->sun_family = AF_UNIX;
  std::memcpy(addr->sun_path, name.data(), name.size());  // leading NUL = abstract namespace
  *len = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size());
}

// Owning user only: the uid at the other end of a connected Unix socket (SO_PEERCRED, filled in
// by the kernel, so it cannot be forged) must be our effective uid. Empty string when it is.
std::string check_same_user(int fd) {
  ucred cred{};
  socklen_t len = sizeof(cred);
  if (::getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &len) != 0) {
    return errno_text("getsockopt(SO_PEERCRED)");
  }
  if (cred.uid == ::geteuid()) return {};
  return cat("peer process ", cred.pid, " runs as uid ", cred.uid, ", we run as uid ", ::geteuid(),
             "; only processes of the owning user may join");
}

Fd new_socket() { return Fd(::socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)); }

// Rank 0's view of the rendezvous while ranks arrive.
struct Arrivals {
  struct Pending {
    Fd fd;
    Reader reader;
  };
  std::vector<Pending> pending;  // accepted connections whose hello is not complete yet
  std::vector<int32_t> pids;     // pid per joined rank, for duplicate-rank messages
  int joined = 0;
  int refused = 0;               // connections refused (other user) or gone without a hello
  std::string last_refusal;
};

// Binds the abstract name and listens. A second rank 0 of the same id fails here: the kernel
// refuses a second bind of one abstract name (EADDRINUSE), which is the uniqueness we want.
Result<Fd> listen_on(const UniqueId& id, int backlog) {
  Fd s = new_socket();
  if (!s.valid()) return internal_error(errno_text("socket(AF_UNIX)"));
  sockaddr_un addr;
  socklen_t len;
  abstract_address(id, &addr, &len);
  if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&addr), len) != 0) {
    if (errno != EADDRINUSE) return internal_error(errno_text("bind"));
    return invalid_argument("the rendezvous name for this id is already in use: another process "
                            "is rank 0 of the same id (duplicate rank 0, or an id reused while "
                            "its job still runs)");
  }
  if (::listen(s.get(), backlog) != 0) return internal_error(errno_text("listen"));
  return s;
}

// Accepts every queued connection, refusing other users' (SO_PEERCRED): they are dropped, not
// fatal, so a stranger cannot make the job fail; their rank will be named missing at the timeout.
Status accept_all(int listener, Arrivals* a) {
  for (;;) {
    Fd c(::accept4(listener, nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC));
    if (!c.valid()) {
      if (errno == EAGAIN || errno == EWOULDBLOCK) return Status::ok();
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return internal_error(errno_text("accept4"));
    }
    std::string why = check_same_user(c.get());
    if (why.empty()) {
      a->pending.push_back({std::move(c), Reader{}});
    } else {
      ++a->refused;  // `c` closes
      a->last_refusal = std::move(why);
    }
  }
}

// Why a complete hello does not fit rank 0's group (empty when it fits). Rank 0's view.
std::string hello_mismatch(const WireMessage& m, const UniqueId& id, int world,
                           const std::vector<Fd>& peers, const std::vector<int32_t>& pids,
                           Hello* hello) {
  if (m.header.op != kHello || m.payload.size() != sizeof(Hello)) {
    return cat("a connection sent '", op_name(m.header.op), "' (", m.payload.size(),
               " bytes) instead of a hello");
  }
  std::memcpy(hello, m.payload.data(), sizeof(Hello));
  const Hello& h = *hello;
  const std::string who = cat("rank ", h.rank, " (pid ", h.pid, ")");
  if (h.version != kProtocolVersion) {
    return cat("protocol version mismatch: ", who, " speaks version ", h.version,
               ", rank 0 speaks ", kProtocolVersion, " (mixed arfusion builds?)");
  }
  UniqueId theirs;
  std::memcpy(theirs.bytes.data(), h.id, sizeof(h.id));
  if (theirs != id) {
    return cat("id mismatch: ", who, " has id ", theirs.hex(), ", rank 0 has ", id.hex());
  }
  if (h.world != world) {
    return cat("world size mismatch: ", who, " says world ", h.world, ", rank 0 says world ",
               world);
  }
  if (h.rank == 0) return cat("duplicate rank 0: ", who, " also claims rank 0");
  if (h.rank < 0 || h.rank >= world) return cat(who, " is out of range for world ", world);
  if (!peers[h.rank].valid()) return {};
  return cat("duplicate rank ", h.rank, ": pids ", pids[h.rank], " and ", h.pid, " both claim it");
}

// Advances every pending connection that poll() reported ready (p[1 .. pending.size()]): a
// complete, fitting hello makes it peers[rank]; a misfit fails the group (and the misfit is told
// why). Connections that close or send garbage before their hello are dropped.
Status admit_ready(const std::vector<pollfd>& p, const UniqueId& id, int world,
                   const std::string& where, Arrivals* a, std::vector<Fd>* peers) {
  std::vector<bool> drop(a->pending.size(), false);
  for (size_t i = 0; i < a->pending.size(); ++i) {
    Arrivals::Pending& q = a->pending[i];
    const IoResult r = p[1 + i].revents == 0 ? IoResult{Io::kMore, {}} : q.reader.step(q.fd.get());
    if (r.kind == Io::kMore) continue;
    drop[i] = true;
    if (r.kind != Io::kOk) {
      ++a->refused;
      a->last_refusal = cat("a connection left before its hello ", r.detail);
      continue;
    }
    Hello hello{};
    const std::string bad = hello_mismatch(q.reader.take(), id, world, *peers, a->pids, &hello);
    if (!bad.empty()) {
      const Status s = invalid_argument(cat(where, ": ", bad));
      (void)send_message(q.fd.get(), kAbort, 0, abort_payload(s), {}, Clock::now() + kAbortGrace);
      return s;
    }
    (*peers)[hello.rank] = std::move(q.fd);
    a->pids[hello.rank] = hello.pid;
    ++a->joined;
  }
  for (size_t i = a->pending.size(); i-- > 0;) {
    if (drop[i]) a->pending.erase(a->pending.begin() + static_cast<ptrdiff_t>(i));
  }
  return Status::ok();
}

// Rank 0's report when the rendezvous times out: who never joined, and who was turned away.
Status rendezvous_timeout(const std::string& here, double timeout_seconds,
                          const std::vector<Fd>& peers, const Arrivals& a) {
  std::vector<int> missing;
  for (size_t r = 1; r < peers.size(); ++r) {
    if (!peers[r].valid()) missing.push_back(static_cast<int>(r));
  }
  const std::string refused =
      a.refused == 0 ? ""
                     : cat(" (", a.refused, " connection(s) refused, last: ", a.last_refusal, ")");
  return Status(arfTimeout, cat(here, ": rank 0 waited ", secs(timeout_seconds), "; rank(s) ",
                                rank_list(missing), " of world ", peers.size(), " never joined",
                                refused));
}

// Connects to rank 0's name, retrying while nobody listens yet (ECONNREFUSED) or its backlog is
// full (EAGAIN), with backoff from 1 to 50 ms, until the deadline.
Result<Fd> connect_with_retry(const UniqueId& id, Deadline deadline, double timeout_seconds) {
  sockaddr_un addr;
  socklen_t len;
  abstract_address(id, &addr, &len);
  constexpr auto kMaxBackoff = std::chrono::milliseconds(50);
  for (auto backoff = std::chrono::milliseconds(1);; backoff = std::min(2 * backoff, kMaxBackoff)) {
    Fd s = new_socket();
    if (!s.valid()) return internal_error(errno_text("socket(AF_UNIX)"));
    if (::connect(s.get(), reinterpret_cast<const sockaddr*>(&addr), len) == 0) return s;
    if (errno != ECONNREFUSED && errno != EAGAIN && errno != ENOENT && errno != EINTR) {
      return internal_error(errno_text("connect"));
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      return Status(arfTimeout, cat("nobody listened for this id within ", secs(timeout_seconds),
                                    " (rank 0 has not started, or it exited or failed)"));
    }
    std::this_thread::sleep_until(std::min<Deadline>(now + backoff, deadline));
  }
}

// Rank 0 reads one message from every peer, from all of them at once (so a peer that exits is
// seen at once even while another is slow). `where` prefixes every error.
Status collect(const std::vector<Fd>& peers, Deadline deadline, double timeout_seconds,
               const std::string& where, std::vector<WireMessage>* parts) {
  std::vector<Reader> readers(peers.size());
  std::vector<int> waiting;  // ranks whose contribution is incomplete
  for (int r = 1; r < static_cast<int>(peers.size()); ++r) waiting.push_back(r);
  while (!waiting.empty()) {
    std::vector<pollfd> p;
    for (int r : waiting) p.push_back({peers[r].get(), POLLIN, 0});
    const int n = poll_until(p, deadline);
    if (n < 0) return internal_error(cat(where, ": ", errno_text("poll")));
    if (n == 0) {
      return Status(arfTimeout, cat(where, ": rank 0 waited ", secs(timeout_seconds),
                                    "; no contribution from rank(s) ", rank_list(waiting),
                                    " (they have not reached this collective, or are stuck)"));
    }
    std::vector<int> still;
    for (size_t i = 0; i < p.size(); ++i) {
      const int r = waiting[i];
      const IoResult io = p[i].revents == 0 ? IoResult{Io::kMore, {}} : readers[r].step(p[i].fd);
      if (io.kind == Io::kMore) still.push_back(r);
      if (io.kind == Io::kOk) (*parts)[r] = readers[r].take();
      if (io.kind != Io::kOk && io.kind != Io::kMore) {
        return io_status(io, where, cat("rank ", r), timeout_seconds);
      }
    }
    waiting = std::move(still);
  }
  return Status::ok();
}

// Every contribution must be the same collective, at the same index, of the same size.
Status check_parts(const std::vector<WireMessage>& parts, uint16_t op, uint32_t seq,
                   size_t bytes, size_t num_fds, const std::string& where) {
  for (size_t r = 1; r < parts.size(); ++r) {
    const Header& h = parts[r].header;
    if (h.op != op || h.seq != seq) {
      return invalid_argument(cat(where, ": collective mismatch: rank 0 is in ", op_name(op), " #",
                                  seq, ", rank ", r, " is in ", op_name(h.op), " #", h.seq,
                                  " (every rank must make the same sequence of calls)"));
    }
    if (h.payload_bytes != bytes || parts[r].fds.size() != num_fds) {
      return invalid_argument(cat(where, ": size mismatch: rank 0 contributes ", bytes,
                                  " bytes and ", num_fds, " descriptor(s), rank ", r, " ",
                                  h.payload_bytes, " bytes and ", parts[r].fds.size()));
    }
  }
  return Status::ok();
}

}  // namespace

// ---- UniqueId, Fd -------------------------------------------------------------------------------

Result<UniqueId> UniqueId::generate() {
  UniqueId id;
  ARF_RETURN_IF_ERROR(fill_random(id.bytes));
  return id;
}

Result<UniqueId> UniqueId::parse(std::string_view text) {
  auto space = [](char c) { return std::isspace(static_cast<unsigned char>(c)) != 0; };
  while (!text.empty() && space(text.front())) text.remove_prefix(1);
  while (!text.empty() && space(text.back())) text.remove_suffix(1);
  UniqueId id;
  if (text.size() != 2 * id.bytes.size()) {
    return invalid_argument(cat("unique id '", std::string(text), "' has ", text.size(),
                                " characters; expected ", 2 * id.bytes.size(), " hex digits"));
  }
  auto nibble = [](char c) -> int {
    static constexpr std::string_view kDigits = "0123456789abcdef";
    const size_t at = kDigits.find(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
    return at == std::string_view::npos ? -1 : static_cast<int>(at);
  };
  for (size_t i = 0; i < id.bytes.size(); ++i) {
    const int hi = nibble(text[2 * i]), lo = nibble(text[2 * i + 1]);
    if (hi < 0 || lo < 0) {
      return invalid_argument(cat("unique id '", std::string(text),
                                  "' has a non-hex character at ", hi < 0 ? 2 * i : 2 * i + 1));
    }
    id.bytes[i] = static_cast<uint8_t>(hi << 4 | lo);
  }
  return id;
}

std::string UniqueId::hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  for (uint8_t b : bytes) out += {kDigits[b >> 4], kDigits[b & 15]};
  return out;
}

std::string abstract_socket_name(const UniqueId& id) {
  return std::string(1, '\0') + "arfusion-" + id.hex();
}

// ---- Bootstrap: common --------------------------------------------------------------------------

struct Bootstrap::Gathered {
  std::vector<uint8_t> bytes;  // world * blob bytes, rank order
  std::vector<Fd> fds;         // world descriptors for all_gather_fds, else empty
};

Bootstrap::Bootstrap(const UniqueId& id, int rank, int world, double timeout_seconds)
    : id_(id), rank_(rank), world_(world), timeout_seconds_(timeout_seconds) {}

std::string Bootstrap::where(const char* phase, uint32_t seq) const {
  const std::string_view p(phase);
  return cat("ipc bootstrap (id ", id_.hex().substr(0, 8), "..., rank ", rank_, " of ", world_,
             "), phase ", phase, p == "rendezvous" || p == "connect" ? "" : cat(" #", seq));
}

Status Bootstrap::fail(Status why) {
  if (failure_.is_ok()) failure_ = why;
  peers_.clear();  // closing makes every peer still waiting on us see EOF at once
  return why;
}

void Bootstrap::abort_peers(const Status& why) {
  const std::vector<uint8_t> payload = abort_payload(why);
  const Deadline deadline = Clock::now() + kAbortGrace;
  for (Fd& peer : peers_) {
    if (peer.valid()) (void)send_message(peer.get(), kAbort, 0, payload, {}, deadline);
  }
}

Result<Bootstrap> Bootstrap::connect(const UniqueId& id, int rank, int world,
                                     double timeout_seconds) {
  if (world < 1 || world > kMaxWorld || rank < 0 || rank >= world) {
    return invalid_argument(cat("ipc bootstrap: rank ", rank, " of world ", world,
                                " is not valid (world 1..", kMaxWorld, ")"));
  }
  if (!(timeout_seconds > 0) || timeout_seconds > 1e6) {
    return invalid_argument(
        cat("ipc bootstrap: timeout ", secs(timeout_seconds), " is not in (0, 1e6] s"));
  }
  Bootstrap b(id, rank, world, timeout_seconds);
  const Status s = rank == 0 ? b.rendezvous_root() : b.rendezvous_peer();
  if (!s.is_ok()) return s;
  return b;
}

// ---- Bootstrap: rendezvous ----------------------------------------------------------------------

Status Bootstrap::rendezvous_root() {
  peers_.resize(static_cast<size_t>(world_));
  if (world_ == 1) return Status::ok();  // nobody to meet: no socket at all
  const Deadline deadline = deadline_after(timeout_seconds_);
  const std::string here = where("rendezvous", 0);
  Result<Fd> listener = listen_on(id_, world_);
  if (!listener.is_ok()) {
    return fail(Status(listener.status().code(), cat(here, ": ", listener.status().message())));
  }
  Arrivals a;
  a.pids.assign(static_cast<size_t>(world_), 0);
  while (a.joined < world_ - 1) {
    std::vector<pollfd> p{{listener.value().get(), POLLIN, 0}};
    for (const Arrivals::Pending& q : a.pending) p.push_back({q.fd.get(), POLLIN, 0});
    std::vector<int> joined;  // watched for hangups at p[1 + pending.size() + j]
    for (int r = 1; r < world_; ++r) {
      if (!peers_[r].valid()) continue;
      p.push_back({peers_[r].get(), POLLIN, 0});
      joined.push_back(r);
    }
    const int n = poll_until(p, deadline);
    Status s;
    if (n < 0) s = internal_error(cat(here, ": ", errno_text("poll")));
    if (n == 0) s = rendezvous_timeout(here, timeout_seconds_, peers_, a);
    // Before the welcome a joined rank has nothing to say: readable means it closed.
    for (size_t j = 0; s.is_ok() && j < joined.size(); ++j) {
      if (p[1 + a.pending.size() + j].revents == 0) continue;
      s = io_status({Io::kClosed, {}}, here, cat("rank ", joined[j]), 0);
    }
    if (s.is_ok()) s = admit_ready(p, id_, world_, here, &a, &peers_);
    if (s.is_ok() && p[0].revents != 0) s = accept_all(listener.value().get(), &a);
    if (!s.is_ok()) {
      abort_peers(s);
      return fail(s);
    }
  }
  listener.value().reset();  // everyone is here: free the name (late strangers get ECONNREFUSED)
  for (int r = 1; r < world_; ++r) {
    const IoResult io = send_message(peers_[r].get(), kWelcome, 0, {}, {}, deadline);
    if (io.kind == Io::kOk) continue;
    const Status s = io_status(io, here, cat("rank ", r), timeout_seconds_);
    abort_peers(s);
    return fail(s);
  }
  return Status::ok();
}

Status Bootstrap::rendezvous_peer() {
  const Deadline deadline = deadline_after(peer_wait_seconds(timeout_seconds_));
  const std::string here = where("rendezvous", 0);
  Result<Fd> sock = connect_with_retry(id_, deadline_after(timeout_seconds_), timeout_seconds_);
  if (!sock.is_ok()) {
    const Status& s = sock.status();
    return fail(Status(s.code(), cat(where("connect", 0), ": ", s.message())));
  }
  // The listener could be anyone who bound the name first: never talk to another user's process.
  const std::string foreign = check_same_user(sock.value().get());
  if (!foreign.empty()) return fail(internal_error(cat(here, ": refusing rank 0: ", foreign)));
  peers_.push_back(sock.take());

  Hello hello{{}, kProtocolVersion, rank_, world_, static_cast<int32_t>(::getpid())};
  std::memcpy(hello.id, id_.bytes.data(), sizeof(hello.id));
  const auto* bytes = reinterpret_cast<const uint8_t*>(&hello);
  WireMessage reply;
  const IoResult io =
      send_then_recv(peers_[0].get(), kHello, {bytes, sizeof(hello)}, {}, 0, deadline, &reply);
  if (io.kind != Io::kOk) {
    return fail(io_status(io, here, "rank 0", peer_wait_seconds(timeout_seconds_)));
  }
  if (reply.header.op == kAbort) return fail(status_from_abort(reply, here));
  if (reply.header.op == kWelcome) return Status::ok();
  return fail(internal_error(cat(here, ": rank 0 sent '", op_name(reply.header.op), "'")));
}

// ---- Bootstrap: collectives ---------------------------------------------------------------------

Result<Bootstrap::Gathered> Bootstrap::collective_root(uint16_t op, std::span<const uint8_t> mine,
                                                       int fd, Deadline deadline) {
  const std::string here = where(op_name(op), seq_);
  std::vector<WireMessage> parts(static_cast<size_t>(world_));
  Status s = collect(peers_, deadline, timeout_seconds_, here, &parts);
  const size_t num_fds = fd >= 0 ? 1 : 0;
  if (s.is_ok()) s = check_parts(parts, op, seq_, mine.size(), num_fds, here);
  Gathered g;
  if (s.is_ok() && num_fds == 1) {
    g.fds.emplace_back(::fcntl(fd, F_DUPFD_CLOEXEC, 0));
    if (!g.fds[0].valid()) s = internal_error(cat(here, ": ", errno_text("dup of our descriptor")));
    for (int r = 1; s.is_ok() && r < world_; ++r) g.fds.push_back(std::move(parts[r].fds[0]));
  }
  if (!s.is_ok()) {
    abort_peers(s);
    return s;
  }
  g.bytes.assign(mine.begin(), mine.end());
  for (int r = 1; r < world_; ++r) {
    g.bytes.insert(g.bytes.end(), parts[r].payload.begin(), parts[r].payload.end());
  }
  std::vector<int> raw;
  for (const Fd& f : g.fds) raw.push_back(f.get());
  for (int r = 1; r < world_; ++r) {
    const IoResult io = send_message(peers_[r].get(), op, seq_, g.bytes, raw, deadline);
    if (io.kind == Io::kOk) continue;
    s = io_status(io, here, cat("rank ", r), timeout_seconds_);
    abort_peers(s);
    return s;
  }
  return g;
}

Result<Bootstrap::Gathered> Bootstrap::collective_peer(uint16_t op, std::span<const uint8_t> mine,
                                                       int fd, Deadline deadline) {
  const std::string here = where(op_name(op), seq_);
  const int fds[1] = {fd};
  const size_t num_fds = fd >= 0 ? 1 : 0;
  WireMessage m;
  const IoResult io =
      send_then_recv(peers_[0].get(), op, mine, {fds, num_fds}, seq_, deadline, &m);
  if (io.kind != Io::kOk) return io_status(io, here, "rank 0", peer_wait_seconds(timeout_seconds_));
  if (m.header.op == kAbort) return status_from_abort(m, here);
  const size_t world = static_cast<size_t>(world_);
  if (m.header.op != op || m.header.seq != seq_ || m.payload.size() != mine.size() * world ||
      m.fds.size() != num_fds * world) {
    return internal_error(cat(here, ": rank 0 answered ", op_name(m.header.op), " #",
                              m.header.seq, " with ", m.payload.size(), " bytes and ",
                              m.fds.size(), " descriptor(s)"));
  }
  return Gathered{std::move(m.payload), std::move(m.fds)};
}

Result<Bootstrap::Gathered> Bootstrap::collective(uint16_t op, std::span<const uint8_t> mine,
                                                  int fd) {
  if (!failure_.is_ok()) {
    return Status(arfCommFailed,
                  cat("ipc bootstrap unusable after an earlier failure: ", failure_.message()));
  }
  if (mine.size() > kMaxBlobBytes) {
    return invalid_argument(cat(where(op_name(op), seq_), ": contribution of ", mine.size(),
                                " bytes exceeds ", kMaxBlobBytes));
  }
  // World 1 takes rank 0's path with no peers: no socket, nothing to wait for.
  Result<Gathered> g =
      rank_ == 0
          ? collective_root(op, mine, fd, deadline_after(timeout_seconds_))
          : collective_peer(op, mine, fd, deadline_after(peer_wait_seconds(timeout_seconds_)));
  ++seq_;
  if (!g.is_ok()) return fail(g.status());
  return g;
}

Result<std::vector<uint8_t>> Bootstrap::all_gather(std::span<const uint8_t> mine) {
  Result<Gathered> g = collective(kAllGather, mine, -1);
  if (!g.is_ok()) return g.status();
  return std::move(g.value().bytes);
}

Status Bootstrap::barrier() { return collective(kBarrier, {}, -1).status(); }

Result<VoteResult> Bootstrap::vote(bool yes) {
  const uint8_t ballot = yes ? 1 : 0;
  Result<Gathered> g = collective(kVote, {&ballot, 1}, -1);
  if (!g.is_ok()) return g.status();
  VoteResult v;
  for (int r = 0; r < world_; ++r) {
    if (g.value().bytes[r] != 0) continue;
    v.all_yes = false;
    v.no_ranks.push_back(r);
  }
  return v;
}

Result<std::vector<Fd>> Bootstrap::all_gather_fds(int fd) {
  if (fd < 0) {
    return invalid_argument(cat(where("all_gather_fds", seq_), ": descriptor ", fd, " is invalid"));
  }
  Result<Gathered> g = collective(kFds, {}, fd);
  if (!g.is_ok()) return g.status();
  return std::move(g.value().fds);
}

}  // namespace arf::ipc