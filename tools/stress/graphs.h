// --graphs: every window of the run (steps.h) captured into a CUDA graph on each local rank's
// stream. Per repeat, since a graph holds its communicator's state, and before any rank thread
// starts (capture launches nothing; instantiating and uploading may synchronize the device, which
// must not happen while a peer's collective spins). Call i of a window uses the rank's tensor slot
// i (buffers.h). The graph holds the library's calls and, unless the soak's kernels must stay off
// the rank streams (--co-resident), each call's overwrite kernel right behind it, as an engine's
// graph holds the layers around its collectives; the generate and check kernels stay outside
// (rank_loop.cc), since they carry the call index each replay's data comes from.
#pragma once

#include <cuda_runtime_api.h>

#include <string>
#include <vector>

#include "arfusion/arfusion.h"
#include "buffers.h"
#include "call_args.h"
#include "call_spec.h"
#include "kernels.h"

namespace arf::stress {

struct CaptureJob {
  arfComm_t comm = nullptr;
  RankBuffers* buffers = nullptr;
  RunConstants constants;
  uint32_t rank = 0;
  uint32_t world = 1;
  ForeignShape shape;
  bool overwrite_inside = true;  // false under --co-resident
};

// The graphs of every window, in window order, uploaded; "" on success, else why (the graphs made
// so far are in *out, for destroy_graphs).
std::string capture_windows(const CaptureJob& job, const std::vector<std::vector<CallSpec>>& windows,
                            std::vector<cudaGraphExec_t>* out);
void destroy_graphs(std::vector<cudaGraphExec_t>* graphs);

// A slot's tensors as the call builders take them (call_args.h).
TensorSet tensor_set(const Tensors& t);

}  // namespace arf::stress
