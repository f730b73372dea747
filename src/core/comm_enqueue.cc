// The launch of the custom algorithms' kernels (communicator.h, launch_checked), in the enqueue
// order ranks sharing a GPU keep: kernel i of every rank before kernel i+1 of any rank, and a call
// returns once every device mate has enqueued it (architecture.md, "Ranks sharing a GPU"), except
// in the co-resident test mode (docs/protocol.md), which leaves that return wait out.
#include "core/communicator.h"

#include <algorithm>
#include <string>

#include "base/cuda_check.h"
#include "core/scoped_device.h"
#include "launch/launch.h"

namespace arf {

Status Communicator::launch_checked(const Plan& plan, Pattern pattern, const KernelParams& params,
                                    cudaStream_t stream) {
  // One rank per GPU (facts_.nccl): no virtual-rank enqueue order to keep.
  if (plan.algorithm == Algorithm::kNccl) return launch_nccl(plan, pattern, params, stream);
  // A captured call enqueues nothing now (its graph launch does, in the caller's order), so it
  // takes no turn; waiting here would also deadlock one thread capturing every rank in turn.
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  const bool ordered = group_->shares_device(rank_);
  if (ordered) ARF_CUDA_RETURN_IF_ERROR(cudaStreamIsCapturing(stream, &capture));
  const bool take_turn = ordered && capture == cudaStreamCaptureStatusNone;
  // Ranks sharing a GPU may share hardware queues: kernel i of every rank must be enqueued before
  // kernel i+1 of any rank, or a spinning kernel can sit in the queue ahead of the peer kernel it
  // waits for. Counted per kernel, so the two kernels of an unfused call are ordered too.
  const uint64_t call_index = collective_calls_enqueued_.load(std::memory_order_relaxed);
  auto wait_turn = [&]() -> Status {
    if (!take_turn) return Status::ok();
    Status turn = group_->wait_enqueue_turn(rank_, kernels_enqueued_, timeout_seconds_);
    if (!turn.is_ok()) {
      // The ranks no longer issue the same sequence of calls: the collective is broken.
      failure_.note_lost_call(call_index);
      return fail(Status(turn.code(),
                         turn.message() + " (this rank's call " + std::to_string(call_index) + ")"));
    }
    return turn;
  };
  auto mark_enqueued = [&] {
    if (take_turn) group_->mark_enqueued(rank_, ++kernels_enqueued_);
  };
  ARF_RETURN_IF_ERROR(wait_turn());
  ScopedDevice scoped;
  ARF_RETURN_IF_ERROR(scoped.enter(device_));
  ARF_RETURN_IF_ERROR(launch(plan, pattern, facts_.dtype, params, stream, [&] {
    mark_enqueued();
    return wait_turn();
  }));
  mark_enqueued();
  collective_calls_enqueued_.fetch_add(1, std::memory_order_relaxed);
  last_plan_ = plan;
  // Return only once every mate has enqueued this call too. Streams may share a hardware FIFO: a
  // kernel the caller enqueues after this call (stream-ordered behind our spinning kernel) must
  // not enter a shared FIFO ahead of a mate's kernel of this call, or it blocks the FIFO head
  // while our kernel waits for the mate's, which sits behind it (local.h). The co-resident test
  // mode leaves it out (its callers enqueue nothing else on the rank streams), and so does the
  // negative-control build that shows the soak catches its absence.
#if !defined(ARF_NEGATIVE_CONTROL_NO_RETURN_WAIT)
  if (!facts_.co_resident_test) ARF_RETURN_IF_ERROR(wait_turn());
#endif
  return stream_check_.after_call(stream);
}

}  // namespace arf
