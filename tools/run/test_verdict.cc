// arfusion-run's exit-status contract (verdict.h) and whole-line relay (output.h), without
// starting processes. Wait statuses are built with W_EXITCODE, as waitpid reports them.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <csignal>

#include "args.h"
#include "output.h"
#include "verdict.h"

namespace arf::run {
namespace {

int exited(int code) { return W_EXITCODE(code, 0); }
int killed(int sig) { return W_EXITCODE(0, sig); }

RunRecord record(int num_ranks, std::vector<RankExit> exits) {
  RunRecord r;
  r.num_ranks = num_ranks;
  r.exits = std::move(exits);
  r.grace_seconds = 5;
  return r;
}

TEST(Verdict, AllZeroIsSilentSuccess) {
  const Verdict v = judge(record(2, {{0, 10, exited(0)}, {1, 11, exited(0)}}));
  EXPECT_EQ(v.exit_code, 0);
  EXPECT_EQ(v.message, "");
}

TEST(Verdict, SkippedWhenEveryRankSkippedOrSucceeded) {
  EXPECT_EQ(judge(record(2, {{0, 10, exited(77)}, {1, 11, exited(77)}})).exit_code, 77);
  const Verdict mixed = judge(record(2, {{1, 11, exited(0)}, {0, 10, exited(77)}}));
  EXPECT_EQ(mixed.exit_code, 77);
  EXPECT_NE(mixed.message.find("ranks 0 exited 77"), std::string::npos) << mixed.message;
}

TEST(Verdict, FirstFailureDecides) {
  RunRecord r = record(
      4,
      {{2, 12, exited(3)}, {0, 10, killed(SIGTERM)}, {1, 11, exited(1)}, {3, 13, killed(SIGKILL)}});
  r.first_failure = 0;
  r.stopped_ranks = {0, 1, 3};
  r.killed_ranks = {3};
  const Verdict v = judge(r);
  EXPECT_EQ(v.exit_code, 3);
  EXPECT_NE(v.message.find("rank 2 (pid 12) exited with status 3 first; stopped ranks 0,1,3"),
            std::string::npos)
      << v.message;
  EXPECT_NE(v.message.find("SIGKILL"), std::string::npos) << v.message;
  EXPECT_NE(v.message.find("ranks 3"), std::string::npos) << v.message;
}

TEST(Verdict, SignalDeathIs128PlusSignal) {
  RunRecord r = record(2, {{1, 11, killed(SIGSEGV)}, {0, 10, killed(SIGTERM)}});
  r.first_failure = 0;
  r.stopped_ranks = {0};
  const Verdict v = judge(r);
  EXPECT_EQ(v.exit_code, 128 + SIGSEGV);
  EXPECT_NE(v.message.find("signal 11 (SIGSEGV)"), std::string::npos) << v.message;
}

TEST(Verdict, FailureBeatsSkip) {
  RunRecord r = record(2, {{0, 10, exited(77)}, {1, 11, exited(4)}});
  r.first_failure = 1;
  EXPECT_EQ(judge(r).exit_code, 4);
}

TEST(Verdict, TimeoutIs124AndNamesRunningRanks) {
  RunRecord r = record(3, {{2, 12, exited(0)}, {0, 10, killed(SIGTERM)}, {1, 11, killed(SIGTERM)}});
  r.timed_out = true;
  r.timeout_seconds = 1;
  r.stopped_ranks = {0, 1};
  const Verdict v = judge(r);
  EXPECT_EQ(v.exit_code, kExitTimeout);
  EXPECT_NE(v.message.find("timeout after 1 s; ranks still running, stopped: 0,1"),
            std::string::npos)
      << v.message;
}

TEST(Verdict, ForwardedSignalIsNamed) {
  RunRecord r = record(2, {{0, 10, killed(SIGINT)}, {1, 11, killed(SIGINT)}});
  r.received_signal = SIGINT;
  r.signalled_ranks = {0, 1};
  r.first_failure = 0;
  r.stopped_ranks = {1};
  const Verdict v = judge(r);
  EXPECT_EQ(v.exit_code, 128 + SIGINT);
  EXPECT_EQ(v.message.rfind("arfusion-run: received SIGINT, forwarded to ranks 0,1; rank 0", 0), 0u)
      << v.message;
  RunRecord clean = record(1, {{0, 10, exited(0)}});
  clean.received_signal = SIGTERM;
  clean.signalled_ranks = {0};
  EXPECT_EQ(judge(clean).exit_code, 0);  // the rank handled it and exited 0: transparent
  EXPECT_NE(judge(clean).message, "");
}

TEST(Verdict, Helpers) {
  EXPECT_FALSE(is_failure(exited(0)));
  EXPECT_FALSE(is_failure(exited(77)));
  EXPECT_TRUE(is_failure(exited(1)));
  EXPECT_TRUE(is_failure(killed(SIGKILL)));
  EXPECT_EQ(format_ranks({}), "none");
  EXPECT_EQ(format_ranks({0, 2}), "0,2");
  EXPECT_EQ(signal_name(SIGTERM), "SIGTERM");
}

std::string relay(LinePrefixer& lines, std::initializer_list<std::string_view> chunks) {
  std::string out;
  for (std::string_view chunk : chunks) lines.feed(chunk, &out);
  return out;
}

TEST(LinePrefixer, JoinsPartialLines) {
  LinePrefixer lines(rank_prefix(3, /*enabled=*/true));
  EXPECT_EQ(relay(lines, {"hel", "lo\nwor"}), "[rank 3] hello\n");
  EXPECT_EQ(relay(lines, {"ld\n\nx"}), "[rank 3] world\n[rank 3] \n");
  std::string tail;
  lines.finish(&tail);
  EXPECT_EQ(tail, "[rank 3] x\n");  // EOF ends the unterminated line
  tail.clear();
  lines.finish(&tail);
  EXPECT_EQ(tail, "");
}

TEST(LinePrefixer, NoPrefixStillWholeLines) {
  LinePrefixer lines(rank_prefix(0, /*enabled=*/false));
  EXPECT_EQ(relay(lines, {"a", "b", "\nc"}), "ab\n");
}

TEST(LinePrefixer, CutsOverlongLines) {
  LinePrefixer lines("> ", /*max_line_bytes=*/4);
  EXPECT_EQ(relay(lines, {"ab", "cdefghij\n"}), "> abcd\n> efgh\n> ij\n");
}

}  // namespace
}  // namespace arf::run
