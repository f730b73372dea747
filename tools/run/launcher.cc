// The process side of arfusion-run (launcher.h): fork, relay, forward, stop, reap. Every wait
// goes through one poll() on the ranks' pipes and a signalfd (SIGINT/SIGTERM/SIGHUP/SIGCHLD are
// blocked in the launcher and unblocked in each rank before exec), with the time limit and the
// grace period as poll timeouts: no signal handlers, no threads, no busy loop.
#include "launcher.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <optional>

#include "output.h"
#include "verdict.h"

namespace arf::run {
namespace {

using Clock = std::chrono::steady_clock;

constexpr size_t kReadBytes = size_t{64} << 10;

struct Stream {
  int fd = -1;         // read end of the rank's pipe; -1 once closed
  int target_fd = -1;  // the launcher's stdout or stderr
  LinePrefixer lines{""};
};

struct Rank {
  int rank = 0;
  pid_t pid = 0;
  bool running = false;
  Stream out, err;
};

Clock::time_point after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

class Job {
 public:
  explicit Job(const RunArgs& args) : args_(args) { record_.num_ranks = args.num_ranks; }
  ~Job() { kill_and_reap_all(); }

  int run();

 private:
  bool setup_signals();
  bool start_rank(int r);
  [[noreturn]] void exec_rank(int r, int out_fd, int err_fd);
  bool loop();
  int poll_timeout_ms() const;
  void handle_signals();
  void read_stream(Stream& s);
  void drain(Stream& s);
  void reap();
  void on_rank_exit(Rank& rank, int wait_status);
  void begin_stopping();
  void check_deadlines();
  void signal_running(int sig);
  void kill_running();
  void kill_and_reap_all();
  std::vector<int> running_ranks() const;

  const RunArgs& args_;
  std::vector<Rank> ranks_;
  RunRecord record_;
  pid_t launcher_pid_ = getpid();
  int signal_fd_ = -1;
  sigset_t original_mask_{};
  struct sigaction original_sigpipe_ {};
  int num_running_ = 0;
  int signals_received_ = 0;
  bool stopping_ = false;
  std::optional<Clock::time_point> timeout_at_, kill_at_;
  std::string read_buffer_ = std::string(kReadBytes, '\0');
};

int Job::run() {
  if (!setup_signals()) return kExitLauncherError;
  ranks_.resize(static_cast<size_t>(args_.num_ranks));
  for (int r = 0; r < args_.num_ranks; ++r) {
    if (!start_rank(r)) return kExitLauncherError;  // ~Job kills the ranks already started
  }
  if (args_.timeout_seconds > 0) timeout_at_ = after(args_.timeout_seconds);
  if (!loop()) return kExitLauncherError;
  record_.timeout_seconds = args_.timeout_seconds;
  record_.grace_seconds = args_.grace_seconds;
  const Verdict verdict = judge(record_);
  if (!verdict.message.empty()) write_all(STDERR_FILENO, verdict.message + "\n");
  return verdict.exit_code;
}

// Blocked signals are queued even when their disposition is "ignore", so the signalfd sees them.
bool Job::setup_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int sig : {SIGINT, SIGTERM, SIGHUP, SIGCHLD}) sigaddset(&set, sig);
  if (sigprocmask(SIG_BLOCK, &set, &original_mask_) != 0) return false;
  signal_fd_ = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
  if (signal_fd_ < 0) {
    std::perror("arfusion-run: signalfd");
    return false;
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigaction(SIGPIPE, &ignore, &original_sigpipe_);  // a closed stdout drops output, not the job
  return true;
}

bool Job::start_rank(int r) {
  int out[2], err[2];
  if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {
    std::perror("arfusion-run: pipe");
    return false;
  }
  const pid_t pid = fork();
  if (pid < 0) {
    std::perror("arfusion-run: fork");
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
    return false;
  }
  if (pid == 0) exec_rank(r, out[1], err[1]);
  setpgid(pid, pid);  // also done by the child: whichever runs first, signals find the group
  close(out[1]);
  close(err[1]);
  Rank& rank = ranks_[static_cast<size_t>(r)];
  rank = {r,
          pid,
          /*running=*/true,
          {out[0], STDOUT_FILENO, LinePrefixer(rank_prefix(r, args_.prefix))},
          {err[0], STDERR_FILENO, LinePrefixer(rank_prefix(r, args_.prefix))}};
  for (int fd : {out[0], err[0]}) fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
  ++num_running_;
  return true;
}

void Job::exec_rank(int r, int out_fd, int err_fd) {
  setpgid(0, 0);
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != launcher_pid_) _exit(kExitLauncherError);  // the launcher died before prctl
  const int null_fd = open("/dev/null", O_RDONLY);
  if (null_fd < 0 || dup2(null_fd, STDIN_FILENO) < 0 || dup2(out_fd, STDOUT_FILENO) < 0 ||
      dup2(err_fd, STDERR_FILENO) < 0) {
    _exit(kExitLauncherError);
  }
  sigaction(SIGPIPE, &original_sigpipe_, nullptr);
  sigprocmask(SIG_SETMASK, &original_mask_, nullptr);
  setenv("ARF_RANK", std::to_string(r).c_str(), 1);
  setenv("ARF_LOCAL_RANK", std::to_string(r).c_str(), 1);
  setenv("ARF_WORLD_SIZE", std::to_string(args_.num_ranks).c_str(), 1);
  setenv("ARF_DEVICE", std::to_string(args_.devices[static_cast<size_t>(r)]).c_str(), 1);
  setenv("ARF_RENDEZVOUS_ID", args_.rendezvous_id.c_str(), 1);
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);  // tests/gpu/gpu_main.cc: why
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // NVLink multicast only when asked for
  std::vector<char*> argv;
  for (const std::string& arg : args_.command) argv.push_back(const_cast<char*>(arg.c_str()));
  argv.push_back(nullptr);
  execvp(argv[0], argv.data());
  const int error = errno;
  dprintf(STDERR_FILENO, "arfusion-run: cannot execute '%s': %s\n", argv[0], std::strerror(error));
  _exit(error == ENOENT ? kExitNotFound : kExitCannotExec);
}

bool Job::loop() {
  while (num_running_ > 0) {
    std::vector<pollfd> fds{{signal_fd_, POLLIN, 0}};
    std::vector<Stream*> streams;
    for (Rank& rank : ranks_) {
      for (Stream* s : {&rank.out, &rank.err}) {
        if (s->fd < 0) continue;
        fds.push_back({s->fd, POLLIN, 0});
        streams.push_back(s);
      }
    }
    if (poll(fds.data(), fds.size(), poll_timeout_ms()) < 0 && errno != EINTR) {
      std::perror("arfusion-run: poll");
      return false;
    }
    if (fds[0].revents != 0) handle_signals();
    for (size_t i = 0; i < streams.size(); ++i) {
      if (fds[i + 1].revents != 0) read_stream(*streams[i]);
    }
    reap();
    check_deadlines();
  }
  for (Rank& rank : ranks_) {
    drain(rank.out);
    drain(rank.err);
  }
  return true;
}

int Job::poll_timeout_ms() const {
  std::optional<Clock::time_point> next;
  for (const auto& deadline : {timeout_at_, kill_at_}) {
    if (deadline && (!next || *deadline < *next)) next = deadline;
  }
  if (!next) return -1;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(*next - Clock::now()).count();
  return static_cast<int>(std::clamp<long long>(left, 0, 1 << 30));
}

void Job::handle_signals() {
  signalfd_siginfo info;
  while (read(signal_fd_, &info, sizeof(info)) == static_cast<ssize_t>(sizeof(info))) {
    const int sig = static_cast<int>(info.ssi_signo);
    if (sig == SIGCHLD) continue;  // reap() runs after every wake-up anyway
    if (++signals_received_ == 1) {
      record_.received_signal = sig;
      record_.signalled_ranks = running_ranks();
      signal_running(sig);
    } else {
      kill_running();  // a second signal: the user means it
    }
  }
}

void Job::read_stream(Stream& s) {
  const ssize_t n = read(s.fd, read_buffer_.data(), read_buffer_.size());
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  std::string lines;
  if (n > 0) {
    s.lines.feed(std::string_view(read_buffer_.data(), static_cast<size_t>(n)), &lines);
  } else {
    s.lines.finish(&lines);  // EOF (or a read error): the tail becomes a line
    close(s.fd);
    s.fd = -1;
  }
  write_all(s.target_fd, lines);
}

// After every rank was reaped: what they wrote is in the pipe already; a writer that escaped its
// process group must not keep the launcher waiting, so EAGAIN ends the stream too.
void Job::drain(Stream& s) {
  while (s.fd >= 0) {
    pollfd p{s.fd, POLLIN, 0};
    if (poll(&p, 1, 0) <= 0) {
      std::string tail;
      s.lines.finish(&tail);
      write_all(s.target_fd, tail);
      close(s.fd);
      s.fd = -1;
      break;
    }
    read_stream(s);
  }
}

// WNOWAIT first: while the exited rank is a zombie its pid cannot be reused, so killing its
// process group (whatever it left running) cannot hit an unrelated process.
void Job::reap() {
  for (Rank& rank : ranks_) {
    if (!rank.running) continue;
    siginfo_t info{};
    if (waitid(P_PID, static_cast<id_t>(rank.pid), &info, WEXITED | WNOHANG | WNOWAIT) != 0 ||
        info.si_pid != rank.pid) {
      continue;
    }
    kill(-rank.pid, SIGKILL);
    int status = 0;
    while (waitpid(rank.pid, &status, 0) < 0 && errno == EINTR) {
    }
    on_rank_exit(rank, status);
  }
}

void Job::on_rank_exit(Rank& rank, int wait_status) {
  rank.running = false;
  --num_running_;
  record_.exits.push_back({rank.rank, rank.pid, wait_status});
  if (!stopping_ && is_failure(wait_status)) {
    record_.first_failure = static_cast<int>(record_.exits.size()) - 1;
    begin_stopping();
  }
}

void Job::begin_stopping() {
  stopping_ = true;
  timeout_at_.reset();
  record_.stopped_ranks = running_ranks();
  signal_running(SIGTERM);
  kill_at_ = after(args_.grace_seconds);
}

void Job::check_deadlines() {
  const auto now = Clock::now();
  if (timeout_at_ && now >= *timeout_at_) {
    record_.timed_out = true;
    begin_stopping();
  }
  if (kill_at_ && now >= *kill_at_) {
    kill_at_.reset();
    kill_running();
  }
}

// To the whole group; to the pid alone only if the rank left its group (setsid/setpgid).
void Job::signal_running(int sig) {
  for (const Rank& rank : ranks_) {
    if (rank.running && kill(-rank.pid, sig) != 0 && errno == ESRCH) kill(rank.pid, sig);
  }
}

void Job::kill_running() {
  for (int r : running_ranks()) {
    if (std::find(record_.killed_ranks.begin(), record_.killed_ranks.end(), r) ==
        record_.killed_ranks.end()) {
      record_.killed_ranks.push_back(r);
    }
  }
  signal_running(SIGKILL);
}

// Every exit path ends here: nothing the launcher started outlives it.
void Job::kill_and_reap_all() {
  for (Rank& rank : ranks_) {
    if (!rank.running) continue;
    kill(-rank.pid, SIGKILL);
    kill(rank.pid, SIGKILL);
    while (waitpid(rank.pid, nullptr, 0) < 0 && errno == EINTR) {
    }
    rank.running = false;
  }
  for (Rank& rank : ranks_) {
    for (Stream* s : {&rank.out, &rank.err}) {
      if (s->fd >= 0) close(s->fd);
      s->fd = -1;
    }
  }
  if (signal_fd_ >= 0) close(signal_fd_);
  signal_fd_ = -1;
}

std::vector<int> Job::running_ranks() const {
  std::vector<int> ranks;
  for (const Rank& rank : ranks_) {
    if (rank.running) ranks.push_back(rank.rank);
  }
  return ranks;
}

}  // namespace

int run_job(const RunArgs& args) {
  Job job(args);
  return job.run();
}

}  // namespace arf::run
