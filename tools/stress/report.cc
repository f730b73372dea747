// Summary table, JSON report and exit code of the soak (report.h).
#include "report.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>

#include "numerics.h"

namespace arf::stress {
namespace {

constexpr const char* kOutputNames[kNumOutputs] = {"allreduce_out", "residual_out", "norm_out",
                                                   "quant_out", "scale_out", "scale_out padding"};

const char* failure_name(Failure f) {
  switch (f) {
    case Failure::kNone: return "none";
    case Failure::kAsync: return "async_error";
    case Failure::kRefused: return "refused_call";
    case Failure::kCuda: return "cuda_error";
    case Failure::kSchedule: return "schedule";
  }
  return "?";
}

bool repeat_failed(const RepeatReport& r) {
  for (const RankReport& k : r.ranks) {
    if (k.failure == Failure::kAsync || k.failure == Failure::kCuda) return true;
  }
  return false;
}

bool repeat_setup(const RepeatReport& r) {
  for (const RankReport& k : r.ranks) {
    if (k.failure == Failure::kRefused || k.failure == Failure::kSchedule) return true;
  }
  return !r.cross.error.empty();
}

bool repeat_wrong(const RepeatReport& r) {
  for (const RankReport& k : r.ranks) {
    if (k.wrong_before_loss > 0) return true;
  }
  return r.cross.mismatched > 0 || !r.stats_agree;
}

uint64_t total_wrong(const RepeatReport& r) {
  uint64_t n = 0;
  for (const RankReport& k : r.ranks) n += k.wrong;
  return n;
}

std::string first_bad_text(const RankReport& k) {
  char buf[256];
  const FirstBad& f = k.first;
  std::snprintf(buf, sizeof(buf), "call %llu rank %d %s row %lld col %lld got 0x%x want 0x%x",
                f.call, k.rank, output_name(f.output), f.row, f.col, f.got, f.want);
  return buf;
}

nlohmann::json json_map(const std::map<std::string, uint64_t>& m) {
  nlohmann::json j = nlohmann::json::object();
  for (const auto& [k, v] : m) j[k] = v;
  return j;
}

nlohmann::json repeat_json(const RepeatReport& r) {
  const IssueStats& s = r.stats;
  nlohmann::json j;
  j["repeat"] = r.repeat;
  j["seconds"] = r.seconds;
  j["issued_calls"] = s.issued;
  j["graph_replays"] = r.graph_replays;
  j["skipped_calls"] = s.skipped;
  j["rate_calls_per_second"] = r.seconds > 0 ? static_cast<double>(s.issued) / r.seconds : 0.0;
  j["per_algorithm"] = json_map(s.per_algorithm);
  j["skipped_per_algorithm"] = json_map(s.skipped_per_algorithm);
  j["per_plan_algorithm"] = json_map(s.per_plan_algorithm);
  j["per_pattern"] = json_map(s.per_pattern);
  nlohmann::json hid = nlohmann::json::object();
  for (const auto& [h, n] : s.per_hidden) hid[std::to_string(h)] = n;
  j["per_hidden"] = hid;
  j["per_token_kind"] = json_map(s.per_token_kind);
  j["tiny_after_large_transitions"] = s.tiny_after_large;
  j["full_capacity_calls"] = s.full_capacity;
  j["options"] = {{"residual_null", s.residual_null},
                  {"residual_in_place", s.residual_in_place},
                  {"norm_out_is_input", s.norm_out_is_input},
                  {"allreduce_out_is_input", s.allreduce_out_is_input},
                  {"per_rank_residual_gamma", s.per_rank_data},
                  {"gamma_fp32", s.gamma_fp32},
                  {"gamma_plus_one", s.gamma_plus_one},
                  {"norm_round_before_weight", s.round_before_weight},
                  {"sandwich", s.sandwich}};
  j["sandwich_per_pattern"] = json_map(s.sandwich_per_pattern);
  j["replay_plan_differs_from_recorded"] = s.plan_mismatch_recorded;
  j["ranks_issued_the_same_calls"] = r.stats_agree;
  j["wrong_elements"] = total_wrong(r);
  uint64_t before = 0;
  nlohmann::json ranks = nlohmann::json::array();
  for (const RankReport& k : r.ranks) {
    before += k.wrong_before_loss;
    nlohmann::json e = {{"rank", k.rank}, {"checks_done", k.checks_done}, {"wrong_elements", k.wrong},
                        {"wrong_before_first_lost_call", k.wrong_before_loss},
                        {"input_in_buffer_calls", k.input_in_buffer},
                        {"failure", failure_name(k.failure)}};
    if (k.failure != Failure::kNone) {
      e["status"] = arfGetStatusString(k.status);
      e["message"] = k.message;
    }
    if (k.first_lost != UINT64_MAX) e["first_lost_call"] = k.first_lost;
    if (k.first_valid) {
      e["first_bad"] = {{"call", k.first.call}, {"output", output_name(k.first.output)},
                        {"row", k.first.row}, {"col", k.first.col}, {"got_bits", k.first.got},
                        {"want_bits", k.first.want}};
    }
    ranks.push_back(e);
  }
  j["wrong_before_first_lost_call"] = before;
  j["ranks"] = ranks;
  j["cross_rank"] = {{"compared_calls", r.cross.compared}, {"mismatched_calls", r.cross.mismatched},
                     {"first_slot", r.cross.first_slot}, {"first_rank", r.cross.first_rank},
                     {"folded", r.cross.folded}, {"done_here", r.cross_done}, {"error", r.cross.error}};
  j["stop_reason"] = r.stop_reason;
  if (r.self_test_done) {
    const SelfTestVerdict& v = r.self_test;
    j["self_test"] = {{"injected", v.injected}, {"caught", v.caught}, {"false_alarms", v.false_alarms},
                      {"ok", v.ok()}, {"text", v.text()}};
  }
  if (!r.segments.empty()) {
    nlohmann::json seg = nlohmann::json::object();
    for (const auto& [pattern, t] : r.segments) {
      seg[pattern] = {{"calls", t.calls}, {"generate_ms", t.ms[kSegGenerate]}, {"call_ms", t.ms[kSegCall]},
                      {"overwrite_ms", t.ms[kSegOverwrite]}, {"check_ms", t.ms[kSegCheck]}};
    }
    j["segments"] = seg;
  }
  j["verdict"] = repeat_line(r);
  return j;
}

}  // namespace

const char* output_name(uint32_t id) { return id < kNumOutputs ? kOutputNames[id] : "?"; }

uint64_t wrong_below(const std::vector<TableEntry>& table, uint64_t issued, uint64_t limit) {
  const uint64_t slots = table.size();
  uint64_t n = 0;
  for (uint64_t s = 0; s < std::min(issued, slots); ++s) {
    const uint64_t last = s + ((issued - 1 - s) / slots) * slots;
    if (last < limit) n += table[s].wrong;
  }
  return n;
}

int exit_code(const StressOptions& o, const RunReport& r) {
  if (!r.setup_error.empty()) return kStressSetup;
  bool failed = false, wrong = false, setup = false, any_wrong = false;
  for (const RepeatReport& rep : r.repeats) {
    failed = failed || repeat_failed(rep);
    wrong = wrong || repeat_wrong(rep);
    setup = setup || repeat_setup(rep);
    any_wrong = any_wrong || total_wrong(rep) > 0;
  }
  if (setup) return kStressSetup;
  if (o.corrupt_every > 0) {  // the self-test's verdict replaces the wrong-element rules
    if (failed) return kStressTimeout;
    for (const RepeatReport& rep : r.repeats) {
      if (!rep.self_test_done || !rep.self_test.ok()) return kStressWrong;
    }
    return kStressOk;
  }
  if (o.expect_failure) return failed || wrong || any_wrong ? kStressOk : kStressWrong;
  if (failed) return kStressTimeout;
  if (wrong) return kStressWrong;
  return kStressOk;
}

std::string repeat_line(const RepeatReport& r) {
  std::string out = "repeat " + std::to_string(r.repeat) + ": " + std::to_string(r.stats.issued) +
                    " calls, ";
  std::string what;
  for (const RankReport& k : r.ranks) {
    if (k.failure == Failure::kNone) continue;
    what += std::string(what.empty() ? "" : "; ") + failure_name(k.failure) + " on rank " +
            std::to_string(k.rank);
    if (k.first_lost != UINT64_MAX) what += " (first lost call " + std::to_string(k.first_lost) + ")";
    what += ": " + k.message;
    break;  // the first failing rank says where
  }
  for (const RankReport& k : r.ranks) {
    if (!k.first_valid) continue;
    what += std::string(what.empty() ? "" : "; ") + std::to_string(total_wrong(r)) +
            " wrong elements (" + std::to_string(k.wrong_before_loss) + " before the first lost call " +
            "on rank " + std::to_string(k.rank) + "), first " + first_bad_text(k);
    break;
  }
  if (r.cross.mismatched > 0) {
    what += std::string(what.empty() ? "" : "; ") + std::to_string(r.cross.mismatched) +
            " calls differ across ranks, first " + (r.cross.folded ? "slot " : "call ") +
            std::to_string(r.cross.first_slot) + " on rank " + std::to_string(r.cross.first_rank);
  }
  if (!r.cross.error.empty()) what += std::string(what.empty() ? "" : "; ") + "exchange: " + r.cross.error;
  if (!r.stats_agree) what += std::string(what.empty() ? "" : "; ") + "ranks issued different calls";
  return out + (what.empty() ? "clean" : what);
}

void print_report(const StressOptions& o, const RunReport& r) {
  std::printf("\n# summary (%d ranks%s, %s mix%s)\n", o.world(), o.processes() ? ", one process per rank" : "",
              token_mix_name(o.mix), o.co_resident ? ", co-resident test mode" : "");
  for (const RepeatReport& rep : r.repeats) {
    const IssueStats& s = rep.stats;
    std::printf("# repeat %d: %" PRIu64 " calls (%" PRIu64 " skipped) in %.1f s = %.0f calls/s; "
                "tiny-after-large %" PRIu64 ", full-capacity %" PRIu64 ", graph replays %" PRIu64 "\n",
                rep.repeat, s.issued, s.skipped, rep.seconds,
                rep.seconds > 0 ? static_cast<double>(s.issued) / rep.seconds : 0.0, s.tiny_after_large,
                s.full_capacity, rep.graph_replays);
    std::printf("#   %-18s", "algorithm");
    for (const auto& [k, v] : s.per_algorithm) std::printf(" %s=%" PRIu64, k.c_str(), v);
    std::printf("\n#   %-18s", "pattern");
    for (const auto& [k, v] : s.per_pattern) std::printf(" %s=%" PRIu64, k.c_str(), v);
    std::printf("\n#   %-18s", "hidden");
    for (const auto& [k, v] : s.per_hidden) std::printf(" %" PRId64 "=%" PRIu64, k, v);
    std::printf("\n#   %-18s", "tokens");
    for (const auto& [k, v] : s.per_token_kind) std::printf(" %s=%" PRIu64, k.c_str(), v);
    if (o.sandwich_share > 0.0 || s.sandwich > 0) {
      std::printf("\n#   %-18s %" PRIu64 " (--sandwich-share %g):", "sandwich", s.sandwich,
                  o.sandwich_share);
      for (const auto& [k, v] : s.sandwich_per_pattern) std::printf(" %s=%" PRIu64, k.c_str(), v);
    }
    std::printf("\n#   %-6s %10s %12s %12s %10s  %s\n", "rank", "checked", "wrong", "wrong<lost", "in buffer",
                "failure");
    for (const RankReport& k : rep.ranks) {
      std::printf("#   %-6d %10" PRIu64 " %12" PRIu64 " %12" PRIu64 " %10" PRIu64 "  %s\n", k.rank, k.checks_done,
                  k.wrong, k.wrong_before_loss, k.input_in_buffer, failure_name(k.failure));
    }
    if (rep.cross_done) {
      std::printf("#   cross-rank: %" PRIu64 " calls compared, %" PRIu64 " differ%s\n", rep.cross.compared,
                  rep.cross.mismatched, rep.cross.folded ? " (folded slots)" : "");
    }
    if (rep.self_test_done) std::printf("#   %s\n", rep.self_test.text().c_str());
    if (!rep.segments.empty()) {
      std::printf("#   stream time per call and rank (--time-segments; each piece includes its waits):\n");
      for (const std::string& line : segment_lines(rep.segments)) std::printf("#     %s\n", line.c_str());
    }
    if (s.plan_mismatch_recorded > 0) {
      std::printf("#   WARNING: %" PRIu64 " replayed calls planned a grid/block other than recorded\n",
                  s.plan_mismatch_recorded);
    }
    std::printf("%s\n", repeat_line(rep).c_str());
  }
  const int code = exit_code(o, r);
  std::printf("RESULT: exit %d%s\n", code, o.expect_failure ? " (--expect-failure)" : "");
  std::fflush(stdout);
}

std::string json_path_for(const StressOptions& o) {
  const std::string& p = o.json_path;
  if (!o.processes() || p.empty()) return p;
  const std::string tag = ".rank" + std::to_string(o.process_rank);
  const bool dot_json = p.size() > 5 && p.compare(p.size() - 5, 5, ".json") == 0;
  return dot_json ? p.substr(0, p.size() - 5) + tag + ".json" : p + tag;
}

bool write_json(const std::string& path, const StressOptions& o, const RunReport& r) {
  nlohmann::json j;
  // Readers tell this report by "format": 2 (bench/results/SCHEMA.md); files whose "tool" is
  // "arfusion-stress churn" have the same keys, and an "arfusion-stress" file without "format" is
  // another report, which the readers skip.
  j["tool"] = "arfusion-stress";
  j["format"] = 2;
  j["command_line"] = o.command_line;
  // What was soaked: the commit the caller names (dev/measure/soak_tally.py pools runs of the same
  // library sources) and the header's API version.
  const char* commit = std::getenv("ARF_GIT_COMMIT");
  j["git_commit"] = commit != nullptr ? commit : "";
  j["api_version"] = ARF_API_VERSION;
  j["library_variant"] = o.library_variant;  // "release", or a negative control's library
  j["world"] = o.world();
  j["processes"] = o.processes();
  j["rank"] = o.process_rank;
  j["devices"] = o.devices;
  j["mps"] = r.mps;
  j["dtype"] = o.dtype == arfFloat16 ? "fp16" : "bf16";
  j["max_tokens"] = o.max_tokens;
  j["max_hidden"] = o.max_hidden;
  j["seed"] = o.seed;
  j["token_mix"] = token_mix_name(o.mix);
  j["sandwich_share"] = o.sandwich_share;
  j["co_resident"] = o.co_resident;  // the co-resident test mode (docs/protocol.md)
  j["graphs"] = {{"windows", o.graphs}, {"window", o.window}};
  j["in_flight"] = o.in_flight;
  j["skew_us"] = o.skew_us;
  j["foreign"] = {{"block", o.foreign_block}, {"smem_kb", o.foreign_smem_kb}, {"grid", o.foreign_grid},
                  {"kernels", r.foreign}};
  j["verify_calls"] = o.verify_calls;
  j["reference"] = reference_mode_name(o.reference);
  j["input_buffer_percent"] = o.input_buffer_percent;
  j["replay"] = o.replay_path;
  j["boundaries"] = {{"combinations", r.boundary_combinations}, {"points", r.boundary_points}};
  j["setup_error"] = r.setup_error;
  nlohmann::json reps = nlohmann::json::array();
  for (const RepeatReport& rep : r.repeats) reps.push_back(repeat_json(rep));
  j["repeats"] = reps;
  j["exit_code"] = exit_code(o, r);
  std::ofstream out(path);
  if (!out) return false;
  out << j.dump(2) << '\n';
  return static_cast<bool>(out);
}

}  // namespace arf::stress
