// Communicators, rank threads, streams and buffers of one run.
#include "session.h"

#include <algorithm>
#include <map>

#include "ops.h"
#include "process_group.h"

namespace arf::bench {

Session::~Session() {
  if (pool_ != nullptr) {
    pool_->run([&](int rank) {
      free_buffers(&ctx_.buffers[rank]);
      if (ctx_.streams[rank] != nullptr) cudaStreamDestroy(ctx_.streams[rank]);
    });
  }
  // The local transport allows destroying every rank from one thread, in any order.
  for (arfComm_t comm : ctx_.comms) {
    if (comm != nullptr) arfCommDestroy(comm);
  }
  pool_.reset();
}

std::string Session::open(const BenchArgs& args, const RankLayout& layout,
                          const arfCommConfig_t& config, int64_t capacity_elems,
                          int64_t scale_bytes, ProcessGroup* group) {
  ctx_.args = &args;
  ctx_.layout = layout;
  const int world = static_cast<int>(layout.devices.size());
  std::vector<arfComm_t> comms(world, nullptr);
  if (group != nullptr) {
    arfCommConfig_t mine = config;
    arfStatus_t st = arfCommConfigFromEnv(&mine);
    if (st == arfSuccess) st = arfCommInitRank(&comms[group->rank()], &mine);
    if (st != arfSuccess) {
      return std::string("arfCommInitRank: ") + arfGetStatusString(st) + ": " +
             arfGetLastErrorString();
    }
    pool_ = std::make_unique<RankPool>(group);
  } else {
    const arfStatus_t st = arfCommInitAll(comms.data(), world, layout.devices.data(), &config);
    if (st != arfSuccess) {
      return std::string("arfCommInitAll: ") + arfGetStatusString(st) + ": " +
             arfGetLastErrorString();
    }
    pool_ = std::make_unique<RankPool>(layout.devices);
  }
  ctx_.comms = comms;
  ctx_.pool = pool_.get();
  ctx_.streams.assign(world, nullptr);
  ctx_.buffers.resize(world);
  return make_streams_and_buffers(capacity_elems, scale_bytes);
}

std::string Session::make_streams_and_buffers(int64_t capacity_elems, int64_t scale_bytes) {
  const int world = ctx_.world();
  std::map<int, int> ranks_on;
  for (int dev : ctx_.layout.devices) ++ranks_on[dev];
  const OpDescriptor& op = op_descriptor(ctx_.args->op);
  const bool with_residual = op.residual;
  const int64_t set_bytes = capacity_elems * 2 * (with_residual ? 2 : 1);
  std::vector<int64_t> sets(world, 1);
  std::vector<std::string> errors(world);
  pool_->run([&](int rank) {
    // Non-blocking: no implicit ordering with the legacy stream, which other rank threads' graph
    // captures must not be joined to.
    cudaError_t err = cudaStreamCreateWithFlags(&ctx_.streams[rank], cudaStreamNonBlocking);
    if (err != cudaSuccess)
      errors[rank] = std::string("cudaStreamCreate: ") + cudaGetErrorString(err);
    sets[rank] = affordable_input_sets(set_bytes, ranks_on[ctx_.layout.devices[rank]]);
  });
  // Every rank asks before any allocates, so ranks sharing a GPU see the same free memory.
  pool_->share(&sets);
  pool_->share(&errors);
  // --input-buffer: one set, the communicator's input buffer (there is one per rank).
  const int num_sets =
      ctx_.args->input_buffer ? 1 : static_cast<int>(*std::min_element(sets.begin(), sets.end()));
  auto first_error = [&]() -> std::string {
    if (!pool_->channel_error().empty()) return pool_->channel_error();
    for (int r = 0; r < world; ++r) {
      if (!errors[r].empty()) return "rank " + std::to_string(r) + ": " + errors[r];
    }
    return "";
  };
  if (std::string why = first_error(); !why.empty()) return why;
  pool_->run([&](int rank) {
    errors[rank] =
        allocate_buffers(rank, capacity_elems, ctx_.args->hidden, ctx_.args->dtype, num_sets,
                         with_residual, ctx_.streams[rank], &ctx_.buffers[rank]);
    if (errors[rank].empty() && op.quant_variants) {
      errors[rank] = allocate_quant_buffers(capacity_elems, scale_bytes, ctx_.streams[rank],
                                            &ctx_.buffers[rank]);
    }
    if (errors[rank].empty() && ctx_.args->input_buffer) {
      errors[rank] = move_input_to_comm_buffer(ctx_.comms[rank], capacity_elems, ctx_.streams[rank],
                                               &ctx_.buffers[rank]);
    }
  });
  pool_->share(&errors);
  return first_error();
}

}  // namespace arf::bench
