// StepPipeline (step_pipeline.h): a step becomes a job on its world-th submission, jobs reach the
// workers in push order, a checked step frees its slot for the step `depth` later, and close
// reports the steps only some ranks submitted.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "step_pipeline.h"

namespace arf::stress {
namespace {

StepSpec step_spec(int64_t step) {
  StepSpec s;
  s.step = step;
  return s;
}

TEST(StepPipeline, LastSubmissionMakesTheJobAndReleaseFreesTheSlot) {
  StepPipeline pipe(/*depth=*/2, /*world=*/3);
  EXPECT_TRUE(pipe.slot_free(0));
  EXPECT_TRUE(pipe.slot_free(1));
  EXPECT_FALSE(pipe.slot_free(2));  // slot 0 again: step 0 is not checked yet
  EXPECT_FALSE(pipe.arrive(step_spec(0)).has_value());
  EXPECT_FALSE(pipe.arrive(step_spec(0)).has_value());
  const auto job = pipe.arrive(step_spec(0));
  ASSERT_TRUE(job.has_value());
  EXPECT_EQ(job->slot, 0);
  EXPECT_EQ(job->spec.step, 0);
  pipe.release(*job);
  EXPECT_TRUE(pipe.slot_free(2));
  EXPECT_FALSE(pipe.slot_free(4));
  EXPECT_EQ(pipe.steps_verified(), 1u);
}

TEST(StepPipeline, WorkersSeeJobsInPushOrderAndCloseCountsPartialSteps) {
  StepPipeline pipe(/*depth=*/4, /*world=*/2);
  std::vector<int64_t> seen;
  std::thread worker([&] {
    pipe.run_worker([&](const StepPipeline::Job& job) {
      seen.push_back(job.spec.step);
      pipe.release(job);
    });
  });
  for (int64_t step = 0; step < 3; ++step) {
    for (int rank = 0; rank < 2; ++rank) {
      if (auto job = pipe.arrive(step_spec(step))) pipe.push(std::move(*job));
    }
  }
  EXPECT_FALSE(pipe.arrive(step_spec(3)).has_value());  // one rank of two: left partial
  pipe.close_queue();
  worker.join();
  EXPECT_EQ(seen, (std::vector<int64_t>{0, 1, 2}));
  EXPECT_EQ(pipe.steps_verified(), 3u);
  EXPECT_EQ(pipe.partial_steps(), 1u);
}

}  // namespace
}  // namespace arf::stress
