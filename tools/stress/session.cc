// One run of the soak in this process (session.h).
#include "session.h"

#include <sys/stat.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <thread>

#include "graphs.h"
#include "monitor.h"
#include "rank_loop.h"
#include "replay_csv.h"

namespace arf::stress {
namespace {

// How long rank 0 of a process job waits for its peers' hash files.
constexpr double kExchangeSeconds = 600;

std::string cuda_failed(const char* what, cudaError_t e) {
  return std::string(what) + ": " + cudaGetErrorString(e);
}

arfCommConfig_t base_config(const StressOptions& o) {
  arfCommConfig_t cfg;
  arfCommConfigInit(&cfg);
  cfg.max_tokens = static_cast<size_t>(o.max_tokens);
  cfg.max_hidden = static_cast<size_t>(o.max_hidden);
  cfg.dtype = o.dtype;
  cfg.oneshot_max_tokens = static_cast<size_t>(o.oneshot_max_tokens);
  cfg.timeout_seconds = o.timeout_seconds;
  cfg.programmatic_launch = o.pdl ? 1 : 0;
  cfg.verify_calls = o.verify_calls ? 1 : 0;
  return cfg;
}

std::string hash_dir_of(const StressOptions& o) {
  if (!o.hash_dir.empty()) return o.hash_dir;
  const char* tmp = std::getenv("TMPDIR");
  return std::string(tmp != nullptr && *tmp != 0 ? tmp : "/tmp") + "/arfusion-stress-" + o.rendezvous_id;
}

void print_boundaries(const BoundaryTable& t) {
  for (const auto& [key, points] : t.entries()) {
    const auto pat = static_cast<Pat>(std::get<0>(key));
    const auto algo = static_cast<arfAlgorithm_t>(std::get<1>(key));
    const int64_t hidden = std::get<2>(key);
    std::printf("%s/%s/hidden %lld:", pat_name(pat), arfAlgorithmName(algo), static_cast<long long>(hidden));
    for (int64_t p : points) std::printf(" %lld", static_cast<long long>(p));
    std::printf(" (full grid from %lld)\n", static_cast<long long>(t.full_grid_tokens(pat, algo, hidden)));
  }
}

}  // namespace

Session::Session(const StressOptions& o) : o_(o) {}

Session::~Session() {
  release_graphs();
  destroy_comms();
}

std::string Session::setup(RunReport* report) {
  std::vector<int64_t> hiddens = o_.hiddens;
  if (o_.replay()) {
    ReplayFile f;
    std::string why;
    if (!load_replay_csv(o_.replay_path, &f, &why)) return why;
    for (const CallSpec& c : f.calls) {
      if (c.skipped) continue;
      if (c.tokens > o_.max_tokens || c.hidden > o_.max_hidden) {
        return o_.replay_path + ": call " + std::to_string(c.index) + " (" + std::to_string(c.tokens) +
               " x " + std::to_string(c.hidden) + ") exceeds --max-tokens/--max-hidden";
      }
      hiddens.push_back(c.hidden);
      if (c.sandwich) {
        const std::string no = sandwich_refusal(o_.replay_path + " (call " + std::to_string(c.index) + ", column post_gamma)",
                                                [](const char* name) { return static_cast<const char*>(std::getenv(name)); });
        if (!no.empty()) return no;
      }
    }
    replay_ = std::move(f.calls);
  }
  int count = 0;
  if (cudaError_t e = cudaGetDeviceCount(&count); e != cudaSuccess) return cuda_failed("cudaGetDeviceCount", e);
  if (o_.processes()) {
    arfCommConfig_t cfg = base_config(o_);
    if (arfCommConfigFromEnv(&cfg) != arfSuccess) return std::string("arfCommConfigFromEnv: ") + arfGetLastErrorString();
    ranks_ = {o_.process_rank};
    devices_ = {cfg.device};
  } else {
    for (int r = 0; r < o_.world(); ++r) ranks_.push_back(r);
    devices_ = o_.devices;
  }
  for (int d : devices_) {
    if (d >= count) return "device " + std::to_string(d) + " does not exist (" + std::to_string(count) + " visible)";
  }
  BufferSizes sizes;
  sizes.max_tokens = o_.max_tokens;
  sizes.max_hidden = o_.max_hidden;
  sizes.scale_bytes = largest_scale_bytes(o_.max_tokens, hiddens);
  sizes.table_calls = std::max<uint64_t>(1, o_.table_calls);
  sizes.in_flight = o_.in_flight;
  sizes.time_segments = o_.time_segments;
  sizes.side_stream = o_.co_resident;
  sizes.slots = o_.graphs > 0 ? o_.window : 1;
  shape_.block = o_.foreign_block;
  shape_.smem_bytes = o_.foreign_smem_kb * 1024;
  int min_sms = 0;
  std::string footprint;
  for (int d : std::set<int>(devices_.begin(), devices_.end())) {
    if (cudaError_t e = cudaSetDevice(d); e != cudaSuccess) {
      // Seen with 4 processes on one GPU under MPS at CUDA_DEVICE_MAX_CONNECTIONS=32: an MPS
      // server's clients share one pool of work queues, and a context that finds none left fails.
      const char* hint = e == cudaErrorMemoryAllocation
                             ? " (under MPS the clients of a GPU share one pool of work queues: fewer "
                               "--connections, i.e. CUDA_DEVICE_MAX_CONNECTIONS, leave room for more clients)"
                             : "";
      return cuda_failed("cudaSetDevice", e) + hint;
    }
    int sms = 0;
    if (cudaError_t e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d); e != cudaSuccess) {
      return cuda_failed("cudaDeviceGetAttribute", e);
    }
    min_sms = min_sms == 0 ? sms : std::min(min_sms, sms);
    int mps = 0;
    if (cudaDeviceGetAttribute(&mps, cudaDevAttrMpsEnabled, d) == cudaSuccess && mps != 0) report->mps = true;
    if (std::string why = prepare_foreign_kernels(shape_); !why.empty()) return "device " + std::to_string(d) + ": " + why;
  }
  shape_.grid = o_.foreign_grid > 0 ? o_.foreign_grid : min_sms;
  report->foreign = "block " + std::to_string(shape_.block) + ", " + std::to_string(shape_.smem_bytes) +
                    " B dynamic shared memory, generate/overwrite grid " + std::to_string(shape_.grid) +
                    (o_.co_resident ? ", on a side stream per rank (co-resident test mode)" : "");
  for (size_t i = 0; i < ranks_.size(); ++i) {
    buffers_.push_back(std::make_unique<RankBuffers>());
    if (std::string why = buffers_.back()->allocate(devices_[i], sizes); !why.empty()) {
      return "rank " + std::to_string(ranks_[i]) + ": " + why;
    }
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, devices_[i]);
    sm_counts_.push_back(std::max(1, sms));
  }
  // Warm-up: every foreign kernel runs once per stream before any collective exists.
  for (auto& b : buffers_) {
    if (cudaError_t e = cudaSetDevice(b->device); e != cudaSuccess) return cuda_failed("cudaSetDevice", e);
    if (cudaError_t e = warm_up_foreign_kernels(shape_, b->work_stream()); e != cudaSuccess) return cuda_failed("warm-up", e);
    if (cudaError_t e = cudaStreamSynchronize(b->work_stream()); e != cudaSuccess) return cuda_failed("warm-up", e);
  }
  std::printf("# soak: %d ranks (%s), %s, capacity %lld x %lld, %zu local rank(s); foreign kernels: %s\n",
              o_.world(), o_.processes() ? "one process per rank, ipc" : "one process, local transport",
              o_.dtype == arfFloat16 ? "fp16" : "bf16", static_cast<long long>(o_.max_tokens),
              static_cast<long long>(o_.max_hidden), ranks_.size(), report->foreign.c_str());
  const char* how = o_.reference == ReferenceMode::kAll
                        ? "every rank recomputes every call's expected outputs"
                    : o_.reference == ReferenceMode::kSplit
                        ? "each rank recomputes its share of every call's rows; all outputs compared by hash"
                        : "each call's expected outputs recomputed on rank call % world; the others' "
                          "outputs compared with it by hash";
  std::printf("# reference: %s (%s)\n", reference_mode_name(o_.reference), how);
  std::fflush(stdout);
  return "";
}

std::string Session::create_comms(int repeat) {
  arfCommConfig_t cfg = base_config(o_);
  comms_.assign(ranks_.size(), nullptr);
  if (!o_.processes()) {
    if (arfCommInitAll(comms_.data(), o_.world(), devices_.data(), &cfg) != arfSuccess) {
      comms_.clear();
      return std::string("arfCommInitAll: ") + arfGetLastErrorString();
    }
    return "";
  }
  if (arfCommConfigFromEnv(&cfg) != arfSuccess) return std::string("arfCommConfigFromEnv: ") + arfGetLastErrorString();
  // A fresh rendezvous per repeat, the same in every process: the job's id with the repeat
  // number mixed into its last two significant bytes.
  cfg.id.internal[14] = static_cast<char>(cfg.id.internal[14] ^ static_cast<char>((repeat >> 8) & 0xFF));
  cfg.id.internal[15] = static_cast<char>(cfg.id.internal[15] ^ static_cast<char>(repeat & 0xFF));
  if (arfCommInitRank(&comms_[0], &cfg) != arfSuccess) {
    comms_.clear();
    return std::string("arfCommInitRank: ") + arfGetLastErrorString();
  }
  return "";
}

std::string Session::capture() {
  graphs_.assign(ranks_.size(), {});
  if (o_.graphs <= 0) return "";
  const std::vector<std::vector<CallSpec>> windows =
      draw_windows(schedule_options(o_), step_options(o_), &*boundaries_, comm_oracle(comms_[0], o_.dtype));
  for (size_t i = 0; i < ranks_.size(); ++i) {
    CaptureJob job;
    job.comm = comms_[i];
    job.buffers = buffers_[i].get();
    job.constants.seed = o_.seed;
    job.constants.skew_us = static_cast<uint32_t>(o_.skew_us);
    job.constants.reference = o_.reference;
    job.constants.dtype = o_.dtype;
    job.rank = static_cast<uint32_t>(ranks_[i]);
    job.world = static_cast<uint32_t>(o_.world());
    job.shape = shape_;
    job.overwrite_inside = !o_.co_resident;
    if (std::string why = capture_windows(job, windows, &graphs_[i]); !why.empty()) return "--graphs: " + why;
  }
  return "";
}

void Session::release_graphs() {
  for (auto& g : graphs_) destroy_graphs(&g);
}

void Session::destroy_comms() {
  for (arfComm_t c : comms_) arfCommDestroy(c);
  comms_.clear();
}

std::string Session::probe(RunReport* report) {
  if (boundaries_) return "";
  if (o_.replay()) {
    boundaries_ = BoundaryTable{};
    return "";
  }
  const ScheduleOptions so = schedule_options(o_);
  const auto t0 = std::chrono::steady_clock::now();
  boundaries_ = BoundaryTable::probe(so, comm_oracle(comms_[0], o_.dtype));
  report->boundary_combinations = boundaries_->num_combinations();
  report->boundary_points = boundaries_->num_points();
  std::printf("# plan boundaries: %zu combinations, %zu token counts (probed in %.1f s)\n",
              report->boundary_combinations, report->boundary_points,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  std::fflush(stdout);
  return "";
}

std::string Session::check_mode() const {
  arfFusedArgs_t a;
  arfFusedArgsInit(&a);
  a.pattern = arfPatternAllReduce;
  a.dtype = o_.dtype;
  a.num_tokens = 1;
  a.hidden = static_cast<size_t>(o_.hiddens.front());
  arfPlan_t plan;
  if (arfPlanShape(comms_[0], &a, &plan) != arfSuccess) return std::string("arfPlanShape: ") + arfGetLastErrorString();
  const bool in_mode = std::string(plan.reason).rfind(kCoResidentReasonPrefix, 0) == 0;
  if (in_mode == o_.co_resident) return "";
  return std::string("the communicators are ") + (in_mode ? "" : "not ") +
         "in the co-resident test mode (plan: \"" + plan.reason + "\"), the soak " +
         (o_.co_resident ? "asked for it (--co-resident)" : "did not");
}

std::string Session::run_repeat(int repeat, RunReport* report) {
  if (std::string why = create_comms(repeat); !why.empty()) return why;
  // A library that ignored the mode would soak the gated protocol while the report says otherwise.
  if (std::string why = check_mode(); !why.empty()) {
    destroy_comms();
    return why;
  }
  for (auto& b : buffers_) {
    if (std::string why = b->reset(); !why.empty()) return why;
  }
  probe(report);
  if (o_.list_boundaries) {
    print_boundaries(*boundaries_);
    destroy_comms();
    return "";
  }
  if (std::string why = capture(); !why.empty()) {
    release_graphs();
    destroy_comms();
    return why;
  }
  std::optional<LaunchOrder> order;
  if (!o_.processes()) order.emplace(devices_);
  std::ofstream schedule_file;
  if (!o_.write_schedule.empty() && repeat == 0) {
    schedule_file.open(o_.write_schedule);
    if (!schedule_file) return "cannot write " + o_.write_schedule;
    schedule_file << replay_csv_header() << '\n';
  }
  StopControl stop;
  std::vector<RankOutcome> outcomes(ranks_.size());
  std::vector<RankJob> jobs(ranks_.size());
  for (size_t i = 0; i < ranks_.size(); ++i) {
    RankJob& j = jobs[i];
    j.rank = ranks_[i];
    j.world = o_.world();
    j.comm = comms_[i];
    j.buffers = buffers_[i].get();
    j.options = &o_;
    j.boundaries = &*boundaries_;
    j.replay = o_.replay() ? &replay_ : nullptr;
    j.stop = &stop;
    j.shape = shape_;
    j.sm_count = sm_counts_[i];
    j.schedule_out = (i == 0 && schedule_file.is_open()) ? &schedule_file : nullptr;
    j.graphs = &graphs_[i];
    j.order = order && order->has_mates(static_cast<int>(i)) ? &*order : nullptr;
    j.local = static_cast<int>(i);
  }
  MonitorInputs mon;
  mon.options = &o_;
  for (auto& b : buffers_) mon.buffers.push_back(b.get());
  mon.stop = &stop;
  std::atomic<int> running{static_cast<int>(ranks_.size())};
  mon.running = &running;
  mon.on_hang = [&](const std::string& line) {
    if (o_.json_path.empty()) return;
    std::ofstream out(json_path_for(o_));
    out << nlohmann::json{{"tool", "arfusion-stress"}, {"format", 2}, {"command_line", o_.command_line},
                          {"repeat", repeat}, {"watchdog", line}, {"exit_code", kStressTimeout}}
               .dump(2)
        << '\n';
  };
  install_interrupt_handler();
  mon.start = std::chrono::steady_clock::now();
  std::vector<std::thread> threads;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    threads.emplace_back([&, i] {
      run_rank(jobs[i], &outcomes[i]);
      running.fetch_sub(1);
    });
  }
  monitor(mon);
  for (std::thread& t : threads) t.join();
  RepeatReport rep;
  rep.repeat = repeat;
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - mon.start).count();
  rep.stop_reason = stop.reason();
  // Every stream drained (each rank thread synchronized its own): final error state, tables.
  std::vector<std::vector<TableEntry>> tables(ranks_.size());
  uint64_t limit = UINT64_MAX, issued_max = 0;
  for (size_t i = 0; i < ranks_.size(); ++i) {
    final_error_state(comms_[i], &outcomes[i]);
    if (std::string why = buffers_[i]->read_table(&tables[i]); !why.empty()) return why;
    limit = std::min({limit, outcomes[i].first_lost, outcomes[i].issued});
    issued_max = std::max(issued_max, outcomes[i].issued);
  }
  release_graphs();
  destroy_comms();
  rep.stats = outcomes[0].stats;
  rep.graph_replays = outcomes[0].graph_replays;
  // Without a failure every rank must have issued the same calls (after one, ranks stop a few
  // calls apart by design).
  const bool any_failure = std::any_of(outcomes.begin(), outcomes.end(),
                                       [](const RankOutcome& x) { return x.failure != Failure::kNone; });
  for (size_t i = 0; i < ranks_.size(); ++i) {
    rep.stats_agree = rep.stats_agree && (any_failure || outcomes[i].stats == rep.stats);
    const MirrorSnapshot m = read_mirror(buffers_[i]->mirror_host);
    RankReport k;
    k.rank = ranks_[i];
    k.checks_done = m.checks_done;
    k.wrong = m.wrong_total;
    k.wrong_before_loss = wrong_below(tables[i], outcomes[i].issued, limit);
    k.first_valid = m.first_valid;
    k.first = m.first;
    k.failure = outcomes[i].failure;
    k.status = outcomes[i].status;
    k.message = outcomes[i].message;
    k.first_lost = outcomes[i].first_lost;
    k.input_in_buffer = outcomes[i].input_in_buffer;
    rep.ranks.push_back(k);
    for (const auto& [pattern, times] : outcomes[i].segments) rep.segments[pattern].merge(times);
  }
  if (o_.corrupt_every > 0) {
    rep.self_test = self_test_verdict(tables, ranks_, issued_max, o_.corrupt_every,
                                      static_cast<uint32_t>(o_.world()));
    rep.self_test_done = true;
  }
  if (!o_.processes()) {
    rep.cross = compare_tables(tables, issued_max, limit);
    rep.cross_done = true;
  } else {
    const std::string dir = hash_dir_of(o_);
    ::mkdir(dir.c_str(), 0700);  // EEXIST is fine: every rank makes it
    RankTable mine;
    mine.rank = o_.process_rank;
    mine.world = o_.world();
    mine.repeat = repeat;
    mine.issued = outcomes[0].issued;
    mine.first_lost = outcomes[0].first_lost;
    mine.table = std::move(tables[0]);
    if (o_.process_rank != 0) {
      if (std::string why = write_rank_table(dir, mine); !why.empty()) rep.cross.error = why;
    } else {
      rep.cross = exchange_and_compare(dir, mine, kExchangeSeconds);
      rep.cross_done = true;
      ::rmdir(dir.c_str());  // fails harmlessly while a later repeat's file is there
    }
  }
  std::printf("%s\n", repeat_line(rep).c_str());
  std::fflush(stdout);
  report->repeats.push_back(std::move(rep));
  return "";
}

}  // namespace arf::stress
