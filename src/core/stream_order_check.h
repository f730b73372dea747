// Debug check of the one-stream-at-a-time rule (arfusion.h, "Streams"): a communicator's calls must
// be ordered on one stream at a time; two streams running calls concurrently interleave the
// protocol's epochs and Lamport buffers, which corrupts results without any wait expiring.
//
// Enabled when ARF_DEBUG_CHECKS=1 is in the environment at communicator creation (off by default:
// it costs an event record per call). The check is conservative: a call on a stream other than the
// previous call's while that call is still running is refused (arfInvalidArgument, before launch,
// the communicator stays usable), even if the caller ordered the two streams with an event; debug
// runs should synchronize or stay on one stream when switching. Captured calls are not checked
// (their order is the graph launches', which the caller owns).
#pragma once

#include <cuda_runtime_api.h>

#include "base/status.h"

namespace arf {

class StreamOrderCheck {
 public:
  StreamOrderCheck() = default;
  StreamOrderCheck(const StreamOrderCheck&) = delete;
  StreamOrderCheck& operator=(const StreamOrderCheck&) = delete;
  ~StreamOrderCheck();

  static bool requested_by_environment();  // ARF_DEBUG_CHECKS=1

  // Creates the completion event on the current device when `enabled`. Call once, on the
  // communicator's device.
  Status init(bool enabled);
  bool enabled() const { return done_ != nullptr; }

  // Before anything is validated or enqueued: refuses a call on another stream while the previous
  // call has not completed.
  Status before_call(cudaStream_t stream) const;
  // After the call's kernels are enqueued (on the communicator's device): remembers its stream.
  Status after_call(cudaStream_t stream);

 private:
  cudaEvent_t done_ = nullptr;  // recorded after each checked call
  cudaStream_t last_stream_ = nullptr;
  bool has_last_ = false;
};

}  // namespace arf
