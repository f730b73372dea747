// ncclCommInitAll + ncclAllReduce (+ a world-1 arfusion epilogue) as the baseline column.
#include "nccl_baseline.h"

#include <cstdlib>

namespace arf::bench {

NcclBaseline::~NcclBaseline() {
  for (arfComm_t c : epilogue_comms_) arfCommDestroy(c);
  for (ncclComm_t c : comms_) api_->comm_destroy(c);
}

std::string NcclBaseline::nccl_error(ncclResult_t result) const {
  return std::string("NCCL: ") + api_->get_error_string(result);
}

std::string NcclBaseline::init(const RankLayout& layout, arfPattern_t pattern,
                               const arfCommConfig_t& config) {
  if (layout.virtual_ranks) return "ranks share a GPU (NCCL needs one rank per GPU)";
  std::string why;
  const nccl::Api* api = nccl::library(&why);
  if (api == nullptr) return why;
  if (api->comm_init_all == nullptr) return api->path + " lacks ncclCommInitAll";
  api_ = api;
  // Overwrite: a value inherited from the environment must not turn NVLink SHARP multicast on.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/1);
  const int world = static_cast<int>(layout.devices.size());
  comms_.resize(world);
  ncclResult_t result = api_->comm_init_all(comms_.data(), world, layout.devices.data());
  if (result != ncclSuccess) {
    comms_.clear();
    return "ncclCommInitAll: " + nccl_error(result);
  }
  label_ = pattern == arfPatternAllReduce ? "nccl" : "nccl_ar";
  if (pattern == arfPatternAllReduce) return "";
  epilogue_comms_.resize(world);
  for (int r = 0; r < world; ++r) {
    if (arfCommInitAll(&epilogue_comms_[r], 1, &layout.devices[r], &config) != arfSuccess) {
      epilogue_comms_.resize(r);  // keep the ones made, so the destructor frees them
      for (arfComm_t c : epilogue_comms_) arfCommDestroy(c);
      epilogue_comms_.clear();
      return "";  // the all-reduce alone still makes a column
    }
  }
  label_ = "nccl+epi";
  return "";
}

std::string NcclBaseline::describe() const {
  if (api_ == nullptr) return "NCCL not loaded";
  const int v = api_->version;
  // NCCL_VERSION_CODE is major*10000 + minor*100 + patch since 2.9.
  return api_->path + " version " + std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) +
         "." + std::to_string(v % 100) + ", NCCL_NVLS_ENABLE=0";
}

std::string NcclBaseline::enqueue(const BenchContext& ctx, const CallSpec& spec, int rank, int call,
                                  cudaStream_t stream) const {
  const RankBuffers& b = ctx.buffers[rank];
  const int set = call % b.num_sets();
  const ncclDataType_t type = b.dtype == arfFloat16 ? ncclFloat16 : ncclBfloat16;
  ncclResult_t result =
      api_->all_reduce(b.input[set], b.allreduce_out, static_cast<size_t>(spec.elems()), type,
                      ncclSum, comms_[rank], stream);
  if (result != ncclSuccess) return "ncclAllReduce: " + nccl_error(result);
  if (epilogue_comms_.empty() || spec.pattern == arfPatternAllReduce) return "";
  CallSpec epilogue = spec;
  epilogue.algorithm = arfAlgoAuto;
  arfFusedArgs_t args = make_fused_args(epilogue, b, set);
  args.input = b.allreduce_out;  // the epilogue of the NCCL sum: world 1 reduces nothing
  arfStatus_t st = arfFusedAllReduce(epilogue_comms_[rank], &args, stream);
  if (st == arfSuccess) return "";
  return std::string("epilogue: ") + arfGetStatusString(st) + ": " + arfGetLastErrorString();
}

std::string NcclBaseline::health(int rank) const {
  if (epilogue_comms_.empty()) return "";
  arfStatus_t st = arfCommGetAsyncError(epilogue_comms_[rank]);
  return st == arfSuccess ? "" : std::string("epilogue: ") + arfGetStatusString(st);
}

}  // namespace arf::bench
