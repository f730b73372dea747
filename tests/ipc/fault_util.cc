// fault_util.h: the shared board, resource snapshots, batches of calls, the environment. Only
// snapshot(), settled_snapshot() and the batch helpers call CUDA (children only); everything else
// runs in the parent too.
#include "ipc/fault_util.h"

#include <dirent.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <set>
#include <thread>

#include "ipc/ipc_rank.h"

namespace arf::ipc_test {
namespace {

// The last word is the abort word: 0, or 1 + the rank that gave up.
constexpr int kAbortWord = SharedBoard::kWords - 1;

}  // namespace

struct SharedBoard::Memory {
  std::atomic<int64_t> words[kWords];
};
// Lock-free 8-byte atomics are address-free: they work across the processes' views of the page.
static_assert(std::atomic<int64_t>::is_always_lock_free, "cross-process atomics");

std::unique_ptr<SharedBoard> SharedBoard::create() {
  void* p = ::mmap(nullptr, sizeof(Memory), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
  if (p == MAP_FAILED) {
    ADD_FAILURE() << "mmap(shared board): " << std::strerror(errno);
    return nullptr;
  }
  Memory* m = new (p) Memory;
  for (auto& w : m->words) w.store(0);
  return std::unique_ptr<SharedBoard>(new SharedBoard(m));
}

SharedBoard::~SharedBoard() {
  if (memory_ != nullptr) ::munmap(memory_, sizeof(Memory));
}

std::atomic<int64_t>& SharedBoard::word(int index) const { return memory_->words[index]; }

void SharedBoard::raise_abort(int rank) const {
  int64_t expected = 0;
  memory_->words[kAbortWord].compare_exchange_strong(expected, 1 + rank);
}

bool SharedBoard::aborted() const { return memory_->words[kAbortWord].load() != 0; }

bool SharedBoard::wait(RankContext& ctx, int index, int64_t value, double timeout_seconds,
                       const std::string& what) const {
  const Clock::time_point start = Clock::now();
  for (;;) {
    if (memory_->words[index].load() >= value) return true;
    if (const int64_t a = memory_->words[kAbortWord].load(); a != 0) {
      ctx.fail(what + ": rank " + std::to_string(a - 1) + " gave up (its messages say why)");
      return false;
    }
    if (seconds_since(start) > timeout_seconds) {
      ctx.fail(what + ": not reached within " + fmt_seconds(timeout_seconds) + " (word " +
               std::to_string(index) + " is " + std::to_string(memory_->words[index].load()) +
               ", waiting for " + std::to_string(value) + ")");
      return false;
    }
    std::this_thread::sleep_for(std::chrono::microseconds(500));
  }
}

bool SharedBoard::arrive_and_wait(RankContext& ctx, int index, int parties,
                                  double timeout_seconds, const std::string& what) const {
  memory_->words[index].fetch_add(1);
  return wait(ctx, index, parties, timeout_seconds, "barrier '" + what + "'");
}

bool SharedBoard::wait_at_least(RankContext& ctx, int index, int64_t value,
                                double timeout_seconds, const std::string& what) const {
  return wait(ctx, index, value, timeout_seconds, "waiting for " + what);
}

// ---- resources -------------------------------------------------------------------------------

namespace {

// Entries of a /proc directory other than "." and "..". For /proc/self/fd the directory stream's
// own descriptor is listed too; it is dropped (readlink names it as the directory itself).
std::vector<std::string> list_dir(const char* path, bool fds) {
  std::vector<std::string> out;
  DIR* dir = ::opendir(path);
  if (dir == nullptr) return out;
  const int own = ::dirfd(dir);
  while (const dirent* e = ::readdir(dir)) {
    if (std::strcmp(e->d_name, ".") == 0 || std::strcmp(e->d_name, "..") == 0) continue;
    if (!fds) {
      out.emplace_back(e->d_name);
      continue;
    }
    if (std::atoi(e->d_name) == own) continue;
    char target[512] = {};
    const std::string link = std::string(path) + "/" + e->d_name;
    const ssize_t n = ::readlink(link.c_str(), target, sizeof(target) - 1);
    out.push_back(std::string(e->d_name) + " -> " + (n > 0 ? std::string(target, n) : "?"));
  }
  ::closedir(dir);
  std::sort(out.begin(), out.end());
  return out;
}

int count_lines(const char* path) {
  std::ifstream in(path);
  int n = 0;
  std::string line;
  while (std::getline(in, line)) ++n;
  return n;
}

int64_t rss_kib() {
  std::ifstream in("/proc/self/status");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("VmRSS:", 0) == 0) return std::atoll(line.c_str() + 6);
  }
  return -1;
}

}  // namespace

std::string fmt_mib(int64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%.1f MiB", static_cast<double>(bytes) / (1024.0 * 1024.0));
  return buf;
}

std::string ResourceSnapshot::summary() const {
  std::string s = "fds " + std::to_string(fds.size()) + ", threads " + std::to_string(threads) +
                  ", maps " + std::to_string(maps) + ", rss " + fmt_mib(rss_kib * 1024);
  if (device_total > 0) {
    s += ", device free " + fmt_mib(static_cast<int64_t>(device_free)) + " of " +
         fmt_mib(static_cast<int64_t>(device_total));
  }
  return s;
}

bool snapshot(RankContext& ctx, bool with_device, ResourceSnapshot* out) {
  *out = ResourceSnapshot{};
  if (with_device) {
    if (!cuda_ok(ctx, cudaDeviceSynchronize(), "cudaDeviceSynchronize before a snapshot") ||
        !cuda_ok(ctx, cudaMemGetInfo(&out->device_free, &out->device_total), "cudaMemGetInfo")) {
      return false;
    }
  }
  out->fds = list_dir("/proc/self/fd", /*fds=*/true);
  out->threads = static_cast<int>(list_dir("/proc/self/task", /*fds=*/false).size());
  out->maps = count_lines("/proc/self/maps");
  out->rss_kib = rss_kib();
  if (out->fds.empty() || out->threads == 0) {
    ctx.fail("cannot read /proc/self/fd or /proc/self/task");
    return false;
  }
  return true;
}

bool settled_snapshot(RankContext& ctx, ResourceSnapshot* out) {
  if (!snapshot(ctx, true, out)) return false;
  const Clock::time_point start = Clock::now();
  while (seconds_since(start) < 5.0) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ResourceSnapshot again;
    if (!snapshot(ctx, true, &again)) return false;
    const bool same = again.device_free == out->device_free;
    *out = again;
    if (same) return true;
  }
  ctx.note("device memory still changing after 5 s; using the last reading");
  return true;
}

std::string fd_difference(const ResourceSnapshot& before, const ResourceSnapshot& after) {
  const std::set<std::string> a(before.fds.begin(), before.fds.end());
  const std::set<std::string> b(after.fds.begin(), after.fds.end());
  std::string out;
  for (const std::string& fd : b) {
    if (a.count(fd) == 0) out += "  opened since: " + fd + "\n";
  }
  for (const std::string& fd : a) {
    if (b.count(fd) == 0) out += "  closed since: " + fd + "\n";
  }
  return out;
}

bool wait_until_gone(pid_t pid, double timeout_seconds) {
  const Clock::time_point start = Clock::now();
  for (;;) {
    if (::kill(pid, 0) != 0 && errno == ESRCH) return true;
    if (seconds_since(start) > timeout_seconds) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

// ---- batches of calls ------------------------------------------------------------------------

bool prepare_batch(RankContext& ctx, arfComm_t comm, cudaStream_t stream, uint64_t seed,
                   const std::string& prefix, Batch* b) {
  for (size_t c = 0; c < b->specs.size(); ++c) {
    b->data.push_back(make_call_data(b->specs[c], ctx.world(), arfBFloat16, mix_seed(seed, c)));
    b->buffers.push_back(CallBuffers::create(ctx, b->specs[c], arfBFloat16));
    if (b->buffers.back() == nullptr || !b->buffers.back()->upload(ctx, b->data[c], stream)) {
      return false;
    }
    if (comm != nullptr) {
      check_and_publish_plan(ctx, comm, *b->buffers[c], b->specs[c],
                             prefix + "call " + std::to_string(c) + " plan");
    }
  }
  return cuda_ok(ctx, cudaStreamSynchronize(stream), "synchronize after the uploads");
}

bool enqueue(RankContext& ctx, arfComm_t comm, cudaStream_t stream, const Batch& b, size_t first,
             size_t last) {
  for (size_t c = first; c < last; ++c) {
    if (const arfStatus_t st = b.buffers[c]->launch(comm, stream); st != arfSuccess) {
      ctx.fail("call " + std::to_string(c) + " [" + b.specs[c].label() + "]: " + status_text(st));
      return false;
    }
    if (!b.buffers[c]->clobber_inputs(ctx, stream)) return false;
  }
  return true;
}

void check_batch(RankContext& checker, const RankContext& reporter, cudaStream_t stream,
                 const Batch& b, size_t first, size_t last, const std::string& prefix) {
  for (size_t c = first; c < last; ++c) {
    RankOutputs got;
    if (!b.buffers[c]->download(checker, stream, &got)) return;
    if (const std::string e = check_outputs(b.specs[c], arfBFloat16, b.data[c], got); !e.empty()) {
      checker.fail(prefix + "call " + std::to_string(c) + " [" + b.specs[c].label() + "]:\n" + e);
    }
    publish_outputs(reporter, prefix + "call " + std::to_string(c) + " ", c, got);
  }
}

CallSpec spec_of(arfPattern_t pattern, arfAlgorithm_t algorithm, int64_t tokens,
                 int64_t hidden) {
  CallSpec s;
  s.pattern = pattern;
  s.algorithm = algorithm;
  s.num_tokens = tokens;
  s.hidden = hidden;
  return s;
}

// ---- environment -------------------------------------------------------------------------------

int env_cycles(int fallback, int minimum) {
  int cycles = fallback;
  if (const char* env = std::getenv("ARF_LIFECYCLE_CYCLES"); env != nullptr && *env != '\0') {
    char* end = nullptr;
    const long v = std::strtol(env, &end, 10);
    if (*end == '\0' && v > 0 && v < 10'000'000) {
      cycles = static_cast<int>(v);
    } else {
      ADD_FAILURE() << "ARF_LIFECYCLE_CYCLES='" << env << "' is not a positive cycle count";
    }
  }
  if (cycles < minimum) {
    std::printf("ARF_LIFECYCLE_CYCLES=%d raised to %d: the growth check compares cycle 10 with a "
                "cycle at least 10 later\n", cycles, minimum);
    cycles = minimum;
  }
  return cycles;
}

bool negative_control() {
  const char* env = std::getenv("ARF_FAULTS_NEGATIVE_CONTROL");
  return env != nullptr && std::strcmp(env, "1") == 0;
}

void default_environment() {
  ::setenv("ARF_NCCL", "0", /*overwrite=*/0);  // before the library first looks (nccl_api.cc)
}

}  // namespace arf::ipc_test
