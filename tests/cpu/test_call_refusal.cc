// A call refused before launch on some ranks while others issue it (arfusion.h, Return value):
// the same-call logs of both transports (call_signature.h: CallSignatureLog for ranks of one
// process, shared_call_log.h: SharedCallLog across processes, here two ranks' logs in one
// process) report it to whichever rank records the call second — a launching rank must not
// launch, a refusing rank learns that its peer's kernel waits — naming the refusing rank and its
// reason; calls refused on every rank agree (the communicator stays usable). The failure notice
// (Group::mark_failed / peer_failure) then reaches every rank's next call.
#include <gtest/gtest.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "transport/call_signature.h"
#include "transport/local.h"
#include "transport/shared_call_log.h"

namespace arf {
namespace {

using local::CallEntry;
using local::CallSignature;

CallSignature shape(int64_t tokens) {
  CallSignature s;
  s.pattern = 1;
  s.num_elems = tokens * 4096;
  s.row_elems = 4096;
  return s;
}

CallEntry launched(int64_t tokens) { return CallEntry{shape(tokens), false, {}}; }
CallEntry refused(const std::string& why) { return CallEntry{shape(1), true, why}; }

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Two ranks' shared logs in this process, attached to each other as the ipc join attaches them.
struct SharedPair {
  std::vector<ipc::SharedCallLog> logs;
  SharedPair() {
    for (int r = 0; r < 2; ++r) {
      Result<ipc::SharedCallLog> log = ipc::SharedCallLog::create(2, r);
      EXPECT_TRUE(log.is_ok()) << log.status().message();
      logs.push_back(log.take());
    }
    for (int r = 0; r < 2; ++r) {
      std::vector<ipc::Fd> fds;
      for (int q = 0; q < 2; ++q) fds.emplace_back(::dup(logs[q].fd()));
      EXPECT_TRUE(logs[r].attach(fds).is_ok());
    }
  }
};

// One scenario over either transport's log: record(rank, call, entry).
template <typename Record>
void refusal_scenarios(const Record& record) {
  // Calls 0-2 agree; call 3 is refused by both ranks, with different reasons and shapes: nothing
  // was launched, so they agree too.
  for (uint64_t c = 0; c < 3; ++c) {
    EXPECT_TRUE(record(0, c, launched(c + 1)).is_ok());
    EXPECT_TRUE(record(1, c, launched(c + 1)).is_ok());
  }
  EXPECT_TRUE(record(0, 3, refused("input is null")).is_ok());
  EXPECT_TRUE(record(1, 3, CallEntry{shape(9), true, "hidden 12 is not a multiple of 8"}).is_ok());
  // Call 4: rank 1 refuses first, rank 0 launches later: rank 0 must not launch.
  EXPECT_TRUE(record(1, 4, refused("gamma 0x30000004 is not 16-byte aligned")).is_ok());
  const Status launcher = record(0, 4, launched(5));
  EXPECT_EQ(launcher.code(), arfCommFailed) << launcher.message();
  EXPECT_TRUE(contains(launcher.message(), "call 4: rank 1 refused this call (gamma 0x30000004 is "
                                           "not 16-byte aligned) while rank 0 issued it"))
      << launcher.message();
  // Call 5: rank 0 launches first, rank 1 refuses later: rank 1 learns its peer waits.
  EXPECT_TRUE(record(0, 5, launched(6)).is_ok());
  const Status refuser = record(1, 5, refused("eps 0 must be finite and > 0"));
  EXPECT_EQ(refuser.code(), arfCommFailed) << refuser.message();
  EXPECT_TRUE(contains(refuser.message(),
                       "call 5: rank 1 refused this call (eps 0 must be finite and > 0) while "
                       "rank 0 issued it"))
      << refuser.message();
  // Two launched calls that differ are still a mismatch naming both signatures.
  EXPECT_TRUE(record(0, 6, launched(7)).is_ok());
  const Status mismatch = record(1, 6, launched(8));
  EXPECT_EQ(mismatch.code(), arfInvalidArgument) << mismatch.message();
  EXPECT_TRUE(contains(mismatch.message(), "every rank must issue the same sequence of calls"));
}

TEST(CallRefusal, LocalLogReportsARefusalAgainstALaunchToTheLaterRank) {
  local::CallSignatureLog log;
  refusal_scenarios([&](int rank, uint64_t call, const CallEntry& e) {
    return log.record(rank, call, e);
  });
}

TEST(CallRefusal, SharedLogReportsARefusalAgainstALaunchToTheLaterRank) {
  SharedPair pair;
  ASSERT_EQ(pair.logs.size(), 2u);
  refusal_scenarios([&](int rank, uint64_t call, const CallEntry& e) {
    return pair.logs[static_cast<size_t>(rank)].record(call, e);
  });
}

// The failure notice: a rank's failure reaches every peer's next call, the first reason stays.
TEST(CallRefusal, SharedLogCarriesTheFailureToPeers) {
  SharedPair pair;
  ASSERT_EQ(pair.logs.size(), 2u);
  EXPECT_TRUE(pair.logs[0].peer_failure().is_ok());
  EXPECT_TRUE(pair.logs[1].peer_failure().is_ok());
  pair.logs[1].mark_failed("call 4: rank 1 refused this call (input is null)");
  pair.logs[1].mark_failed("a later reason");
  const Status seen = pair.logs[0].peer_failure();
  EXPECT_EQ(seen.code(), arfCommFailed);
  EXPECT_EQ(seen.message(), "rank 1 failed: call 4: rank 1 refused this call (input is null)");
  EXPECT_TRUE(pair.logs[1].peer_failure().is_ok()) << "a rank's own failure is not a peer's";
  // A reason longer than the notice holds is cut, never overrun.
  SharedPair other;
  other.logs[0].mark_failed(std::string(1000, 'x'));
  EXPECT_EQ(other.logs[1].peer_failure().message().size(),
            std::string("rank 0 failed: ").size() + ipc::SharedCallLog::kReasonBytes - 1);
}

TEST(CallRefusal, LocalGroupCarriesTheFailureToPeers) {
  std::vector<RankInfo> infos(3);
  for (int r = 0; r < 3; ++r) infos[r].device = r;
  local::LocalGroup group(infos);
  for (int r = 0; r < 3; ++r) EXPECT_TRUE(group.peer_failure(r).is_ok());
  group.mark_failed(2, Status(arfCommFailed, "call 7: rank 2 refused this call (input is null)"));
  for (int r = 0; r < 2; ++r) {
    const Status s = group.peer_failure(r);
    EXPECT_EQ(s.code(), arfCommFailed);
    EXPECT_EQ(s.message(), "rank 2 failed: call 7: rank 2 refused this call (input is null)");
  }
  EXPECT_TRUE(group.peer_failure(2).is_ok());
}

}  // namespace
}  // namespace arf
