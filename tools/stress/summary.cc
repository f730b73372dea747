// Totals, text report, JSON summary and exit code (summary.h).
#include "summary.h"

#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

namespace arf::stress {
namespace {

using nlohmann::json;

const char* dtype_name(arfDataType_t dtype) { return dtype == arfFloat16 ? "fp16" : "bf16"; }
DType ref_dtype(arfDataType_t dtype) { return dtype == arfFloat16 ? DType::kFp16 : DType::kBf16; }

std::string plan_text(const DispatchMap& map, const CallSpec& call) {
  const PlanPoint& p = map.plan(call.combo, call.tokens);
  char buf[160];
  std::snprintf(buf, sizeof(buf), "%s (inner %s, %d kernel%s, grid %d, block %d)",
                arfAlgorithmName(p.algorithm), arfAlgorithmName(p.inner), p.num_kernels,
                p.num_kernels == 1 ? "" : "s", p.grid, p.block);
  return buf;
}

std::string call_text(const DispatchMap& map, const CallSpec& call) {
  char buf[200];
  std::snprintf(buf, sizeof(buf), "%s tokens %" PRId64 " set %d rows %" PRId64 "+ gamma kind %d",
                combo_name(map.combos()[call.combo]).c_str(), call.tokens, call.set,
                call.row_offset, call.gamma_kind);
  return buf;
}

json first_bad_json(const StressArgs& args, const DispatchMap& map, const Totals& t) {
  if (!t.has_first) return nullptr;
  const Mismatch& m = t.first;
  const PlanPoint& p = map.plan(t.first_call.combo, t.first_call.tokens);
  return {{"call", m.call},
          {"step", t.first_step},
          {"graph", t.first_graph},
          {"rank", m.rank},
          {"output", m.output},
          {"against", m.against},
          {"row", m.row},
          {"col", m.col},
          {"got_bits", m.got},
          {"want_bits", m.want},
          {"want_value", m.want_exact},
          {"combo", combo_name(map.combos()[t.first_call.combo])},
          {"tokens", t.first_call.tokens},
          {"set", t.first_call.set},
          {"row_offset", t.first_call.row_offset},
          {"plan", {{"algorithm", arfAlgorithmName(p.algorithm)},
                    {"inner", arfAlgorithmName(p.inner)},
                    {"grid", p.grid},
                    {"block", p.block},
                    {"num_kernels", p.num_kernels}}},
          {"text", m.describe(ref_dtype(args.dtype))}};
}

json combos_json(const DispatchMap& map, const Totals& t) {
  json out = json::array();
  for (size_t c = 0; c < map.combos().size(); ++c) {
    out.push_back({{"combo", combo_name(map.combos()[c])},
                   {"calls", c < t.calls_per_combo.size() ? t.calls_per_combo[c] : 0},
                   {"boundaries", map.boundaries(c)}});
  }
  return out;
}

}  // namespace

// ---- Totals ----------------------------------------------------------------------------------

void Totals::add_call(const CallSpec& call, const CallCheck& check, int64_t step, int graph) {
  ++calls;
  if (calls_per_combo.size() <= call.combo) calls_per_combo.resize(call.combo + 1, 0);
  ++calls_per_combo[call.combo];
  shapes.emplace(call.combo, call.tokens);
  wrong_elems += check.wrong_elems;
  cross_rank_elems += check.cross_rank_elems;
  if (check.ok()) return;
  ++bad_calls;
  if (has_first && first.call <= call.index) return;
  has_first = true;
  first = check.first;
  first_call = call;
  first_step = step;
  first_graph = graph;
}

void Totals::merge(const Totals& o) {
  steps += o.steps;
  calls += o.calls;
  graph_replays += o.graph_replays;
  wrong_elems += o.wrong_elems;
  cross_rank_elems += o.cross_rank_elems;
  bad_calls += o.bad_calls;
  if (o.has_first && (!has_first || o.first.call < first.call)) {
    has_first = true;
    first = o.first;
    first_call = o.first_call;
    first_step = o.first_step;
    first_graph = o.first_graph;
  }
  if (calls_per_combo.size() < o.calls_per_combo.size()) {
    calls_per_combo.resize(o.calls_per_combo.size(), 0);
  }
  for (size_t c = 0; c < o.calls_per_combo.size(); ++c) calls_per_combo[c] += o.calls_per_combo[c];
  shapes.insert(o.shapes.begin(), o.shapes.end());
}

size_t Totals::boundary_points_hit(const DispatchMap& map) const {
  size_t hit = 0;
  for (size_t c = 0; c < map.combos().size(); ++c) {
    for (int64_t t : map.boundaries(c)) hit += shapes.count({c, t});
  }
  return hit;
}

// ---- exit code -------------------------------------------------------------------------------

int exit_code(const StressArgs& args, const Totals& t, const RunFacts& f) {
  if (f.errors > 0) return kExitSetup;
  // After a timeout the outputs are garbage: never count them as a detection.
  if (f.timeouts > 0 || f.hang) return kExitTimeout;
  const bool wrong =
      t.wrong_elems > 0 || t.cross_rank_elems > 0 || f.cross_process_mismatched_steps > 0;
  if (args.expect_corruption) return wrong ? kExitOk : kExitWrong;
  return wrong ? kExitWrong : kExitOk;
}

// ---- text ------------------------------------------------------------------------------------

void print_header(const StressArgs& a, const DispatchMap& map, const std::string& variant) {
  std::string devices;
  for (int d : a.devices) {
    if (!devices.empty()) devices += ',';
    devices += std::to_string(d);
  }
  std::printf("# arfusion-stress (library build: %s)\n", variant.c_str());
  std::printf("# world %d on devices %s, %s, hidden %" PRId64 ", max_tokens %" PRId64
              ", seed %" PRIu64 ", skew up to %d us, verify %s, %s\n",
              a.world(), devices.c_str(), dtype_name(a.dtype), a.hidden, a.max_tokens, a.seed,
              a.skew_us, a.verify_gpu ? "gpu" : "host",
              a.num_graphs > 0 ? ("graphs " + std::to_string(a.num_graphs) + " x " +
                                  std::to_string(a.window) + " calls + eager").c_str()
                               : "eager");
  std::printf("# %zu combinations, %zu dispatch boundary points (both sides of every change of "
              "arfPlan's algorithm/inner/kernels/grid/block)\n",
              map.combos().size(), map.num_boundary_points());
  if (a.processes()) {
    std::printf("# transport ipc: this process is rank %d of %d (arfusion-run) on device %d; it "
                "checks its own outputs against the reference of every rank's inputs\n",
                a.process_rank, a.process_world, a.devices.front());
  }
  std::fflush(stdout);
}

void print_boundaries(const DispatchMap& map) {
  for (size_t c = 0; c < map.combos().size(); ++c) {
    std::printf("%-32s", combo_name(map.combos()[c]).c_str());
    for (int64_t t : map.boundaries(c)) {
      const PlanPoint& p = map.plan(c, t);
      std::printf(" %" PRId64 ":%s/g%d", t, arfAlgorithmName(p.algorithm), p.grid);
    }
    std::printf("\n");
  }
}

void print_progress(const Totals& t, double seconds) {
  std::printf("[%7.1f s] calls %" PRIu64 " (%.0f/s), shapes %zu, wrong %" PRIu64
              ", cross-rank %" PRIu64 "\n",
              seconds, t.calls, seconds > 0 ? static_cast<double>(t.calls) / seconds : 0.0,
              t.shapes.size(), t.wrong_elems, t.cross_rank_elems);
  std::fflush(stdout);
}

void print_result(const StressArgs& a, const DispatchMap& map, const Totals& t, const RunFacts& f) {
  const std::string verifier =
      f.verifier == "gpu" ? std::string("verifier gpu: check kernels vs a device reference")
                          : "verifier host: CPU reference, " + std::to_string(f.verify_threads) +
                                " threads";
  std::printf("# calls %" PRIu64 " in %" PRIu64 " steps (%" PRIu64 " graph replays), %.1f s, "
              "%.0f calls/s; verify waits %.1f s over all ranks (%s)\n",
              t.calls, t.steps, t.graph_replays, f.elapsed_seconds,
              f.elapsed_seconds > 0 ? static_cast<double>(t.calls) / f.elapsed_seconds : 0.0,
              f.verify_wait_seconds, verifier.c_str());
  std::printf("# shapes covered %zu (combination x tokens); boundary points %zu of %zu\n",
              t.shapes.size(), t.boundary_points_hit(map), map.num_boundary_points());
  for (size_t c = 0; c < map.combos().size(); ++c) {
    std::printf("#   %-32s %" PRIu64 " calls\n", combo_name(map.combos()[c]).c_str(),
                c < t.calls_per_combo.size() ? t.calls_per_combo[c] : 0);
  }
  std::printf("# wrong elements %" PRIu64 ", cross-rank mismatches %" PRIu64 ", bad calls %" PRIu64
              ", timeouts %" PRIu64 ", errors %" PRIu64 "%s\n",
              t.wrong_elems, t.cross_rank_elems, t.bad_calls, f.timeouts, f.errors,
              f.hang ? ", HANG" : "");
  if (t.has_first) {
    std::printf("# first bad: step %" PRId64 "%s, %s, plan %s\n#   %s\n", t.first_step,
                t.first_graph >= 0 ? (" (graph " + std::to_string(t.first_graph) + ")").c_str() : "",
                call_text(map, t.first_call).c_str(), plan_text(map, t.first_call).c_str(),
                t.first.describe(ref_dtype(a.dtype)).c_str());
  }
  if (f.cross_process) {
    std::printf("# across processes: %" PRIu64 " steps compared with every rank by hash, %" PRIu64
                " differ%s\n",
                f.cross_process_steps, f.cross_process_mismatched_steps,
                f.cross_process_mismatched_steps > 0
                    ? (" (first: step " + std::to_string(f.cross_process_first_step) + ", rank " +
                       std::to_string(f.cross_process_first_rank) + " vs rank 0)")
                          .c_str()
                    : "");
  }
  if (!f.first_error.empty()) std::printf("# first error: %s\n", f.first_error.c_str());
  const int code = exit_code(a, t, f);
  const char* verdict = code == kExitOk ? "PASS" : "FAIL";
  std::printf("%s%s (exit %d)\n", verdict,
              a.expect_corruption
                  ? (code == kExitOk ? ": negative control detected"
                                     : ": negative control NOT detected or not run cleanly")
                  : "",
              code);
  std::fflush(stdout);
}

// ---- JSON ------------------------------------------------------------------------------------

bool write_json(const std::string& path, const StressArgs& a, const DispatchMap& map,
                const Totals& t, const RunFacts& f) {
  json j = {{"tool", "arfusion-stress"},
            {"library_build", f.variant},
            {"command_line", a.command_line},
            {"devices", a.devices},
            {"world", a.world()},
            {"transport", a.processes() ? "ipc" : "local"},
            {"process_rank", a.processes() ? json(a.process_rank) : json(nullptr)},
            {"dtype", dtype_name(a.dtype)},
            {"hidden", a.hidden},
            {"max_tokens", a.max_tokens},
            {"seed", a.seed},
            {"skew_us", a.skew_us},
            {"graphs", a.num_graphs},
            {"window", a.window},
            {"expect_corruption", a.expect_corruption},
            {"calls", t.calls},
            {"steps", t.steps},
            {"graph_replays", t.graph_replays},
            {"elapsed_seconds", f.elapsed_seconds},
            {"setup_seconds", f.setup_seconds},
            {"verify_wait_seconds", f.verify_wait_seconds},
            {"verifier", f.verifier},
            {"verify_threads", f.verify_threads},
            {"shapes_covered", t.shapes.size()},
            {"boundary_points", map.num_boundary_points()},
            {"boundary_points_covered", t.boundary_points_hit(map)},
            {"combos", combos_json(map, t)},
            {"wrong_elements", t.wrong_elems},
            {"cross_rank_mismatches", t.cross_rank_elems},
            {"bad_calls", t.bad_calls},
            {"first_bad", first_bad_json(a, map, t)},
            {"timeouts", f.timeouts},
            {"errors", f.errors},
            {"hang", f.hang},
            {"first_error", f.first_error},
            {"cross_process",
             f.cross_process ? json{{"steps_compared", f.cross_process_steps},
                                    {"mismatched_steps", f.cross_process_mismatched_steps},
                                    {"first_step", f.cross_process_first_step},
                                    {"first_rank", f.cross_process_first_rank}}
                             : json(nullptr)},
            {"exit_code", exit_code(a, t, f)}};
  if (!f.git_commit.empty()) j["git_commit"] = f.git_commit;
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  if (!out) {
    std::fprintf(stderr, "arfusion-stress: cannot write %s\n", path.c_str());
    return false;
  }
  return true;
}

}  // namespace arf::stress
