// The NCCL baseline column: ncclAllReduce over communicators made in-process by ncclCommInitAll,
// one per rank on distinct GPUs. For the fused op it is followed by arfusion's own epilogue on a
// world-1 communicator per rank ("nccl+epi": the 3-kernel fallback a serving engine would run);
// if that communicator cannot be made, the column times the all-reduce alone ("nccl_ar").
#pragma once

#include <string>
#include <vector>

#include "context.h"
#include "export/tool_api.h"

namespace arf::bench {

class NcclBaseline {
 public:
  NcclBaseline() = default;
  ~NcclBaseline();
  NcclBaseline(const NcclBaseline&) = delete;
  NcclBaseline& operator=(const NcclBaseline&) = delete;

  // Loads NCCL (the library's loader, nccl::library: $ARF_NCCL_LIBRARY or libnccl.so.2), forces NCCL_NVLS_ENABLE=0 (no NVLink multicast objects: arfusion never creates them, and the baseline must not either) and creates
  // the communicators. Returns "" or why the column is skipped. Call from the main thread.
  std::string init(const RankLayout& layout, arfPattern_t pattern, const arfCommConfig_t& config);

  const std::string& label() const { return label_; }
  std::string describe() const;  // library path and version, for the header

  // Enqueues one baseline call of `spec` for this rank, reading input set call % sets.
  // Graph-capture safe (NCCL and arfusion both are).
  std::string enqueue(const BenchContext& ctx, const CallSpec& spec, int rank, int call,
                      cudaStream_t stream) const;
  // Device-side error of the epilogue communicator, or "".
  std::string health(int rank) const;

 private:
  std::string nccl_error(ncclResult_t result) const;

  const nccl::Api* api_ = nullptr;  // set by a successful load
  std::vector<ncclComm_t> comms_;
  std::vector<arfComm_t> epilogue_comms_;  // empty for nccl_ar
  std::string label_;
};

}  // namespace arf::bench
