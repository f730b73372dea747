// The ipc transport's host bootstrap (src/transport/ipc_bootstrap.h) with real processes: every
// multi-rank test forks one child per rank. Children never touch gtest: each reports an Outcome
// (status code, text, seconds) through a pipe and _exit()s; the parent reads the reports with a
// hard deadline, SIGKILLs any straggler and always waitpid()s, so a bug shows up as a failed
// expectation, never as a hung test. Timeouts under test are short (0.3-0.5 s).
#include <gtest/gtest.h>

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "transport/ipc.h"
#include "transport/ipc_bootstrap.h"
#include "transport/shared_call_log.h"

namespace arf::ipc {
namespace {

using Clock = std::chrono::steady_clock;

// What one child reports: code 0 and empty text when every check passed; otherwise the status
// code and message of the call under test (or what a check found wrong), and how long it took.
struct Outcome {
  int code = -1;  // -1: the child died without reporting
  std::string text;
  double seconds = 0;
};

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

Outcome from_status(const Status& s, Clock::time_point start) {
  return {static_cast<int>(s.code()), s.message(), seconds_since(start)};
}

Outcome failed_check(const std::string& what) { return {1000, what, 0}; }

// Child side: serialise the outcome to the pipe and leave without running any destructor or
// atexit handler of the parent's (gtest's) state.
[[noreturn]] void report_and_exit(int fd, const Outcome& o) {
  const std::string msg = std::to_string(o.code) + "\n" + std::to_string(o.seconds) + "\n" + o.text;
  size_t done = 0;
  while (done < msg.size()) {
    const ssize_t n = ::write(fd, msg.data() + done, msg.size() - done);
    if (n <= 0) break;
    done += static_cast<size_t>(n);
  }
  ::_exit(0);
}

Outcome parse_report(const std::string& s) {
  Outcome o;
  const size_t a = s.find('\n');
  const size_t b = a == std::string::npos ? a : s.find('\n', a + 1);
  if (b == std::string::npos) return o;
  o.code = std::stoi(s.substr(0, a));
  o.seconds = std::stod(s.substr(a + 1, b - a - 1));
  o.text = s.substr(b + 1);
  return o;
}

// Runs body(i) in `n` forked children and returns their outcomes, in order. Children still
// running after hard_limit_s are killed (their outcome keeps code -1).
std::vector<Outcome> run_children(int n, const std::function<Outcome(int)>& body,
                                  double hard_limit_s = 8.0) {
  std::vector<pid_t> pids;
  std::vector<int> reads;
  for (int i = 0; i < n; ++i) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) break;
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      for (int r : reads) ::close(r);
      report_and_exit(p[1], body(i));
    }
    ::close(p[1]);
    if (pid < 0) {
      ::close(p[0]);
      break;
    }
    pids.push_back(pid);
    reads.push_back(p[0]);
  }
  std::vector<std::string> raw(pids.size());
  std::vector<bool> open(pids.size(), true);
  const auto deadline = Clock::now() + std::chrono::duration<double>(hard_limit_s);
  for (size_t left = pids.size(); left > 0 && Clock::now() < deadline;) {
    std::vector<pollfd> p;
    std::vector<size_t> who;
    for (size_t i = 0; i < pids.size(); ++i) {
      if (open[i]) p.push_back({reads[i], POLLIN, 0}), who.push_back(i);
    }
    if (::poll(p.data(), p.size(), 50) < 0 && errno != EINTR) break;
    for (size_t k = 0; k < p.size(); ++k) {
      if (p[k].revents == 0) continue;
      char buf[4096];
      const ssize_t got = ::read(p[k].fd, buf, sizeof(buf));
      if (got > 0) raw[who[k]].append(buf, static_cast<size_t>(got));
      if (got == 0 || (got < 0 && errno != EINTR)) open[who[k]] = false, --left;
    }
  }
  std::vector<Outcome> out;
  for (size_t i = 0; i < pids.size(); ++i) {
    if (open[i]) ::kill(pids[i], SIGKILL);  // a straggler: never let it hang the suite
    int wstatus = 0;
    ::waitpid(pids[i], &wstatus, 0);
    ::close(reads[i]);
    out.push_back(parse_report(raw[i]));
  }
  EXPECT_EQ(out.size(), static_cast<size_t>(n)) << "fork failed";
  return out;
}

UniqueId fresh_id() {
  Result<UniqueId> id = UniqueId::generate();
  EXPECT_TRUE(id.is_ok()) << id.status().message();
  return id.is_ok() ? id.value() : UniqueId{};
}

bool contains(const std::string& s, const std::string& part) {
  return s.find(part) != std::string::npos;
}

// Every child must have passed all its checks (code 0).
void expect_all_ok(const std::vector<Outcome>& outcomes) {
  for (size_t i = 0; i < outcomes.size(); ++i) {
    EXPECT_EQ(outcomes[i].code, 0) << "child " << i << ": " << outcomes[i].text;
  }
}

int count_open_fds() {
  int n = 0;
  for ([[maybe_unused]] const auto& e : std::filesystem::directory_iterator("/proc/self/fd")) ++n;
  return n;
}

// ---- UniqueId ----------------------------------------------------------------------------------

TEST(IpcUniqueId, HexRoundTripsAndIdsDiffer) {
  const UniqueId a = fresh_id(), b = fresh_id();
  EXPECT_NE(a, b);
  ASSERT_EQ(a.hex().size(), 32u);
  Result<UniqueId> back = UniqueId::parse(a.hex());
  ASSERT_TRUE(back.is_ok()) << back.status().message();
  EXPECT_EQ(back.value(), a);
  std::string upper = "  " + a.hex() + "\n";  // env values may carry case and whitespace
  for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  ASSERT_TRUE(UniqueId::parse(upper).is_ok());
  EXPECT_EQ(UniqueId::parse(upper).value(), a);
  const std::string name = abstract_socket_name(a);
  EXPECT_EQ(name[0], '\0');  // abstract namespace: no file is ever created
  EXPECT_EQ(name.substr(1), "arfusion-" + a.hex());
}

TEST(IpcUniqueId, ParseRejectsMalformedText) {
  const Status short_id = UniqueId::parse("abc").status();
  EXPECT_EQ(short_id.code(), arfInvalidArgument);
  EXPECT_TRUE(contains(short_id.message(), "expected 32 hex digits")) << short_id.message();
  const Status bad = UniqueId::parse(std::string(31, '0') + "g").status();
  EXPECT_EQ(bad.code(), arfInvalidArgument);
  EXPECT_TRUE(contains(bad.message(), "non-hex character at 31")) << bad.message();
}

// ---- successful collectives at every world size --------------------------------------------

class IpcBootstrapWorld : public ::testing::TestWithParam<int> {};

struct Facts {  // stands in for the device facts ranks will exchange
  int32_t rank;
  int32_t sm_count;
  int64_t capacity;
};

Outcome gather_body(const UniqueId& id, int rank, int world) {
  Result<Bootstrap> b = Bootstrap::connect(id, rank, world, 5.0);
  if (!b.is_ok()) return from_status(b.status(), Clock::now());
  std::vector<uint8_t> mine(24);
  for (size_t j = 0; j < mine.size(); ++j) mine[j] = static_cast<uint8_t>(rank * 31 + j);
  Result<std::vector<uint8_t>> all = b.value().all_gather(mine);
  if (!all.is_ok()) return from_status(all.status(), Clock::now());
  if (all.value().size() != mine.size() * world) return failed_check("all_gather size");
  for (int r = 0; r < world; ++r) {
    for (size_t j = 0; j < mine.size(); ++j) {
      if (all.value()[r * mine.size() + j] != static_cast<uint8_t>(r * 31 + j)) {
        return failed_check("blob of rank " + std::to_string(r) + " byte " + std::to_string(j));
      }
    }
  }
  if (Status s = b.value().barrier(); !s.is_ok()) return from_status(s, Clock::now());
  Result<std::vector<Facts>> facts = b.value().all_gather_value(Facts{rank, 100 + rank, 7 * rank});
  if (!facts.is_ok()) return from_status(facts.status(), Clock::now());
  for (int r = 0; r < world; ++r) {
    const Facts& f = facts.value()[r];
    if (f.rank != r || f.sm_count != 100 + r || f.capacity != 7 * r) {
      return failed_check("facts of rank " + std::to_string(r));
    }
  }
  Result<std::vector<uint8_t>> empty = b.value().all_gather({});
  if (!empty.is_ok() || !empty.value().empty()) return failed_check("empty all_gather");
  return {0, "", 0};
}

TEST_P(IpcBootstrapWorld, AllGatherBarrierAndValues) {
  const int world = GetParam();
  const UniqueId id = fresh_id();
  expect_all_ok(run_children(world, [&](int rank) { return gather_body(id, rank, world); }));
}

// Each rank writes a distinct pattern into a memfd, passes the descriptor, and reads every
// peer's pattern back through the descriptor it received; no descriptor may leak.
Outcome fds_body(const UniqueId& id, int rank, int world) {
  constexpr size_t kBytes = 4096;
  auto pattern = [](int r, size_t j) { return static_cast<uint8_t>(r * 37 + j * 11 + 1); };
  const int fds_before = count_open_fds();
  {
    Fd mem(::memfd_create("arf-ipc-test", MFD_CLOEXEC));
    if (!mem.valid()) return failed_check("memfd_create failed");
    std::vector<uint8_t> mine(kBytes);
    for (size_t j = 0; j < kBytes; ++j) mine[j] = pattern(rank, j);
    if (::pwrite(mem.get(), mine.data(), kBytes, 0) != static_cast<ssize_t>(kBytes)) {
      return failed_check("pwrite failed");
    }
    Result<Bootstrap> b = Bootstrap::connect(id, rank, world, 5.0);
    if (!b.is_ok()) return from_status(b.status(), Clock::now());
    for (int round = 0; round < 2; ++round) {  // twice: the exchange can be repeated
      Result<std::vector<Fd>> got = b.value().all_gather_fds(mem.get());
      if (!got.is_ok()) return from_status(got.status(), Clock::now());
      if (got.value().size() != static_cast<size_t>(world)) return failed_check("fd count");
      for (int r = 0; r < world; ++r) {
        std::vector<uint8_t> seen(kBytes);
        if (::pread(got.value()[r].get(), seen.data(), kBytes, 0) != static_cast<ssize_t>(kBytes)) {
          return failed_check("pread of rank " + std::to_string(r) + "'s descriptor failed");
        }
        for (size_t j = 0; j < kBytes; ++j) {
          if (seen[j] != pattern(r, j)) {
            return failed_check("rank " + std::to_string(r) + "'s pattern differs at " +
                                std::to_string(j));
          }
        }
      }
      struct stat own{}, back{};
      ::fstat(mem.get(), &own);
      ::fstat(got.value()[rank].get(), &back);
      if (own.st_ino != back.st_ino || got.value()[rank].get() == mem.get()) {
        return failed_check("own entry is not a new descriptor of our memfd");
      }
    }
  }
  const int fds_after = count_open_fds();
  if (fds_after != fds_before) {
    return failed_check("descriptor leak: " + std::to_string(fds_before) + " open before, " +
                        std::to_string(fds_after) + " after");
  }
  return {0, "", 0};
}

TEST_P(IpcBootstrapWorld, PassesFdsAndEveryRankReadsEveryPeersPattern) {
  const int world = GetParam();
  const UniqueId id = fresh_id();
  expect_all_ok(run_children(world, [&](int rank) { return fds_body(id, rank, world); }));
}

INSTANTIATE_TEST_SUITE_P(Ipc, IpcBootstrapWorld, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& info) { return "world" + std::to_string(info.param); });

// ---- agreement and isolation ------------------------------------------------------------------

TEST(IpcBootstrap, VoteAndsBallotsAndNamesTheRanksThatSaidNo) {
  const UniqueId id = fresh_id();
  auto body = [&](int rank) -> Outcome {
    Result<Bootstrap> b = Bootstrap::connect(id, rank, 4, 5.0);
    if (!b.is_ok()) return from_status(b.status(), Clock::now());
    Result<VoteResult> v = b.value().vote(rank != 2);
    if (!v.is_ok()) return from_status(v.status(), Clock::now());
    if (v.value().all_yes || v.value().no_ranks != std::vector<int>{2}) {
      return failed_check("first vote: expected AND=false, no from rank 2 only");
    }
    v = b.value().vote(true);
    if (!v.is_ok() || !v.value().all_yes || !v.value().no_ranks.empty()) {
      return failed_check("second vote: expected unanimous yes");
    }
    v = b.value().vote(rank == 1);
    if (!v.is_ok() || v.value().no_ranks != std::vector<int>{0, 2, 3}) {
      return failed_check("third vote: expected no from ranks 0, 2, 3");
    }
    return {0, "", 0};
  };
  expect_all_ok(run_children(4, body));
}

TEST(IpcBootstrap, ConcurrentGroupsWithDifferentIdsDoNotInterfere) {
  const UniqueId ids[2] = {fresh_id(), fresh_id()};
  constexpr int kWorld = 3;
  auto body = [&](int i) -> Outcome {
    const int group = i % 2, rank = i / 2;  // children interleave: A0 B0 A1 B1 A2 B2
    Result<Bootstrap> b = Bootstrap::connect(ids[group], rank, kWorld, 5.0);
    if (!b.is_ok()) return from_status(b.status(), Clock::now());
    Result<std::vector<int>> tags = b.value().all_gather_value(group * 100 + rank);
    if (!tags.is_ok()) return from_status(tags.status(), Clock::now());
    for (int r = 0; r < kWorld; ++r) {
      if (tags.value()[r] != group * 100 + r) return failed_check("saw another group's member");
    }
    return {0, "", 0};
  };
  expect_all_ok(run_children(2 * kWorld, body));
}

// ---- misconfiguration: clear errors, fast ------------------------------------------------------

TEST(IpcBootstrap, WorldSizeMismatchFailsEveryRankFast) {
  const UniqueId id = fresh_id();
  auto body = [&](int rank) {
    const auto start = Clock::now();
    return from_status(Bootstrap::connect(id, rank, rank == 0 ? 2 : 3, 5.0).status(), start);
  };
  for (const Outcome& o : run_children(2, body)) {
    EXPECT_EQ(o.code, arfInvalidArgument) << o.text;
    EXPECT_TRUE(contains(o.text, "world size mismatch: rank 1")) << o.text;
    EXPECT_TRUE(contains(o.text, "says world 3, rank 0 says world 2")) << o.text;
    EXPECT_LT(o.seconds, 2.0);  // told at once, not after the 5 s timeout
  }
}

TEST(IpcBootstrap, DuplicateRankFailsEveryRankFast) {
  const UniqueId id = fresh_id();
  auto body = [&](int i) {
    const auto start = Clock::now();
    return from_status(Bootstrap::connect(id, i == 0 ? 0 : 1, 3, 5.0).status(), start);
  };
  for (const Outcome& o : run_children(3, body)) {  // ranks 0, 1, 1 of world 3
    EXPECT_EQ(o.code, arfInvalidArgument) << o.text;
    EXPECT_TRUE(contains(o.text, "duplicate rank 1: pids")) << o.text;
    EXPECT_LT(o.seconds, 2.0);
  }
}

TEST(IpcBootstrap, SecondRankZeroOfAnIdIsRefused) {
  const UniqueId id = fresh_id();
  // Squat the name as a first rank 0 would: the real rank 0 must refuse at once, not wait.
  Fd squatter(::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  const std::string name = abstract_socket_name(id);
  std::memcpy(addr.sun_path, name.data(), name.size());
  ASSERT_EQ(::bind(squatter.get(), reinterpret_cast<sockaddr*>(&addr),
                   static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + name.size())), 0);
  const Status s = Bootstrap::connect(id, 0, 2, 5.0).status();
  EXPECT_EQ(s.code(), arfInvalidArgument);
  EXPECT_TRUE(contains(s.message(), "already in use")) << s.message();
}

TEST(IpcBootstrap, InvalidArgumentsAreRejectedWithoutWaiting) {
  const UniqueId id = fresh_id();
  EXPECT_EQ(Bootstrap::connect(id, 2, 2, 1.0).status().code(), arfInvalidArgument);
  EXPECT_EQ(Bootstrap::connect(id, 0, 0, 1.0).status().code(), arfInvalidArgument);
  EXPECT_EQ(Bootstrap::connect(id, 0, kMaxWorld + 1, 1.0).status().code(), arfInvalidArgument);
  EXPECT_EQ(Bootstrap::connect(id, 0, 2, 0.0).status().code(), arfInvalidArgument);
  Result<Bootstrap> solo = Bootstrap::connect(id, 0, 1, 1.0);
  ASSERT_TRUE(solo.is_ok()) << solo.status().message();
  EXPECT_EQ(solo.value().all_gather_fds(-1).status().code(), arfInvalidArgument);
}

TEST(IpcBootstrap, CollectiveMismatchFailsEveryRank) {
  const UniqueId id = fresh_id();
  auto body = [&](int rank) -> Outcome {
    Result<Bootstrap> b = Bootstrap::connect(id, rank, 3, 5.0);
    if (!b.is_ok()) return from_status(b.status(), Clock::now());
    const auto start = Clock::now();
    const uint32_t x = 7;
    const Status s = rank == 1 ? b.value().barrier() : b.value().all_gather_value(x).status();
    Outcome o = from_status(s, start);
    // Once failed, the bootstrap stays failed.
    if (b.value().barrier().code() != arfCommFailed) return failed_check("failure not sticky");
    return o;
  };
  for (const Outcome& o : run_children(3, body)) {
    EXPECT_EQ(o.code, arfInvalidArgument) << o.text;
    EXPECT_TRUE(contains(o.text, "collective mismatch: rank 0 is in all_gather #0, rank 1 is in "
                                 "barrier #0")) << o.text;
    EXPECT_LT(o.seconds, 2.0);
  }
}

TEST(IpcBootstrap, BlobSizeMismatchFailsEveryRank) {
  const UniqueId id = fresh_id();
  auto body = [&](int rank) -> Outcome {
    Result<Bootstrap> b = Bootstrap::connect(id, rank, 2, 5.0);
    if (!b.is_ok()) return from_status(b.status(), Clock::now());
    const std::vector<uint8_t> blob(rank == 0 ? 8 : 12);
    return from_status(b.value().all_gather(blob).status(), Clock::now());
  };
  for (const Outcome& o : run_children(2, body)) {
    EXPECT_EQ(o.code, arfInvalidArgument) << o.text;
    EXPECT_TRUE(contains(o.text, "size mismatch: rank 0 contributes 8 bytes")) << o.text;
  }
}

// ---- absent and dying ranks: bounded, and named -----------------------------------------------

TEST(IpcBootstrap, MissingRankTimesOutNamingThePhaseAndTheRank) {
  const UniqueId id = fresh_id();
  auto body = [&](int rank) {  // ranks 0 and 1 of world 3; rank 2 never comes
    const auto start = Clock::now();
    return from_status(Bootstrap::connect(id, rank, 3, 0.5).status(), start);
  };
  const std::vector<Outcome> o = run_children(2, body);
  ASSERT_EQ(o.size(), 2u);
  for (const Outcome& x : o) {  // rank 1 learns rank 0's report (it waits a little longer)
    EXPECT_EQ(x.code, arfTimeout) << x.text;
    EXPECT_TRUE(contains(x.text, "rank(s) 2 of world 3 never joined")) << x.text;
    EXPECT_TRUE(contains(x.text, "phase rendezvous")) << x.text;
    EXPECT_GE(x.seconds, 0.4);
    EXPECT_LT(x.seconds, 2.0);
  }
}

TEST(IpcBootstrap, MissingRankZeroTimesOutInConnect) {
  const auto start = Clock::now();
  const Status s = Bootstrap::connect(fresh_id(), 1, 2, 0.3).status();
  EXPECT_EQ(s.code(), arfTimeout);
  EXPECT_TRUE(contains(s.message(), "phase connect: nobody listened")) << s.message();
  EXPECT_LT(seconds_since(start), 2.0);
}

TEST(IpcBootstrap, MissingContributionTimesOutNamingTheCollective) {
  const UniqueId id = fresh_id();
  auto body = [&](int rank) -> Outcome {
    Result<Bootstrap> b = Bootstrap::connect(id, rank, 3, 0.5);
    if (!b.is_ok()) return from_status(b.status(), Clock::now());
    if (rank == 2) {  // late: rank 0 gives up on it and tells everyone
      ::usleep(800 * 1000);
      return from_status(b.value().barrier(), Clock::now());
    }
    const auto start = Clock::now();
    return from_status(b.value().barrier(), start);
  };
  const std::vector<Outcome> o = run_children(3, body);
  ASSERT_EQ(o.size(), 3u);
  for (int r = 0; r < 2; ++r) {
    EXPECT_EQ(o[r].code, arfTimeout) << o[r].text;
    EXPECT_TRUE(contains(o[r].text, "phase barrier #0")) << o[r].text;
    EXPECT_TRUE(contains(o[r].text, "no contribution from rank(s) 2")) << o[r].text;
    EXPECT_LT(o[r].seconds, 2.0);
  }
  EXPECT_NE(o[2].code, 0) << "the late rank must not succeed alone";
}

// A rank that leaves after the rendezvous (normally or not) fails everyone at once.
void expect_departure_detected(int leaver) {
  const UniqueId id = fresh_id();
  auto body = [&](int rank) -> Outcome {
    Result<Bootstrap> b = Bootstrap::connect(id, rank, 4, 5.0);
    if (!b.is_ok()) return from_status(b.status(), Clock::now());
    if (!b.value().all_gather_value(rank).is_ok()) return failed_check("first all_gather");
    if (rank == leaver) return {0, "left", 0};  // the child exits: its socket closes
    const auto start = Clock::now();
    return from_status(b.value().barrier(), start);
  };
  const std::vector<Outcome> o = run_children(4, body);
  ASSERT_EQ(o.size(), 4u);
  const std::string who = "rank " + std::to_string(leaver) + " closed";
  for (int r = 0; r < 4; ++r) {
    if (r == leaver) continue;
    EXPECT_EQ(o[r].code, arfCommFailed) << o[r].text;
    EXPECT_TRUE(contains(o[r].text, who)) << o[r].text;
    EXPECT_TRUE(contains(o[r].text, "phase barrier #1")) << o[r].text;
    EXPECT_LT(o[r].seconds, 2.0);  // EOF seen at once, not after the 5 s timeout
  }
}

TEST(IpcBootstrap, PeerExitingMidwayFailsTheOthersFast) { expect_departure_detected(3); }
TEST(IpcBootstrap, RankZeroExitingMidwayFailsTheOthersFast) { expect_departure_detected(0); }

TEST(IpcBootstrap, RankKilledDuringRendezvousFailsTheOthersFast) {
  const UniqueId id = fresh_id();
  auto body = [&](int rank) -> Outcome {  // ranks 0 and 1 of world 3; rank 2 never comes
    if (rank == 1) {
      itimerval t{};
      t.it_value.tv_usec = 300 * 1000;  // SIGALRM (default: terminate) while waiting in connect
      ::setitimer(ITIMER_REAL, &t, nullptr);
    }
    const auto start = Clock::now();
    return from_status(Bootstrap::connect(id, rank, 3, 5.0).status(), start);
  };
  const std::vector<Outcome> o = run_children(2, body);
  ASSERT_EQ(o.size(), 2u);
  EXPECT_EQ(o[1].code, -1) << "rank 1 should have been killed: " << o[1].text;
  EXPECT_EQ(o[0].code, arfCommFailed) << o[0].text;
  EXPECT_TRUE(contains(o[0].text, "phase rendezvous: rank 1 closed its connection")) << o[0].text;
  EXPECT_LT(o[0].seconds, 2.0);
}

constexpr int kNoSetuid = 2000;

TEST(IpcBootstrap, ProcessesOfAnotherUserAreRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to run a child as another uid";
  const UniqueId id = fresh_id();
  auto body = [&](int rank) {
    if (rank == 1 && ::setuid(65534) != 0) return Outcome{kNoSetuid, "setuid failed", 0};
    const auto start = Clock::now();
    return from_status(Bootstrap::connect(id, rank, 2, 0.5).status(), start);
  };
  const std::vector<Outcome> o = run_children(2, body);
  ASSERT_EQ(o.size(), 2u);
  if (o[1].code == kNoSetuid) GTEST_SKIP() << "this sandbox does not allow setuid";
  EXPECT_EQ(o[0].code, arfTimeout) << o[0].text;
  EXPECT_TRUE(contains(o[0].text, "refused, last: peer process")) << o[0].text;
  EXPECT_EQ(o[1].code, arfInternal) << o[1].text;
  EXPECT_TRUE(contains(o[1].text, "refusing rank 0")) << o[1].text;
}


// ipc::join's agreement (transport/ipc.h): a rank whose local setup fails (here rank 1 names a
// device that does not exist; without a GPU rank 0 fails too) does not leave its peers waiting:
// every rank returns the same verdict, naming the lowest failing rank and the phase. Runs the same
// on the CPU-only CI and on a GPU machine.
TEST(IpcJoin, EveryRankGetsTheSameVerdictWhenOneCannotSetUp) {
  arfUniqueId id{};
  const UniqueId key = fresh_id();
  std::memcpy(id.internal, key.bytes.data(), key.bytes.size());
  auto body = [&](int rank) {
    JoinRequest req;
    req.id = id;
    req.rank = rank;
    req.world = 2;
    req.timeout_seconds = 5;
    req.proto.device = rank == 1 ? 9999 : 0;
    req.proto.max_tokens = 16;
    req.proto.max_hidden = 64;
    req.proto.oneshot_max_tokens = 16;
    Result<WorkspaceLayout> layout = workspace_layout(2, DType::kBf16, 16, 64, 16);
    if (!layout.is_ok()) return failed_check(layout.status().message());
    req.layout = layout.value();
    const auto start = Clock::now();
    return from_status(join(req).status(), start);
  };
  const std::vector<Outcome> o = run_children(2, body, 20.0);
  ASSERT_EQ(o.size(), 2u);
  EXPECT_NE(o[0].code, 0) << o[0].text;
  EXPECT_EQ(o[0].code, o[1].code) << o[0].text << " / " << o[1].text;
  EXPECT_EQ(o[0].text, o[1].text);
  EXPECT_TRUE(contains(o[0].text, "ipc init (allocate and export the workspace): rank ")) << o[0].text;
  EXPECT_LT(o[0].seconds, 5.0) << "agreement must not wait for a timeout";
}


// The ipc transport's cross-process call check (transport/shared_call_log.h): rank 0 publishes
// calls 0..9; rank 1 then records the same 0..4, a different call 5 (refused, naming both ranks
// and signatures), and a call 300 that shares call 44's slot (never compared: not flagged).
TEST(SharedCallLog, MismatchedCallIsRefusedNamingBothRanks) {
  const UniqueId id = fresh_id();
  auto sig = [](int64_t elems) {
    local::CallSignature s;
    s.pattern = 1;
    s.num_elems = elems;
    s.row_elems = 64;
    return s;
  };
  auto body = [&](int rank) {
    const auto start = Clock::now();
    Result<Bootstrap> boot = Bootstrap::connect(id, rank, 2, 5.0);
    if (!boot.is_ok()) return from_status(boot.status(), start);
    Result<SharedCallLog> log = SharedCallLog::create(2, rank);
    if (!log.is_ok()) return from_status(log.status(), start);
    Result<std::vector<Fd>> fds = boot.value().all_gather_fds(log.value().fd());
    if (!fds.is_ok()) return from_status(fds.status(), start);
    if (Status s = log.value().attach(fds.value()); !s.is_ok()) return from_status(s, start);
    if (rank == 0) {
      for (uint64_t c = 0; c < 10; ++c) {
        if (Status s = log.value().record(c, sig(64 * (c + 1))); !s.is_ok()) {
          return failed_check("rank 0 call " + std::to_string(c) + ": " + s.message());
        }
      }
    }
    if (Status s = boot.value().barrier(); !s.is_ok()) return from_status(s, start);
    if (rank == 1) {
      for (uint64_t c = 0; c < 5; ++c) {
        if (Status s = log.value().record(c, sig(64 * (c + 1))); !s.is_ok()) {
          return failed_check("rank 1 call " + std::to_string(c) + ": " + s.message());
        }
      }
      const Status bad = log.value().record(5, sig(999 * 64));
      if (bad.code() != arfInvalidArgument ||
          !contains(bad.message(), "call 5: rank 1 issued") ||
          !contains(bad.message(), "but rank 0 issued")) {
        return failed_check("expected a mismatch naming ranks 1 and 0, got: " + bad.message());
      }
      if (Status s = log.value().record(300, sig(7 * 64)); !s.is_ok()) {
        return failed_check("a lapped slot was compared: " + s.message());
      }
    }
    if (Status s = boot.value().barrier(); !s.is_ok()) return from_status(s, start);
    return Outcome{0, "", seconds_since(start)};
  };
  expect_all_ok(run_children(2, body));
}

}  // namespace
}  // namespace arf::ipc
