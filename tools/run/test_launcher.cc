// End-to-end tests of the built arfusion-run binary (ARF_RUN_BINARY) on /bin/sh commands: the
// rank environment, failure propagation and the exit status, the time limit, skips, line-whole
// output, signal forwarding, and that no rank process (or what it started) outlives the launcher.
// Every wait is driven by the ranks' own output or a file, not by sleeps, so the tests are
// deterministic on a loaded 2-core CI machine; the slowest one (--timeout 1) takes about 1 s.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

#ifndef ARF_RUN_BINARY
#error "ARF_RUN_BINARY (path of the arfusion-run binary) is set by cmake/run.cmake"
#endif

namespace {

using Clock = std::chrono::steady_clock;
using Env = std::vector<std::pair<std::string, std::optional<std::string>>>;

const std::string kId = "0123456789abcdef0123456789abcdef";
constexpr double kHardLimitSeconds = 20;  // a hung launcher fails the test instead of ctest

struct Result {
  int status = -1;  // exit code, or 128 + signal
  std::string out, err;
  double seconds = 0;
};

// Called after every chunk of launcher output, with the launcher's pid and all output so far.
using OnOutput = std::function<void(pid_t, const std::string& out, const std::string& err)>;

[[noreturn]] void exec_launcher(const std::vector<std::string>& args, const Env& env, int out_fd,
                                int err_fd) {
  for (const auto& [name, value] : env) {
    if (value)
      setenv(name.c_str(), value->c_str(), 1);
    else
      unsetenv(name.c_str());
  }
  dup2(out_fd, STDOUT_FILENO);
  dup2(err_fd, STDERR_FILENO);
  std::vector<char*> argv{const_cast<char*>(ARF_RUN_BINARY)};
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  execv(ARF_RUN_BINARY, argv.data());
  _exit(99);
}

// Reads the launcher's stdout and stderr to EOF (the hard limit SIGKILLs it), then reaps it.
void collect(pid_t pid, int out_fd, int err_fd, const OnOutput& on_output, Result& r,
             Clock::time_point start) {
  int fds[2] = {out_fd, err_fd};
  std::string* sinks[2] = {&r.out, &r.err};
  while (fds[0] >= 0 || fds[1] >= 0) {
    pollfd p[2] = {{fds[0], POLLIN, 0}, {fds[1], POLLIN, 0}};
    poll(p, 2, 100);
    for (int i = 0; i < 2; ++i) {
      if (fds[i] < 0 || p[i].revents == 0) continue;
      char buf[4096];
      const ssize_t n = read(fds[i], buf, sizeof(buf));
      if (n <= 0) {
        close(fds[i]);
        fds[i] = -1;
      } else {
        sinks[i]->append(buf, static_cast<size_t>(n));
        if (on_output) on_output(pid, r.out, r.err);
      }
    }
    if (std::chrono::duration<double>(Clock::now() - start).count() > kHardLimitSeconds) {
      ADD_FAILURE() << "arfusion-run still running after " << kHardLimitSeconds << " s";
      kill(pid, SIGKILL);
    }
  }
  int status = 0;
  waitpid(pid, &status, 0);
  r.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

Result launch(const std::vector<std::string>& args, const OnOutput& on_output = nullptr,
              const Env& env = {}) {
  int out[2], err[2];
  EXPECT_EQ(pipe2(out, O_CLOEXEC), 0);
  EXPECT_EQ(pipe2(err, O_CLOEXEC), 0);
  const auto start = Clock::now();
  const pid_t pid = fork();
  if (pid == 0) exec_launcher(args, env, out[1], err[1]);
  close(out[1]);
  close(err[1]);
  Result r;
  collect(pid, out[0], err[0], on_output, r, start);
  r.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return r;
}

// Launcher options, then "-- /bin/sh -c script".
std::vector<std::string> sh(std::vector<std::string> options, const std::string& script) {
  options.insert(options.end(), {"--", "/bin/sh", "-c", script});
  return options;
}

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> sorted_lines(const std::string& text) {
  auto lines = lines_of(text);
  std::sort(lines.begin(), lines.end());
  return lines;
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

size_t count_of(const std::string& text, const std::string& part) {
  size_t count = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++count;
  return count;
}

// Dead or a zombie (an orphan whose reaper has not run yet), within two seconds.
bool process_gone(pid_t pid) {
  const auto until = Clock::now() + std::chrono::seconds(2);
  do {
    std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return true;
    const size_t paren = line.rfind(')');
    if (paren != std::string::npos && paren + 2 < line.size() &&
        (line[paren + 2] == 'Z' || line[paren + 2] == 'X')) {
      return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  } while (Clock::now() < until);
  return false;
}

// The pids that ranks printed as "ready <pid>".
std::vector<pid_t> ready_pids(const std::string& out) {
  std::vector<pid_t> pids;
  static const std::regex kReady(R"(ready (\d+))");
  for (std::sregex_iterator it(out.begin(), out.end(), kReady), end; it != end; ++it) {
    pids.push_back(static_cast<pid_t>(std::stoi((*it)[1])));
  }
  return pids;
}

const char* kEnvScript =
    "echo \"$ARF_RANK $ARF_LOCAL_RANK $ARF_WORLD_SIZE $ARF_DEVICE $ARF_RENDEZVOUS_ID "
    "$CUDA_DEVICE_MAX_CONNECTIONS $NCCL_NVLS_ENABLE\"";

TEST(Launcher, EnvironmentPerRank) {
  const Env env = {{"CUDA_VISIBLE_DEVICES", "0,1"},
                   {"CUDA_DEVICE_MAX_CONNECTIONS", std::nullopt},
                   {"NCCL_NVLS_ENABLE", std::nullopt},
                   {"ARF_RENDEZVOUS_ID", kId}};
  for (int n : {1, 2, 4}) {
    const Result r = launch(sh({"-n", std::to_string(n)}, kEnvScript), nullptr, env);
    EXPECT_EQ(r.status, 0) << r.err;
    std::vector<std::string> want;
    for (int rank = 0; rank < n; ++rank) {
      const std::string s = std::to_string(rank);
      want.push_back("[rank " + s + "] " + s + " " + s + " " + std::to_string(n) + " " +
                     std::to_string(rank % 2) + " " + kId + " 32 0");
    }
    EXPECT_EQ(sorted_lines(r.out), want) << "n=" << n;
  }
}

TEST(Launcher, DeviceListAndCallerSettings) {
  const Env env = {{"CUDA_DEVICE_MAX_CONNECTIONS", "8"}, {"NCCL_NVLS_ENABLE", "1"},
                   {"ARF_RENDEZVOUS_ID", kId}};
  const Result r = launch(sh({"--devices", "0,0,1,1"}, kEnvScript), nullptr, env);
  EXPECT_EQ(r.status, 0) << r.err;
  EXPECT_EQ(sorted_lines(r.out),
            (std::vector<std::string>{
                "[rank 0] 0 0 4 0 " + kId + " 8 1", "[rank 1] 1 1 4 0 " + kId + " 8 1",
                "[rank 2] 2 2 4 1 " + kId + " 8 1", "[rank 3] 3 3 4 1 " + kId + " 8 1"}));
}

TEST(Launcher, RandomIdSharedByRanksFreshPerJob) {
  const std::string script = "echo $ARF_RENDEZVOUS_ID";
  const Env env = {{"ARF_RENDEZVOUS_ID", std::nullopt}};
  const Result a = launch(sh({"-n", "3", "--no-prefix"}, script), nullptr, env);
  const Result b = launch(sh({"-n", "1", "--no-prefix"}, script), nullptr, env);
  const auto ids = lines_of(a.out);
  ASSERT_EQ(ids.size(), 3u) << a.out;
  EXPECT_TRUE(std::regex_match(ids[0], std::regex("[0-9a-f]{32}"))) << ids[0];
  EXPECT_EQ(ids[1], ids[0]);
  EXPECT_EQ(ids[2], ids[0]);
  EXPECT_NE(lines_of(b.out).at(0), ids[0]);
}

// The id reaches the ranks in their environment and appears in no process's argv, which every
// user can read (ps, /proc/PID/cmdline): not the launcher's (the rank's parent), not the rank's.
TEST(Launcher, TheIdIsInNoArgv) {
  char name[] = "/tmp/arfusion-run-test-id-XXXXXX";
  const int fd = mkstemp(name);  // mode 0600
  ASSERT_GE(fd, 0);
  ASSERT_EQ(write(fd, kId.data(), kId.size()), static_cast<ssize_t>(kId.size()));
  close(fd);
  const std::string script =
      "echo \"env $ARF_RENDEZVOUS_ID\"; echo \"launcher $(tr '\\0' ' ' < /proc/$PPID/cmdline)\"; "
      "echo \"rank $(tr '\\0' ' ' < /proc/$$/cmdline)\"";
  const Result r = launch(sh({"-n", "2", "--no-prefix", "--id-file", name}, script), nullptr,
                          {{"ARF_RENDEZVOUS_ID", std::nullopt}});
  unlink(name);
  EXPECT_EQ(r.status, 0) << r.err;
  int envs = 0, argvs = 0;
  for (const std::string& line : lines_of(r.out)) {
    if (line.rfind("env ", 0) == 0) {
      EXPECT_EQ(line, "env " + kId);
      ++envs;
    } else {
      EXPECT_EQ(line.find(kId), std::string::npos) << line;
      // The probe reads the right processes: the launcher's argv names it and its id file.
      if (line.rfind("launcher ", 0) == 0) {
        EXPECT_NE(line.find("arfusion-run"), std::string::npos) << line;
        EXPECT_NE(line.find("--id-file"), std::string::npos) << line;
      }
      ++argvs;
    }
  }
  EXPECT_EQ(envs, 2) << r.out;
  EXPECT_EQ(argvs, 4) << r.out;
}

TEST(Launcher, FailingRankStopsTheOthers) {
  const Result r = launch(sh({"-n", "4"}, "[ \"$ARF_RANK\" = 1 ] && exit 3; exec sleep 30"));
  EXPECT_EQ(r.status, 3) << r.err;
  EXPECT_LT(r.seconds, 3.0);  // stopped by SIGTERM, not by the 5 s grace
  EXPECT_TRUE(std::regex_search(
      r.err, std::regex(R"(arfusion-run: rank 1 \(pid \d+\) exited with status 3 first; )"
                        R"(stopped ranks 0,2,3; exit 3)")))
      << r.err;
}

TEST(Launcher, SignalDeathIs128PlusSignal) {
  const Result r = launch(sh({"-n", "2"}, "[ \"$ARF_RANK\" = 0 ] && kill -9 $$; exec sleep 30"));
  EXPECT_EQ(r.status, 128 + SIGKILL) << r.err;
  EXPECT_TRUE(contains(r.err, "rank 0 (pid ")) << r.err;
  EXPECT_TRUE(contains(r.err, "exited with signal 9 (SIGKILL) first; stopped ranks 1")) << r.err;
}

TEST(Launcher, RankIgnoringSigtermIsKilledAfterGrace) {
  char dir[] = "/tmp/arf_run_graceXXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string ready = std::string(dir) + "/ready";
  const std::string script = "if [ \"$ARF_RANK\" = 0 ]; then while [ ! -e " + ready +
                             " ]; do sleep 0.01; done; exit 5; "
                             "fi; trap '' TERM; touch " +
                             ready + "; sleep 30";
  const Result r = launch(sh({"-n", "2", "--grace", "0.3"}, script));
  unlink(ready.c_str());
  rmdir(dir);
  EXPECT_EQ(r.status, 5) << r.err;
  EXPECT_GE(r.seconds, 0.3);
  EXPECT_LT(r.seconds, 3.0);
  EXPECT_TRUE(contains(r.err, "exited with status 5 first; stopped ranks 1")) << r.err;
  EXPECT_TRUE(contains(r.err, "SIGKILL (grace 0.3 s over, or a second signal): ranks 1")) << r.err;
}

TEST(Launcher, TimeoutStopsEveryRank) {
  const Result r = launch(sh({"-n", "2", "--timeout", "1"}, "exec sleep 30"));
  EXPECT_EQ(r.status, 124) << r.err;
  EXPECT_GE(r.seconds, 0.9);
  EXPECT_LT(r.seconds, 3.0);
  EXPECT_TRUE(contains(r.err, "timeout after 1 s; ranks still running, stopped: 0,1; exit 124"))
      << r.err;
}

TEST(Launcher, SkipAndSuccess) {
  const Result all_skip = launch(sh({"-n", "2"}, "exit 77"));
  EXPECT_EQ(all_skip.status, 77) << all_skip.err;
  EXPECT_TRUE(contains(all_skip.err, "every rank exited 77 (skipped)")) << all_skip.err;
  const Result some_skip = launch(sh({"-n", "2"}, "[ \"$ARF_RANK\" = 0 ] && exit 77; exit 0"));
  EXPECT_EQ(some_skip.status, 77) << some_skip.err;
  const Result fail = launch(sh({"-n", "2"}, "[ \"$ARF_RANK\" = 0 ] && exit 77; exit 6"));
  EXPECT_EQ(fail.status, 6) << fail.err;
  const Result ok = launch(sh({"-n", "9"}, "exit 0"));  // any N >= 1
  EXPECT_EQ(ok.status, 0) << ok.err;
  EXPECT_EQ(ok.err, "");
}

TEST(Launcher, OutputLinesStayWhole) {
  // Two printf builtins per line: every line reaches the pipe in two writes.
  const std::string script =
      "i=0; while [ $i -lt 300 ]; do printf 'r%s-' $ARF_RANK; printf '%s-end\\n' $i; "
      "i=$((i+1)); done; echo err$ARF_RANK >&2; printf tail$ARF_RANK";
  const Result r = launch(sh({"-n", "4"}, script));
  EXPECT_EQ(r.status, 0) << r.err;
  const std::regex line(R"(\[rank (\d)\] (r\1-\d+-end|tail\1))");
  const auto lines = lines_of(r.out);
  EXPECT_EQ(lines.size(), 4u * 301);
  for (const std::string& l : lines) EXPECT_TRUE(std::regex_match(l, line)) << l;
  for (int rank = 0; rank < 4; ++rank) {
    const std::string s = std::to_string(rank);
    EXPECT_EQ(count_of(r.out, "[rank " + s + "] r" + s + "-"), 300u);
    EXPECT_TRUE(contains(r.out, "[rank " + s + "] tail" + s + "\n"));
    EXPECT_TRUE(contains(r.err, "[rank " + s + "] err" + s + "\n")) << r.err;
  }
  const Result plain = launch(sh({"-n", "2", "--no-prefix"}, "echo hi"));
  EXPECT_EQ(plain.out, "hi\nhi\n");
}

TEST(Launcher, SigtermReachesRanksAndWhatTheyStarted) {
  bool sent = false;
  const auto on_output = [&](pid_t launcher, const std::string& out, const std::string&) {
    if (!sent && ready_pids(out).size() == 2) sent = kill(launcher, SIGTERM) == 0;
  };
  // The sleep is a grandchild: only the process-group signal reaches it.
  const Result r = launch(sh({"-n", "2"}, "sleep 30 & echo ready $!; wait"), on_output);
  EXPECT_TRUE(sent);
  EXPECT_EQ(r.status, 128 + SIGTERM) << r.err;
  EXPECT_LT(r.seconds, 3.0);
  EXPECT_TRUE(contains(r.err, "received SIGTERM, forwarded to ranks 0,1;")) << r.err;
  for (pid_t pid : ready_pids(r.out)) EXPECT_TRUE(process_gone(pid)) << pid;
}

TEST(Launcher, SecondSigintKills) {
  int sent = 0;
  const auto on_output = [&](pid_t launcher, const std::string& out, const std::string&) {
    if (sent == 0 && ready_pids(out).size() == 2 && count_of(out, "child-ready") == 2) {
      sent += kill(launcher, SIGINT) == 0;
    }
    if (sent == 1 && count_of(out, "got-int") == 2) sent += kill(launcher, SIGINT) == 0;
  };
  // The ranks survive SIGINT (and say so), and so does the sleep each starts; it says when it
  // ignores SIGINT, so the first SIGINT cannot arrive before.
  const std::string script =
      "trap 'echo got-int' INT; (trap '' INT; echo child-ready; exec sleep 30) & "
      "echo ready $!; while kill -0 $! 2>/dev/null; do wait $!; done";
  const Result r = launch(sh({"-n", "2"}, script), on_output);
  EXPECT_EQ(sent, 2);
  EXPECT_EQ(r.status, 128 + SIGKILL) << r.err;
  EXPECT_TRUE(contains(r.err, "received SIGINT, forwarded to ranks 0,1;")) << r.err;
  EXPECT_TRUE(contains(r.err, "signal 9 (SIGKILL) first")) << r.err;
  for (pid_t pid : ready_pids(r.out)) EXPECT_TRUE(process_gone(pid)) << pid;
}

TEST(Launcher, CommandNotFoundIs127) {
  const Result r = launch({"-n", "2", "--", "/nonexistent/arf-command"});
  EXPECT_EQ(r.status, 127) << r.err;
  EXPECT_TRUE(contains(r.err, "] arfusion-run: cannot execute '/nonexistent/arf-command'"))
      << r.err;
  EXPECT_TRUE(contains(r.err, "exited with status 127 first")) << r.err;
}

TEST(Launcher, UsageErrorIs2) {
  const Result r = launch({"-n", "2", "true"});
  EXPECT_EQ(r.status, 2);
  EXPECT_TRUE(contains(r.err, "missing '--'")) << r.err;
  EXPECT_EQ(launch({"-n", "2", "--devices", "0,x", "--", "true"}).status, 2);
}

}  // namespace
