// One rank's issue loop (rank_loop.h).
#include "rank_loop.h"

#include <chrono>

#include "call_args.h"
#include "data_gen.h"
#include "replay_csv.h"
#include "self_test.h"

namespace arf::churn {
namespace {

// Draws that the planner refused in a row before the loop gives up (no call can run).
constexpr uint64_t kMaxConsecutiveSkips = 100000;

TensorSet tensors_of(const RankBuffers& b) {
  TensorSet t;
  t.input = b.input;
  t.residual_in = b.residual_in;
  t.residual_out = b.residual_out;
  t.norm_out = b.norm_out;
  t.allreduce_out = b.allreduce_out;
  t.gamma = b.gamma;
  t.quant_out = b.quant_out;
  t.scale_out = b.scale_out;
  t.scale_in = b.scale_in;
  return t;
}

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
      : job_(job), o_(*job.options), b_(*job.buffers), out_(out), tensors_(tensors_of(b_)),
        oracle_(comm_oracle(job.comm, o_.dtype)) {
    out_->stats.max_tokens = o_.max_tokens;
    out_->stats.largest_hidden = o_.hiddens.back();
    void* buffer = nullptr;
    size_t bytes = 0;
    if (arfCommGetInputBuffer(job.comm, &buffer, &bytes) == arfSuccess &&
        bytes >= static_cast<size_t>(o_.max_tokens * o_.max_hidden) * 2) {
      tensors_.input_buffer = static_cast<uint16_t*>(buffer);
    }
  }

  void run() {
    if (!cuda_ok(cudaSetDevice(b_.device), "cudaSetDevice")) return;
    const ScheduleOptions so = schedule_options(o_);
    Generator gen(so, job_.boundaries, oracle_);
    size_t replay_pos = 0;
    uint64_t skips = 0;
    const uint64_t depth = static_cast<uint64_t>(o_.in_flight);
    while (true) {
      if (o_.calls > 0 && k_ >= o_.calls) break;
      if (o_.calls_per_algorithm > 0 &&
          every_algorithm_reached(out_->stats, o_.algos, o_.calls_per_algorithm)) {
        break;
      }
      CallSpec c;
      if (job_.replay != nullptr) {
        if (replay_pos >= job_.replay->size()) break;
        c = (*job_.replay)[replay_pos++];
        if (!c.skipped) apply_plan(&c, oracle_);
      } else {
        c = gen.next();
      }
      if (c.skipped) {
        out_->stats.record_skipped(c);
        write_row(c);
        if (++skips > kMaxConsecutiveSkips) {
          fail(Failure::kSchedule, arfUnsupported, "the planner refused every call of the schedule");
          break;
        }
        continue;
      }
      skips = 0;
      if (!job_.stop->may_issue(k_)) break;
      c.index = k_;
      cudaEvent_t ev = b_.events[k_ % depth];
      if (k_ >= depth && !cuda_ok(cudaEventSynchronize(ev), "cudaEventSynchronize")) break;
      if (k_ >= depth) collect_segments(k_ % depth);
      host_skew(o_.seed, k_, static_cast<uint32_t>(job_.rank), o_.host_skew_us);
      if (!issue(c, ev)) break;
      if (c.wait_after || depth == 1) {
        if (!cuda_ok(cudaEventSynchronize(ev), "cudaEventSynchronize")) break;
      }
      c.wait_after = c.wait_after || depth == 1;
      out_->stats.record_issued(c);
      write_row(c);
      ++k_;
      if (k_ % static_cast<uint64_t>(o_.poll_every) == 0 && !healthy()) break;
    }
    out_->issued = k_;
    if (b_.side_stream != nullptr) (void)cuda_ok(cudaStreamSynchronize(b_.side_stream), "cudaStreamSynchronize(side)");
    if (cuda_ok(cudaStreamSynchronize(b_.stream), "cudaStreamSynchronize")) {
      for (uint64_t k = k_ > depth ? k_ - depth : 0; k < k_; ++k) collect_segments(k % depth);
    }
    healthy();
  }

 private:
  bool issue(const CallSpec& c, cudaEvent_t ev) {
    RunConstants rc;
    rc.seed = o_.seed;
    rc.skew_us = static_cast<uint32_t>(o_.skew_us);
    rc.reference = o_.reference;
    rc.dtype = o_.dtype;
    TensorSet t = tensors_;
    if (t.input_buffer != nullptr &&
        input_in_buffer(c, o_.seed, static_cast<uint32_t>(job_.rank), o_.input_buffer_percent)) {
      t.input = t.input_buffer;
      ++out_->input_in_buffer;
    }
    DeviceCall d = device_call(c, rc, static_cast<uint32_t>(job_.rank), static_cast<uint32_t>(job_.world), t);
    d.table = b_.table;
    d.table_calls = b_.sizes.table_calls;
    d.counters = b_.counters;
    d.mirror = b_.mirror_device;
    const size_t slot = static_cast<size_t>(k_ % static_cast<uint64_t>(o_.in_flight));
    // The soak's kernels: on the rank stream, or (--co-resident) on the side stream, ordered with
    // the call through `generated` before it and the host's wait for `called` after it.
    const cudaStream_t work = b_.work_stream();
    const bool side = b_.side_stream != nullptr;
    if (!mark(slot, kSegGenerate)) return false;
    if (!cuda_ok(launch_generate(d, job_.shape, work), "generate kernel launch")) return false;
    if (side && (!cuda_ok(cudaEventRecord(b_.generated, work), "cudaEventRecord(generated)") ||
                 !cuda_ok(cudaStreamWaitEvent(b_.stream, b_.generated, 0), "cudaStreamWaitEvent(generated)"))) {
      return false;
    }
    if (!mark(slot, kSegCall)) return false;
    arfStatus_t st;
    if (c.pattern == Pat::kFlat) {
      const FlatArgs f = flat_args(c, t);
      st = arfAllReduce(job_.comm, f.in, f.out, f.count, o_.dtype, b_.stream);
    } else {
      const arfFusedArgs_t a = fused_args(c, o_.dtype, t);
      st = arfFusedAllReduce(job_.comm, &a, b_.stream);
    }
    if (st != arfSuccess) {
      const std::string why = arfGetLastErrorString();
      const bool refused = st == arfInvalidArgument || st == arfUnsupported;
      fail(refused ? Failure::kRefused : Failure::kAsync, st,
           "call " + std::to_string(c.index) + " (" + replay_csv_row(c) + ") returned " +
               arfGetStatusString(st) + ": " + why);
      return false;
    }
    if (side && (!cuda_ok(cudaEventRecord(b_.called, b_.stream), "cudaEventRecord(called)") ||
                 !cuda_ok(cudaEventSynchronize(b_.called), "cudaEventSynchronize(called)"))) {
      return false;
    }
    const Corruption bad = corruption_of(k_, o_.corrupt_every, static_cast<uint32_t>(job_.world));
    if (bad.injected && bad.rank == static_cast<uint32_t>(job_.rank) &&
        !cuda_ok(launch_corrupt(d, bad.output, work), "corrupt kernel launch (--corrupt-every)")) {
      return false;
    }
    if (!mark(slot, kSegOverwrite)) return false;
    if (!cuda_ok(launch_overwrite(d, job_.shape, work), "overwrite kernel launch")) return false;
    if (!mark(slot, kSegCheck)) return false;
    if (!cuda_ok(launch_check(d, job_.shape, job_.sm_count, work), "check kernel launch")) return false;
    if (!b_.segment_events.empty()) slot_pattern_[slot] = pat_name(c.pattern);
    return cuda_ok(cudaEventRecord(ev, work), "cudaEventRecord");
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
    row.index = k_;
    *job_.schedule_out << replay_csv_row(row) << '\n';
  }

  const RankJob& job_;
  const ChurnOptions& o_;
  RankBuffers& b_;
  RankOutcome* out_;
  TensorSet tensors_;
  PlanOracle oracle_;
  uint64_t k_ = 0;  // issued calls = the library's call index of the next call
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

}  // namespace arf::churn
