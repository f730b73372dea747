// One rank's issue loop (rank_loop.h).
#include "rank_loop.h"

#include <chrono>

#include "call_args.h"
#include "data_gen.h"
#include "graphs.h"
#include "replay_csv.h"
#include "self_test.h"

namespace arf::stress {
namespace {

// Draws that the planner refused in a row before the loop gives up (no call can run).
constexpr uint64_t kMaxConsecutiveSkips = 100000;

void host_skew(uint64_t seed, uint64_t call, uint32_t rank, int max_us) {
  if (max_us <= 0) return;
  const uint64_t h = element_hash(stream_base(seed, call, rank, kStreamSkew), 1);
  if ((h & 3u) != 0) return;  // a quarter of the calls
  const auto wait = std::chrono::nanoseconds((h >> 2) % (static_cast<uint64_t>(max_us) * 1000u + 1u));
  const auto until = std::chrono::steady_clock::now() + wait;
  while (std::chrono::steady_clock::now() < until) {
  }
}

class Loop {
 public:
  Loop(const RankJob& job, RankOutcome* out)
      : job_(job), o_(*job.options), b_(*job.buffers), out_(out), oracle_(comm_oracle(job.comm, o_.dtype)) {
    out_->stats.max_tokens = o_.max_tokens;
    out_->stats.largest_hidden = o_.hiddens.back();
    void* buffer = nullptr;
    size_t bytes = 0;
    if (arfCommGetInputBuffer(job.comm, &buffer, &bytes) == arfSuccess &&
        bytes >= static_cast<size_t>(o_.max_tokens * o_.max_hidden) * 2) {
      input_buffer_ = static_cast<uint16_t*>(buffer);
    }
    constants_.seed = o_.seed;
    constants_.skew_us = static_cast<uint32_t>(o_.skew_us);
    constants_.reference = o_.reference;
    constants_.dtype = o_.dtype;
  }

  void run() {
    if (cuda_ok(cudaSetDevice(b_.device), "cudaSetDevice")) loop();
    if (job_.order != nullptr) job_.order->finished(job_.local);
    out_->issued = k_;
    if (b_.side_stream != nullptr) (void)cuda_ok(cudaStreamSynchronize(b_.side_stream), "cudaStreamSynchronize(side)");
    const uint64_t depth = static_cast<uint64_t>(o_.in_flight);
    if (cuda_ok(cudaStreamSynchronize(b_.stream), "cudaStreamSynchronize")) {
      for (uint64_t s = steps_ > depth ? steps_ - depth : 0; s < steps_; ++s) collect_segments(s % depth);
    }
    healthy();
  }

 private:
  void loop() {
    StepSource source(schedule_options(o_), step_options(o_), job_.boundaries, oracle_);
    size_t replay_pos = 0;
    uint64_t skips = 0, unpolled = 0;
    const uint64_t depth = static_cast<uint64_t>(o_.in_flight);
    while (true) {
      if (o_.calls > 0 && k_ >= o_.calls) break;
      if (o_.calls_per_algorithm > 0 &&
          every_algorithm_reached(out_->stats, o_.algos, o_.calls_per_algorithm)) {
        break;
      }
      Step step;
      if (job_.replay != nullptr) {
        if (replay_pos >= job_.replay->size()) break;
        step.calls.push_back((*job_.replay)[replay_pos++]);
        if (!step.calls[0].skipped) apply_plan(&step.calls[0], oracle_);
      } else {
        step = source.next();
      }
      if (step.calls[0].skipped) {  // only an eager step's call can be
        out_->stats.record_skipped(step.calls[0]);
        write_row(step.calls[0]);
        if (++skips > kMaxConsecutiveSkips) {
          fail(Failure::kSchedule, arfUnsupported, "the planner refused every call of the schedule");
          break;
        }
        continue;
      }
      skips = 0;
      if (!job_.stop->may_issue(k_, step.calls.size())) break;
      for (size_t i = 0; i < step.calls.size(); ++i) step.calls[i].index = k_ + i;
      cudaEvent_t ev = b_.events[steps_ % depth];
      if (steps_ >= depth && !cuda_ok(cudaEventSynchronize(ev), "cudaEventSynchronize")) break;
      if (steps_ >= depth) collect_segments(steps_ % depth);
      host_skew(o_.seed, k_, static_cast<uint32_t>(job_.rank), o_.host_skew_us);
      if (!issue(step, ev)) break;
      CallSpec& last = step.calls.back();
      if (last.wait_after || depth == 1) {
        if (!cuda_ok(cudaEventSynchronize(ev), "cudaEventSynchronize")) break;
      }
      last.wait_after = last.wait_after || depth == 1;
      for (const CallSpec& c : step.calls) {
        out_->stats.record_issued(c);
        write_row(c);
      }
      if (step.graph >= 0) ++out_->graph_replays;
      k_ += step.calls.size();
      ++steps_;
      unpolled += step.calls.size();
      if (unpolled >= static_cast<uint64_t>(o_.poll_every)) {
        unpolled = 0;
        if (!healthy()) break;
      }
    }
  }

  // One step's kernels: generate for each call, the call (eager) or the window's graph, then per
  // call the corruption (--corrupt-every), overwrite (eager: a graph holds its own) and check, and
  // the step's event. The soak's kernels run on the rank stream, or (--co-resident) on the side
  // stream, ordered with the calls through `generated` before them and the host's wait for
  // `called` after them.
  bool issue(const Step& step, cudaEvent_t ev) {
    std::vector<DeviceCall> calls;
    for (size_t i = 0; i < step.calls.size(); ++i) calls.push_back(device_call_of(step, i));
    const size_t ring = static_cast<size_t>(steps_ % static_cast<uint64_t>(o_.in_flight));
    const cudaStream_t work = b_.work_stream();
    const bool side = b_.side_stream != nullptr;
    if (!mark(ring, kSegGenerate)) return false;
    for (const DeviceCall& d : calls) {
      if (!cuda_ok(launch_generate(d, job_.shape, work), "generate kernel launch")) return false;
    }
    if (side && (!cuda_ok(cudaEventRecord(b_.generated, work), "cudaEventRecord(generated)") ||
                 !cuda_ok(cudaStreamWaitEvent(b_.stream, b_.generated, 0), "cudaStreamWaitEvent(generated)"))) {
      return false;
    }
    if (!mark(ring, kSegCall)) return false;
    if (!(step.graph >= 0 ? launch_graph(step) : call_library(step.calls[0]))) return false;
    if (job_.order != nullptr) job_.order->launched(job_.local, static_cast<int64_t>(steps_ + 1));
    if (side && (!cuda_ok(cudaEventRecord(b_.called, b_.stream), "cudaEventRecord(called)") ||
                 !cuda_ok(cudaEventSynchronize(b_.called), "cudaEventSynchronize(called)"))) {
      return false;
    }
    for (size_t i = 0; i < calls.size(); ++i) {
      const Corruption bad = corruption_of(step.calls[i].index, o_.corrupt_every, static_cast<uint32_t>(job_.world));
      if (bad.injected && bad.rank == static_cast<uint32_t>(job_.rank) &&
          !cuda_ok(launch_corrupt(calls[i], bad.output, work), "corrupt kernel launch (--corrupt-every)")) {
        return false;
      }
    }
    if (!mark(ring, kSegOverwrite)) return false;
    const bool overwrite = step.graph < 0 || side;  // a graph on the rank stream holds its overwrites
    for (size_t i = 0; i < calls.size() && overwrite; ++i) {
      if (!cuda_ok(launch_overwrite(calls[i], job_.shape, work), "overwrite kernel launch")) return false;
    }
    if (!mark(ring, kSegCheck)) return false;
    for (const DeviceCall& d : calls) {
      if (!cuda_ok(launch_check(d, job_.shape, job_.sm_count, work), "check kernel launch")) return false;
    }
    if (!b_.segment_events.empty()) slot_pattern_[ring] = pat_name(step.calls[0].pattern);
    return cuda_ok(cudaEventRecord(ev, work), "cudaEventRecord");
  }

  // Call i of the step as our kernels see it: eager calls in slot 0 (the input possibly in the
  // communicator's input buffer), a window's call i in slot i (as captured: graphs.h).
  DeviceCall device_call_of(const Step& step, size_t i) {
    const CallSpec& c = step.calls[i];
    TensorSet t = tensor_set(b_.slots[step.graph >= 0 ? i : 0]);
    if (step.graph < 0 && input_buffer_ != nullptr &&
        input_in_buffer(c, o_.seed, static_cast<uint32_t>(job_.rank), o_.input_buffer_percent)) {
      t.input = input_buffer_;
      ++out_->input_in_buffer;
    }
    if (step.graph < 0) eager_tensors_ = t;
    DeviceCall d = device_call(c, constants_, static_cast<uint32_t>(job_.rank), static_cast<uint32_t>(job_.world), t);
    d.table = b_.table;
    d.table_calls = b_.sizes.table_calls;
    d.counters = b_.counters;
    d.mirror = b_.mirror_device;
    return d;
  }

  bool call_library(const CallSpec& c) {
    const TensorSet& t = eager_tensors_;
    arfStatus_t st;
    if (c.pattern == Pat::kFlat) {
      const FlatArgs f = flat_args(c, t);
      st = arfAllReduce(job_.comm, f.in, f.out, f.count, o_.dtype, b_.stream);
    } else {
      const arfFusedArgs_t a = fused_args(c, o_.dtype, t);
      st = arfFusedAllReduce(job_.comm, &a, b_.stream);
    }
    if (st == arfSuccess) return true;
    const std::string why = arfGetLastErrorString();
    const bool refused = st == arfInvalidArgument || st == arfUnsupported;
    fail(refused ? Failure::kRefused : Failure::kAsync, st,
         "call " + std::to_string(c.index) + " (" + replay_csv_row(c) + ") returned " +
             arfGetStatusString(st) + ": " + why);
    return false;
  }

  // A graph launch takes no turn inside the library: the soak keeps the enqueue order of device
  // mates itself (launch_order.h), before the launch and, unless nothing else runs on the rank
  // stream, after it.
  bool launch_graph(const Step& step) {
    const int64_t s = static_cast<int64_t>(steps_);
    if (!wait_for_mates(s, "before")) return false;
    if (!cuda_ok(cudaGraphLaunch((*job_.graphs)[static_cast<size_t>(step.graph)], b_.stream), "cudaGraphLaunch")) {
      return false;
    }
    if (b_.side_stream != nullptr) return true;
    if (job_.order != nullptr) job_.order->launched(job_.local, s + 1);
    return wait_for_mates(s + 1, "after");
  }

  bool wait_for_mates(int64_t steps, const char* when) {
    if (job_.order == nullptr) return true;
    const std::string why = job_.order->wait_for_mates(job_.local, steps, o_.timeout_seconds);
    if (why.empty()) return true;
    fail(Failure::kAsync, arfTimeout, std::string("graph replay of step ") + std::to_string(steps_) + ", " + when +
                                          " the launch: " + why);
    return false;
  }

  // --time-segments: the event that starts `segment` of the call in ring slot `slot`.
  bool mark(size_t slot, int segment) {
    if (b_.segment_events.empty()) return true;
    return cuda_ok(cudaEventRecord(b_.segment_events[slot * kSegments + static_cast<size_t>(segment)], b_.stream),
                   "cudaEventRecord(segment)");
  }

  // The pieces of the call last issued in `slot`, once its closing event completed.
  void collect_segments(size_t slot) {
    if (b_.segment_events.empty() || slot_pattern_[slot].empty()) return;
    float ms[kSegments];
    for (int s = 0; s < kSegments; ++s) {
      cudaEvent_t from = b_.segment_events[slot * kSegments + static_cast<size_t>(s)];
      cudaEvent_t to = s + 1 < kSegments ? b_.segment_events[slot * kSegments + static_cast<size_t>(s) + 1]
                                         : b_.events[slot];
      if (!cuda_ok(cudaEventElapsedTime(&ms[s], from, to), "cudaEventElapsedTime")) return;
    }
    record_segments(&out_->segments, slot_pattern_[slot], ms);
    slot_pattern_[slot].clear();
  }

  // false (and every rank asked to stop) once the communicator reports an asynchronous error.
  bool healthy() {
    const arfStatus_t st = arfCommGetAsyncError(job_.comm);
    if (st == arfSuccess) return true;
    const std::string why = arfGetLastErrorString();
    uint64_t lost = UINT64_MAX;
    arfCommGetFirstLostCall(job_.comm, &lost);
    if (out_->failure == Failure::kNone || out_->failure == Failure::kAsync) {
      out_->failure = Failure::kAsync;
      out_->status = st;
      out_->message = why;
      out_->first_lost = lost;
    }
    job_.stop->request_stop("rank " + std::to_string(job_.rank) + ": " + arfGetStatusString(st));
    return false;
  }

  bool cuda_ok(cudaError_t e, const char* what) {
    if (e == cudaSuccess) return true;
    fail(Failure::kCuda, arfCudaError, std::string(what) + ": " + cudaGetErrorString(e));
    return false;
  }

  void fail(Failure f, arfStatus_t st, const std::string& message) {
    if (out_->failure == Failure::kNone) {
      out_->failure = f;
      out_->status = st;
      out_->message = message;
    }
    job_.stop->request_stop("rank " + std::to_string(job_.rank) + ": " + message);
  }

  void write_row(const CallSpec& c) {
    if (job_.schedule_out == nullptr) return;
    CallSpec row = c;
    if (c.skipped) row.index = k_;  // the index the next issued call takes
    *job_.schedule_out << replay_csv_row(row) << '\n';
  }

  const RankJob& job_;
  const StressOptions& o_;
  RankBuffers& b_;
  RankOutcome* out_;
  PlanOracle oracle_;
  RunConstants constants_;
  uint16_t* input_buffer_ = nullptr;  // the communicator's (arfCommGetInputBuffer), or none
  TensorSet eager_tensors_;           // the eager call's tensors (device_call_of)
  uint64_t k_ = 0;      // issued calls = the library's call index of the next call
  uint64_t steps_ = 0;  // issued steps (the event ring's index)
  std::vector<std::string> slot_pattern_ = std::vector<std::string>(static_cast<size_t>(o_.in_flight));
};

}  // namespace

PlanOracle comm_oracle(arfComm_t comm, arfDataType_t dtype) {
  return [comm, dtype](const CallSpec& c) {
    const arfFusedArgs_t a = shape_args(c, dtype);
    arfPlan_t plan;
    return plan_info_from(arfPlanShape(comm, &a, &plan), plan);
  };
}

void run_rank(const RankJob& job, RankOutcome* out) { Loop(job, out).run(); }

void final_error_state(arfComm_t comm, RankOutcome* out) {
  const arfStatus_t st = arfCommGetAsyncError(comm);
  uint64_t lost = UINT64_MAX;
  arfCommGetFirstLostCall(comm, &lost);
  if (st != arfSuccess) {
    if (out->failure == Failure::kNone) {
      out->failure = Failure::kAsync;
      out->status = st;
      out->message = arfGetLastErrorString();
    }
  }
  if (lost != UINT64_MAX) out->first_lost = lost;
}

}  // namespace arf::stress
