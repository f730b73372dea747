// What one call does on one rank's stream, in the order the soak enqueues it:
//
//   enqueue_inputs    ring rows [offset, offset + tokens) of the call's set -> the work slot
//   (the collective)  arfFusedAllReduce on the work slot (eager), or inside a graph replay
//   consumer          overwrite input, residual and gamma (device.h says why)
//   enqueue_outputs   outputs -> the step's output slot (pinned host, or device with --verify gpu)
//
// and the setup steps that must precede the first collective: graph capture and a warm-up of every
// operation the soak enqueues (so nothing is loaded or allocated lazily once peers spin).
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "arfusion/arfusion.h"
#include "device.h"
#include "resources.h"
#include "schedule.h"

namespace arf::stress {

// The call's arguments on a work slot, from the call kit's builder (no aliasing: every output is
// its own buffer; out_a is allreduce_out or residual_out, out_b norm_out).
arfFusedArgs_t call_args(const CallSpec& call, const WorkSlot& work, arfDataType_t dtype,
                         int64_t hidden);

// 16-bit words of output a call produces (1 or 2 arrays of tokens x hidden).
int64_t call_output_words(const CallSpec& call, int64_t hidden);
// Offsets (in words) of each call's outputs inside a host slot, and the total.
std::vector<int64_t> step_output_offsets(const StepSpec& step, int64_t hidden, int64_t* total);

// Stream-ordered device-to-device copies from the rings into the work slot.
void enqueue_inputs(const RankResources& rr, const WorkSlot& work, const CallSpec& call,
                    const ResourceOptions& options);
ConsumerTargets consumer_targets(const CallSpec& call, const WorkSlot& work, int64_t hidden);
// Copies of the call's outputs to the output slot at host + offset (in words); the slot is pinned
// host memory or device memory (--verify gpu).
void enqueue_outputs(const RankResources& rr, const WorkSlot& work, const CallSpec& call,
                     uint16_t* host, int64_t hidden);

// Captures one graph per window on every rank (call + consumer per call, work slot i for call i),
// instantiates and uploads them. From one thread, rank after rank: captured calls enqueue nothing,
// so no rank waits for another. Throws StressError.
void capture_graphs(Resources& resources, const std::vector<std::vector<CallSpec>>& windows);

// Runs every kind of non-collective work once per rank and waits for it: loads the consumer
// kernel and the copy paths before any collective is in flight. Throws StressError.
void warm_up(Resources& resources);

}  // namespace arf::stress
