// Forked children with report pipes and a deadline (processes.h). No CUDA call in this file.
#include "callkit/processes.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <thread>

namespace arf::callkit {
namespace {

using Clock = std::chrono::steady_clock;

// Reaping a SIGKILLed child is normally immediate; one stuck in the GPU driver (uninterruptible)
// may take longer, but the parent still must not wait forever for it.
constexpr double kReapAfterKillSeconds = 10.0;
constexpr int kPollMillis = 20;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The child's whole life: die with the parent, run the body, exit with its status.
[[noreturn]] void child_main(size_t index, int report_fd, const ChildBody& body, pid_t parent) {
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent) ::_exit(2);  // the parent died between fork and prctl
  int code = 1;
  try {
    code = body(index, report_fd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "child %zu: exception: %s\n", index, e.what());
  } catch (...) {
    std::fprintf(stderr, "child %zu: unknown exception\n", index);
  }
  std::fflush(nullptr);
  ::_exit(code);
}

// Appends whatever is readable now; returns false once the pipe is at EOF (or broken).
bool drain(int fd, std::string* into) {
  char buf[4096];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n > 0) {
      into->append(buf, static_cast<size_t>(n));
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) return true;
    return false;  // 0: EOF; other errors: nothing more will come
  }
}

void record_exit(ChildOutcome* r, int wstatus, Clock::time_point start) {
  r->reaped = true;
  r->seconds = seconds_since(start);
  if (WIFEXITED(wstatus)) {
    r->exited = true;
    r->exit_code = WEXITSTATUS(wstatus);
  } else if (WIFSIGNALED(wstatus)) {
    r->term_signal = WTERMSIG(wstatus);
  }
}

// Forks the children; returns the read ends of their pipes (-1 where none started).
std::vector<int> start_children(size_t n, const ChildBody& body, std::vector<ChildOutcome>* out,
                                std::string* error) {
  std::vector<int> fds(n, -1);
  const pid_t parent = ::getpid();
  // Buffered output would otherwise be flushed once more by every child that writes to stdio.
  std::fflush(nullptr);
  for (size_t i = 0; i < n; ++i) {
    int p[2];
    if (::pipe2(p, O_CLOEXEC) != 0) {
      *error = std::string("pipe2: ") + std::strerror(errno);
      break;
    }
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::close(p[0]);
      for (int fd : fds) {
        if (fd >= 0) ::close(fd);  // siblings' read ends
      }
      child_main(i, p[1], body, parent);
    }
    ::close(p[1]);
    if (pid < 0) {
      ::close(p[0]);
      *error = std::string("fork: ") + std::strerror(errno);
      break;
    }
    ::fcntl(p[0], F_SETFL, ::fcntl(p[0], F_GETFL) | O_NONBLOCK);
    (*out)[i].pid = pid;
    (*out)[i].started = true;
    fds[i] = p[0];
  }
  return fds;
}

// Waits up to one poll interval for report bytes and drains what came.
void poll_pipes(std::vector<int>& fds, std::vector<ChildOutcome>& out) {
  std::vector<pollfd> pfds;
  std::vector<size_t> owner;
  for (size_t i = 0; i < fds.size(); ++i) {
    if (fds[i] >= 0) pfds.push_back({fds[i], POLLIN, 0}), owner.push_back(i);
  }
  if (pfds.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(kPollMillis));
    return;
  }
  if (::poll(pfds.data(), pfds.size(), kPollMillis) <= 0) return;
  for (size_t k = 0; k < pfds.size(); ++k) {
    if (pfds[k].revents == 0) continue;
    const size_t i = owner[k];
    if (!drain(fds[i], &out[i].report)) {
      ::close(fds[i]);
      fds[i] = -1;
    }
  }
}

}  // namespace

std::vector<ChildOutcome> run_children(size_t count, const ChildBody& body,
                                       double deadline_seconds, std::string* error) {
  std::string local_error;
  if (error == nullptr) error = &local_error;
  error->clear();
  std::vector<ChildOutcome> out(count);
  const Clock::time_point start = Clock::now();
  std::vector<int> fds = start_children(count, body, &out, error);

  auto running = [&] {
    size_t n = 0;
    for (const ChildOutcome& r : out) n += r.started && !r.reaped;
    return n;
  };
  auto reap_exited = [&] {
    for (ChildOutcome& r : out) {
      if (!r.started || r.reaped) continue;
      int wstatus = 0;
      if (::waitpid(r.pid, &wstatus, WNOHANG) == r.pid) record_exit(&r, wstatus, start);
    }
  };
  const Clock::time_point deadline =
      start + std::chrono::duration_cast<Clock::duration>(
                  std::chrono::duration<double>(deadline_seconds));
  while (running() > 0 && Clock::now() < deadline) {
    poll_pipes(fds, out);
    reap_exited();
  }
  for (ChildOutcome& r : out) {
    if (!r.started || r.reaped) continue;
    r.hung = true;
    r.seconds = seconds_since(start);
    ::kill(r.pid, SIGKILL);
  }
  const Clock::time_point reap_start = Clock::now();
  while (running() > 0 && seconds_since(reap_start) < kReapAfterKillSeconds) {
    reap_exited();
    std::this_thread::sleep_for(std::chrono::milliseconds(kPollMillis));
  }
  for (size_t i = 0; i < count; ++i) {
    if (fds[i] < 0) continue;
    drain(fds[i], &out[i].report);  // the child is gone (or unkillable): what is left is all
    ::close(fds[i]);
  }
  return out;
}

}  // namespace arf::callkit
