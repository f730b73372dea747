#include "core/stream_order_check.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "base/cuda_check.h"

namespace arf {
namespace {

bool capturing(cudaStream_t stream) {
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
  return cudaStreamIsCapturing(stream, &status) == cudaSuccess && status != cudaStreamCaptureStatusNone;
}

std::string stream_name(cudaStream_t stream) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%p", static_cast<void*>(stream));
  return buf;
}

}  // namespace

StreamOrderCheck::~StreamOrderCheck() {
  if (done_ != nullptr) cudaEventDestroy(done_);
}

bool StreamOrderCheck::requested_by_environment() {
  const char* value = std::getenv("ARF_DEBUG_CHECKS");
  return value != nullptr && std::strcmp(value, "1") == 0;
}

Status StreamOrderCheck::init(bool enabled) {
  if (!enabled || done_ != nullptr) return Status::ok();
  ARF_CUDA_RETURN_IF_ERROR(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  return Status::ok();
}

Status StreamOrderCheck::before_call(cudaStream_t stream) const {
  if (done_ == nullptr || !has_last_ || stream == last_stream_ || capturing(stream)) return Status::ok();
  const cudaError_t previous = cudaEventQuery(done_);
  if (previous == cudaErrorNotReady) {
    return Status(arfInvalidArgument,
                  "ARF_DEBUG_CHECKS: call on stream " + stream_name(stream) +
                      " while this rank's previous call on stream " + stream_name(last_stream_) +
                      " has not completed; a communicator's calls must be ordered on one stream at "
                      "a time (arfusion.h, Streams)");
  }
  if (previous != cudaSuccess) ARF_CUDA_RETURN_IF_ERROR(previous);
  return Status::ok();
}

Status StreamOrderCheck::after_call(cudaStream_t stream) {
  if (done_ == nullptr || capturing(stream)) return Status::ok();
  ARF_CUDA_RETURN_IF_ERROR(cudaEventRecord(done_, stream));
  last_stream_ = stream;
  has_last_ = true;
  return Status::ok();
}

}  // namespace arf
