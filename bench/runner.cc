// The sweep: shapes from the arguments, capacity from the shapes, one row per shape with one cell
// per column, printed as it completes (as nccl-tests does), JSON at the end.
#include "runner.h"

#include <algorithm>
#include <memory>
#include <cstdio>
#include <cstdlib>
#include <ctime>

#include "measure.h"
#include "nccl_baseline.h"
#include "ops.h"
#include "process_group.h"
#include "quant_measure.h"
#include "report.h"
#include "session.h"
#include "tune.h"

namespace arf::bench {
namespace {

constexpr int64_t kCopyBytes = int64_t{1} << 30;  // large enough that L2 plays no part
// Under arfusion-run: how long one host collective (barrier, vote, results) may wait for a peer
// process. Generous: a peer may be computing a large CPU reference. A peer that exits is seen at
// once, not after this.
constexpr double kHostTimeoutSeconds = 300;

arfCommConfig_t comm_config(const BenchArgs& args, const std::vector<CallSpec>& shapes) {
  arfCommConfig_t config;
  arfCommConfigInit(&config);
  int64_t max_tokens = 1, max_row = 8;
  for (const CallSpec& s : shapes) {
    max_tokens = std::max(max_tokens, s.num_tokens);
    max_row = std::max(max_row, s.hidden);
  }
  config.max_tokens = static_cast<size_t>(args.max_tokens > 0 ? args.max_tokens : max_tokens);
  config.max_hidden = static_cast<size_t>(max_row);
  config.dtype = args.dtype;
  config.programmatic_launch = args.pdl ? 1 : 0;
  config.max_ctas = args.max_ctas;
  return config;
}

int64_t capacity_elems(const std::vector<CallSpec>& shapes) {
  int64_t elems = 8;
  for (const CallSpec& s : shapes) elems = std::max(elems, s.elems());
  return elems;
}

void describe_run(RunHeader* header) {
  header->version = std::to_string(ARF_VERSION_MAJOR) + "." + std::to_string(ARF_VERSION_MINOR);
  const char* commit = std::getenv("ARF_GIT_COMMIT");
  header->git_commit = commit != nullptr ? commit : "";
  char date[64];
  std::time_t now = std::time(nullptr);
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S%z", std::localtime(&now));
  header->date = date;
}

// NCCL times only ranks on distinct GPUs: virtual ranks would serialise NCCL's kernels on one
// device and measure nothing a deployment runs.
void setup_nccl(const BenchArgs& args, const arfCommConfig_t& config, NcclBaseline* nccl,
                RunHeader* header) {
  const std::optional<arfPattern_t> pattern = op_descriptor(args.op).nccl_baseline;
  if (!pattern || header->layout.devices.size() < 2) return;
  if (header->processes) {
    header->nccl_note = "NCCL column skipped: the baseline creates its communicators in one "
                        "process (the `nccl` algorithm column, -a nccl, runs under arfusion-run)";
    return;
  }
  std::string why = nccl->init(header->layout, *pattern, config);
  if (!why.empty()) {
    header->nccl_note = "NCCL column skipped: " + why;
    return;
  }
  header->nccl_label = nccl->label();
  header->nccl_note = "NCCL column '" + nccl->label() + "': " + nccl->describe();
}

void measure_copy_bandwidth(BenchContext& ctx, RunHeader* header) {
  std::string why;
  ctx.pool->run([&](int rank) {
    if (rank == 0) {
      header->copy_gbps =
          copy_bandwidth_gbps(kCopyBytes, ctx.streams[0], &header->copy_bytes, &why);
    }
  });
  if (!why.empty())
    std::fprintf(stderr, "arfusion-bench: copy bandwidth not measured: %s\n", why.c_str());
}

// --tune-out: this run's key (world, rank sharing, dtype, plain or quant patterns, hidden), its
// entry merged into the file, and the summary. "" or why not.
std::string write_tune_table(const BenchArgs& args, const RunHeader& header,
                             const std::vector<Row>& rows) {
  const TuningGroup group = *op_descriptor(args.op).tune_group;
  const bool quant = group == TuningGroup::kQuant;
  const TuningKey key{static_cast<int>(header.layout.devices.size()),
                      sharing_of(header.layout.max_ranks_per_device),
                      args.dtype == arfFloat16 ? DType::kFp16 : DType::kBf16,
                      group,
                      static_cast<int>(args.hidden)};
  std::string why;
  const std::optional<TuningEntry> entry =
      quant ? derive_quant_entry(rows, key, &why) : derive_entry(rows, key, &why);
  if (!entry) return why;
  const std::string machine = header.layout.info.empty() ? "" : header.layout.info[0].name;
  why = write_tuned_entry(args.tune_out, *entry, machine, header.date, header.git_commit);
  if (why.empty()) std::printf("%s", tune_summary(rows, *entry, args.tune_out).c_str());
  return why;
}

}  // namespace

int run_bench(const BenchArgs& args) {
  // Before any CUDA call, as the runtime reads it when it creates a context. Each stream is bound
  // to one of this many hardware queues (default 8); virtual ranks whose streams share one can
  // deadlock until the bounded wait expires: rank A's next kernel, queued behind A's spinning
  // kernel, blocks the peer kernel that A waits for (src/transport/local.h). 32, the most the
  // driver allows, makes a shared queue unlikely for up to 8 ranks (not guaranteed: the driver
  // assigns queues). A value set by the user stays.
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);  // nccl algorithm: no NVLink multicast
  RunHeader header;
  std::string why;
  // Declared before the session, so the host channel outlives the rank thread that uses it.
  const std::unique_ptr<ProcessGroup> group = ProcessGroup::from_env(kHostTimeoutSeconds, &why);
  if (why.empty()) {
    why = group != nullptr ? resolve_process_layout(args, *group, &header.layout)
                           : resolve_layout(args, &header.layout);
  }
  if (!why.empty()) {
    std::fprintf(stderr, "arfusion-bench: error: %s%s\n",
                 group != nullptr ? ("rank " + std::to_string(group->rank()) + ": ").c_str() : "",
                 why.c_str());
    return 2;
  }
  header.processes = group != nullptr;
  const bool reporter = group == nullptr || group->rank() == 0;
  const OpDescriptor& op = op_descriptor(args.op);
  const std::vector<CallSpec> shapes = op.shapes(args);
  const arfCommConfig_t config = comm_config(args, shapes);
  Session session;
  why = session.open(args, header.layout, config, capacity_elems(shapes),
                     op.quant_variants ? quant_scale_capacity(shapes) : 0, group.get());
  if (!why.empty()) {
    std::fprintf(stderr, "arfusion-bench: error: %s\n", why.c_str());
    return 2;
  }
  BenchContext& ctx = session.context();
  header.num_input_sets = ctx.buffers[ctx.local_rank()].num_sets();
  NcclBaseline nccl;  // destroyed before the session: its communicators are independent of ours
  setup_nccl(args, config, &nccl, &header);
  if (measures_copy_bandwidth(op, static_cast<int>(header.layout.devices.size()))) {
    measure_copy_bandwidth(ctx, &header);
  }
  describe_run(&header);

  std::vector<std::string> columns = op.columns(args);
  if (!header.nccl_label.empty()) columns.push_back(header.nccl_label);
  Report report(args, header, columns);
  report.set_quiet(!reporter);
  report.print_header();
  const TimingConfig cfg{args.iters, args.warmup_iters, args.graph_replays, args.repeats};
  uint64_t calls = 0;
  std::string stopped;
  for (const CallSpec& spec : shapes) {
    report.add_row(op.measure_row(ctx, header.nccl_label.empty() ? nullptr : &nccl, spec, cfg,
                                  &calls, &stopped));
    if (!stopped.empty()) break;
  }
  report.set_stopped(stopped);
  report.print_footer();
  if (!args.json_path.empty() && reporter) {
    why = report.write_json(args.json_path);
    if (!why.empty()) {
      std::fprintf(stderr, "arfusion-bench: error: %s\n", why.c_str());
      return 1;
    }
  }
  if (!args.tune_out.empty() && reporter) {
    // A sweep that stopped early or found wrong elements must not become a table.
    if (!stopped.empty()) {
      why = "the sweep stopped early: " + stopped;
    } else if (!report.all_passed()) {
      why = "a measurement failed or a check found wrong elements";
    } else {
      why = write_tune_table(args, header, report.rows());
    }
    if (!why.empty()) {
      std::fprintf(stderr, "arfusion-bench: error: --tune-out %s: %s\n", args.tune_out.c_str(),
                   why.c_str());
      return 1;
    }
  }
  return report.all_passed() ? 0 : 1;
}

int print_dry_run(const BenchArgs& args) {
  const OpDescriptor& op = op_descriptor(args.op);
  const std::vector<CallSpec> shapes = op.shapes(args);
  const arfCommConfig_t config = comm_config(args, shapes);
  std::printf("# dry run: op %s, dtype %s, %zu shapes, capacity %zu tokens x %zu hidden\n",
              op.name, dtype_name(args.dtype), shapes.size(), config.max_tokens,
              config.max_hidden);
  std::printf("# columns:");
  for (const std::string& name : op.columns(args)) std::printf(" %s", name.c_str());
  std::printf("\n# iters %d, warmup %d, cudagraph %d, check %d\n", args.iters, args.warmup_iters,
              args.graph_replays, args.check);
  for (const CallSpec& s : shapes) {
    if (op.quant_variants) {
      std::printf("%-26s ",
                  quant_variant_label({s.pattern, s.scale_layout, s.scale_format}).c_str());
    }
    std::printf("%12lld tokens x %6lld = %12lld elements\n", static_cast<long long>(s.num_tokens),
                static_cast<long long>(s.hidden), static_cast<long long>(s.elems()));
  }
  return 0;
}

}  // namespace arf::bench
