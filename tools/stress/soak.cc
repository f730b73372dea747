// Rank threads of the soak (soak.h).
#include "soak.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <exception>
#include <random>
#include <thread>

#include "calls.h"
#include "device.h"

namespace arf::stress {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Below this a sleep is replaced by a spin: Linux timer slack (~50 us) would otherwise turn every
// small random delay into roughly the same large one.
constexpr int kSpinBelowUs = 200;

}  // namespace

// ---- Soak --------------------------------------------------------------------------------------

Soak::Soak(const SoakConfig& config)
    : config_(config),
      launched_(new std::atomic<int64_t>[config.args->world()]),
      mates_(static_cast<size_t>(config.args->world())),
      wait_seconds_(static_cast<size_t>(config.args->world()), 0.0) {
  const std::vector<int>& devices = config.args->devices;
  for (int r = 0; r < config.args->world(); ++r) {
    launched_[r].store(0);
    // Under arfusion-run the peers are other processes: no shared hardware queues to order.
    if (config.args->processes()) continue;
    for (int m = 0; m < config.args->world(); ++m) {
      if (m != r && devices[m] == devices[r]) mates_[r].push_back(m);
    }
  }
}

void Soak::run_rank(int rank) {
  try {
    soak_rank(rank);
  } catch (const std::exception& e) {
    fail(rank, Failure::kError, e.what());
  } catch (...) {
    fail(rank, Failure::kError, "unknown exception");
  }
}

void Soak::soak_rank(int rank) {
  RankResources& rr = config_.resources->rank(rank);
  cuda_check(cudaSetDevice(rr.device), "cudaSetDevice");
  Schedule schedule(*config_.map, config_.schedule);
  std::mt19937_64 skew_rng(config_.args->seed * 1000003u + static_cast<uint64_t>(rank));
  const uint64_t budget = config_.args->calls;
  for (;;) {
    const StepSpec step = schedule.next_step();
    // The call budget ends every rank at the same step: the schedule is identical everywhere.
    if (budget > 0 && step.calls.front().index >= budget) break;
    if (abort_.load() || !config_.stop->may_run(rank, step.step)) break;
    skew(skew_rng);
    if (!run_step(rank, step)) break;
  }
  // Stream-local wait (not device-wide), then a last look at the error records.
  cuda_check(cudaStreamSynchronize(rr.stream), "final stream synchronize");
  const arfStatus_t st = arfCommGetAsyncError(rr.comm);
  if (st != arfSuccess && !abort_.load()) {
    fail(rank, Failure::kTimeout, std::string("rank ") + std::to_string(rank) + ": " +
                                      arfGetStatusString(st) + ": " + arfGetLastErrorString());
  }
}

void Soak::skew(std::mt19937_64& rng) const {
  const int max_us = config_.args->skew_us;
  if (max_us <= 0) return;
  const int us = static_cast<int>(rng() % static_cast<uint64_t>(max_us + 1));
  if (us >= kSpinBelowUs) {
    std::this_thread::sleep_for(std::chrono::microseconds(us));
    return;
  }
  const Clock::time_point until = Clock::now() + std::chrono::microseconds(us);
  while (Clock::now() < until) {
  }
}

bool Soak::run_step(int rank, const StepSpec& step) {
  RankResources& rr = config_.resources->rank(rank);
  const ResourceOptions& o = config_.resources->options();
  const bool graph = step.graph >= 0;
  if (!config_.verifier->step_gate(rank, step.step, [this] { return abort_.load(); })) return false;
  if (!wait_slot(rank, step.step)) return false;
  for (size_t i = 0; i < step.calls.size(); ++i) {
    enqueue_inputs(rr, rr.work[graph ? i : 0], step.calls[i], o);
  }
  if (!launch_collective(rank, step)) return false;
  launched_[rank].store(step.step + 1, std::memory_order_release);
  if (!wait_mates(rank, step.step + 1)) return false;
  // The consumer, right behind the call on the same stream (graphs captured theirs).
  if (!graph) {
    cuda_check(launch_consumer(consumer_targets(step.calls[0], rr.work[0], o.hidden),
                               step.calls[0].clobber_salt, rr.stream), "consumer");
  }
  HostSlot& slot = rr.host[static_cast<size_t>(step.step % o.ring_depth)];
  const std::vector<int64_t> offsets = step_output_offsets(step, o.hidden, nullptr);
  for (size_t i = 0; i < step.calls.size(); ++i) {
    enqueue_outputs(rr, rr.work[graph ? i : 0], step.calls[i], slot.data + offsets[i], o.hidden);
  }
  cuda_check(cudaEventRecord(slot.ready, rr.stream), "cudaEventRecord");
  config_.verifier->submit(rank, step);
  const arfStatus_t st = arfCommGetAsyncError(rr.comm);
  if (st != arfSuccess) {
    fail(rank, Failure::kTimeout, std::string("rank ") + std::to_string(rank) + " after step " +
                                      std::to_string(step.step) + ": " + arfGetStatusString(st) +
                                      ": " + arfGetLastErrorString());
    return false;
  }
  return true;
}

bool Soak::launch_collective(int rank, const StepSpec& step) {
  RankResources& rr = config_.resources->rank(rank);
  const ResourceOptions& o = config_.resources->options();
  if (step.graph >= 0) {
    cuda_check(cudaGraphLaunch(rr.graphs[static_cast<size_t>(step.graph)], rr.stream),
               "cudaGraphLaunch");
    return true;
  }
  const arfFusedArgs_t args = call_args(step.calls[0], rr.work[0], o.dtype, o.hidden);
  const arfStatus_t st = arfFusedAllReduce(rr.comm, &args, rr.stream);
  if (st == arfSuccess) return true;
  // A failed communicator (a peer's wait expired) refuses work: that is the timeout's echo.
  const Failure kind = st == arfTimeout || st == arfCommFailed ? Failure::kTimeout : Failure::kError;
  fail(rank, kind, std::string("rank ") + std::to_string(rank) + " call " +
                       std::to_string(step.calls[0].index) + ": " + arfGetStatusString(st) + ": " +
                       arfGetLastErrorString());
  return false;
}

bool Soak::wait_mates(int rank, int64_t steps) {
  const Clock::time_point start = Clock::now();
  for (int mate : mates_[rank]) {
    while (launched_[mate].load(std::memory_order_acquire) < steps) {
      if (abort_.load()) return false;
      if (seconds_since(start) > config_.args->timeout_seconds) {
        fail(rank, Failure::kTimeout, "rank " + std::to_string(mate) + " did not enqueue step " +
                                          std::to_string(steps - 1) + " within the timeout");
        return false;
      }
      std::this_thread::yield();
    }
  }
  return true;
}

bool Soak::wait_slot(int rank, int64_t step) {
  if (config_.verifier->slot_free(step)) return true;
  const Clock::time_point start = Clock::now();
  while (!config_.verifier->slot_free(step)) {
    if (abort_.load()) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(20));
  }
  wait_seconds_[static_cast<size_t>(rank)] += seconds_since(start);
  return true;
}

void Soak::fail(int rank, Failure kind, const std::string& message) {
  (kind == Failure::kTimeout ? timeouts_ : errors_).fetch_add(1);
  {
    std::lock_guard<std::mutex> lock(error_mu_);
    if (first_error_.empty()) first_error_ = message;
  }
  if (rank >= 0) {
    std::fprintf(stderr, "arfusion-stress: rank %d: %s\n", rank, message.c_str());
  } else {
    std::fprintf(stderr, "arfusion-stress: %s\n", message.c_str());
  }
  // Peers must not wait for this rank's next launches; their in-flight kernels end through the
  // library's bounded waits.
  abort_.store(true);
  config_.stop->request();
}

double Soak::verify_wait_seconds() const {
  double total = 0;
  for (double s : wait_seconds_) total += s;
  return total;
}

std::string Soak::first_error() const {
  std::lock_guard<std::mutex> lock(error_mu_);
  return first_error_;
}

}  // namespace arf::stress
