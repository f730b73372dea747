// The run-and-verify half of the harness (harness.h): enqueue a batch of calls on every rank,
// then compare every output with the CPU reference, across ranks, and with a forced-unfused rerun.
#include <gtest/gtest.h>

#include <algorithm>
#include <barrier>
#include <chrono>
#include <cstdio>
#include <memory>
#include <random>
#include <thread>

#include "gpu/edge_values.h"
#include "gpu/harness.h"

namespace arf::test {
namespace {

// Reports at most this many mismatching (call, rank, output) triples per check, so one broken
// kernel does not bury the log.
constexpr size_t kMaxReported = 12;
constexpr double kSlowBatchSeconds = 2.0;

void report(const std::vector<std::vector<std::string>>& per_call_errors) {
  size_t reported = 0, total = 0;
  for (const auto& errors : per_call_errors) {
    for (const std::string& e : errors) {
      ++total;
      if (reported < kMaxReported) {
        ADD_FAILURE() << e;
        ++reported;
      }
    }
  }
  if (total > reported) ADD_FAILURE() << "... and " << total - reported << " more mismatches";
}

std::string where(size_t call, const CallSpec& spec, int rank) {
  return "call " + std::to_string(call) + " [" + spec.label() + "] rank " + std::to_string(rank) +
         ": ";
}

// RunOptions::input_in_buffer: the call with its input moved into the communicator's input buffer.
arfStatus_t launch_from_input_buffer(arfComm_t comm, const CallBuffers& b, arfDataType_t dtype,
                                     cudaStream_t stream, bool clobber) {
  void* buffer = nullptr;
  size_t capacity = 0;
  const arfStatus_t got = arfCommGetInputBuffer(comm, &buffer, &capacity);
  if (got != arfSuccess) return got;
  const size_t bytes = static_cast<size_t>(b.spec().elems()) * 2;
  if (bytes > capacity) {
    ADD_FAILURE() << "input of " << bytes << " bytes exceeds the input buffer's " << capacity;
    return arfInvalidArgument;
  }
  cuda_ok(cudaMemcpyAsync(buffer, b.input(), bytes, cudaMemcpyDeviceToDevice, stream), "copy into the input buffer");
  callkit::CallTensors t = b.tensors();
  t.input = buffer;
  const arfStatus_t st = callkit::launch_call(comm, b.spec(), dtype, t, stream);
  if (st == arfSuccess && clobber) {
    cuda_ok(cudaMemsetAsync(buffer, callkit::kClobberByte, bytes, stream), "clobber the input buffer");
  }
  return st;
}

}  // namespace

std::vector<CallResult> run_calls(const World& world, const std::vector<CallSpec>& specs,
                                  const std::vector<CallData>& data, const RunOptions& options) {
  const int world_size = world.size();
  const size_t num_calls = specs.size();
  std::vector<CallResult> results(num_calls, CallResult(world_size));
  std::vector<std::vector<std::unique_ptr<CallBuffers>>> buffers(world_size);
  const uint64_t skew_seed = test_seed();
  HangGuard guard(options.hang_seconds, "a batch of " + std::to_string(num_calls) + " calls");
  std::vector<double> call_seconds(world_size, 0);
  // Every rank allocates and uploads before any rank launches: with virtual ranks on one GPU, a
  // cudaMalloc of one rank must not race a peer's kernel that spins waiting for it.
  std::barrier ready(world_size);
  world.run_ranks([&](int r) {
    const cudaStream_t stream = world.stream(r);
    for (size_t c = 0; c < num_calls; ++c) {
      buffers[r].push_back(std::make_unique<CallBuffers>(world.device(r), specs[c], world.dtype()));
      buffers[r][c]->upload(data[c], r, stream);
    }
    const bool uploaded = cuda_ok(cudaStreamSynchronize(stream), "upload");
    ready.arrive_and_wait();
    if (!uploaded) return;
    std::mt19937_64 rng(mix_seed(skew_seed, r));
    const auto start = std::chrono::steady_clock::now();
    for (size_t c = 0; c < num_calls; ++c) {
      if (options.max_skew_us > 0) {
        std::this_thread::sleep_for(std::chrono::microseconds(rng() % (options.max_skew_us + 1)));
      }
      const bool in_buffer = options.input_in_buffer && options.input_in_buffer(r, c);
      const arfStatus_t st =
          in_buffer ? launch_from_input_buffer(world.comm(r), *buffers[r][c], world.dtype(), stream,
                                               options.clobber_inputs)
                    : buffers[r][c]->launch(world.comm(r), stream);
      if (st != arfSuccess) ADD_FAILURE() << where(c, specs[c], r) << status_text(st);
      if (!options.clobber_inputs) continue;
      // Stream-ordered right behind this rank's call, with no coordination between the ranks:
      // where virtual ranks' streams share a hardware queue, keeping this overwrite out of the
      // way of a peer's call is the library's job (local.h, enqueue order).
      buffers[r][c]->clobber_inputs(stream);
    }
    cuda_ok(cudaStreamSynchronize(stream), "stream after calls");
    call_seconds[r] =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const arfStatus_t async = arfCommGetAsyncError(world.comm(r));
    if (async != arfSuccess) {
      ADD_FAILURE() << "rank " << r << " async error: " << status_text(async);
    }
    for (size_t c = 0; c < num_calls; ++c) results[c][r] = buffers[r][c]->download(stream);
  });
  // Not a failure (timing is not a contract here), but a batch this slow means ranks waited on
  // each other for far longer than any call takes: worth knowing when a later check fails.
  const double slowest = *std::max_element(call_seconds.begin(), call_seconds.end());
  if (slowest > kSlowBatchSeconds) {
    std::printf("[   NOTE   ] %zu calls took %.2f s on the slowest rank (first: %s)\n", num_calls,
                slowest, specs[0].label().c_str());
  }
  return results;
}

std::string sandwich_mismatch(const ref::FusedInputs& in, const ref::FusedOutputs& want,
                              const uint16_t* residual_out, const uint16_t* norm_out) {
  std::string msg = ref::first_sandwich_residual_mismatch(in, want, residual_out);
  if (norm_out == nullptr) return msg;
  std::vector<double> alt;
  const std::vector<double> exact = ref::norm_exact_of(in, residual_out, &alt);
  const std::string norm = ref::first_norm_mismatch(norm_out, exact, in.hidden, in.dtype,
                                                    in.norm_rounding != 0 ? &alt : nullptr);
  if (!norm.empty()) msg += (msg.empty() ? "" : "; ") + norm;
  return msg;
}

void check_calls(const World& world, const std::vector<CallSpec>& specs,
                 const std::vector<CallData>& data, const std::vector<CallResult>& results) {
  const DType dtype = ref_dtype(world.dtype());
  std::vector<std::vector<std::string>> errors(specs.size());
  parallel_for(static_cast<int64_t>(specs.size()), [&](int64_t c) {
    const CallSpec& spec = specs[c];
    const ref::FusedInputs in = callkit::reference_inputs(spec, world.dtype(), data[c]);
    const ref::FusedOutputs want = ref::reference_fused(in);
    const int64_t n = spec.elems();
    // NaN matches NaN against the reference only for the NaN/Inf content (edge_values.h); anywhere
    // else a NaN output is wrong, and a reference with NaN would be a data bug that lets
    // norm_within_tolerance excuse a poisoned (NaN) norm_out, so it fails the call.
    const bool nan_content = spec.content == Content::kNanInf;
    if (reference_has_nan(want, dtype) != nan_content) {
      errors[c].push_back(where(c, spec, 0) + (nan_content
                                                    ? "NaN/Inf data without a NaN reference output"
                                                    : "reference output has NaN (test data bug)"));
      return;
    }
    auto vs_reference = [&](const std::vector<uint16_t>& got, const std::vector<uint16_t>& ref_out,
                            const char* what) {
      return nan_content
                 ? first_nan_aware_mismatch(got.data(), ref_out.data(), n, spec.hidden, dtype, what)
                 : ref::first_bitwise_mismatch(got.data(), ref_out.data(), n, spec.hidden, what);
    };
    for (int r = 0; r < world.size(); ++r) {
      const RankOutputs& got = results[c][r];
      const RankOutputs& rank0 = results[c][0];
      auto fail = [&](const std::string& msg) {
        if (!msg.empty()) errors[c].push_back(where(c, spec, r) + msg);
      };
      if (!spec.has_norm()) {
        if (got.allreduce.size() != static_cast<size_t>(n)) {
          fail("allreduce_out not downloaded");
          continue;
        }
        fail(vs_reference(got.allreduce, want.allreduce, "allreduce_out vs reference"));
        if (r > 0) {
          fail(ref::first_bitwise_mismatch(got.allreduce.data(), rank0.allreduce.data(), n,
                                           spec.hidden, "allreduce_out vs rank 0"));
        }
        continue;
      }
      if (got.residual_out.size() != static_cast<size_t>(n) ||
          got.norm_out.size() != static_cast<size_t>(n)) {
        fail("outputs not downloaded");
        continue;
      }
      if (spec.post_norm) {
        // Within the contract given the kernel's own h; bitwise against the unfused path
        // (run_and_check) and across ranks (below).
        fail(sandwich_mismatch(in, want, got.residual_out.data(), got.norm_out.data()));
      } else {
        fail(vs_reference(got.residual_out, want.residual_out, "residual_out vs reference"));
        // NaN-aware already (NaN only where the reference is NaN, +-Inf exact); the check above
        // keeps the reference NaN-free for every other content.
        fail(ref::first_norm_mismatch(got.norm_out.data(), want.norm_exact, spec.hidden, dtype,
                                      &want.norm_alt));
      }
      // Across ranks raw bits, NaN payloads included: every rank runs the same operations in the
      // same order on the same bits.
      if (r > 0) {
        fail(ref::first_bitwise_mismatch(got.residual_out.data(), rank0.residual_out.data(), n,
                                         spec.hidden, "residual_out vs rank 0"));
        fail(ref::first_bitwise_mismatch(got.norm_out.data(), rank0.norm_out.data(), n,
                                         spec.hidden, "norm_out vs rank 0"));
      }
    }
  });
  report(errors);
}

void check_identical(const std::vector<CallSpec>& specs, const std::vector<CallResult>& a,
                     const std::vector<CallResult>& b, const char* what) {
  std::vector<std::vector<std::string>> errors(specs.size());
  for (size_t c = 0; c < specs.size(); ++c) {
    const int64_t n = specs[c].elems();
    for (size_t r = 0; r < a[c].size(); ++r) {
      const std::pair<const std::vector<uint16_t>*, const std::vector<uint16_t>*> outputs[] = {
          {&a[c][r].allreduce, &b[c][r].allreduce},
          {&a[c][r].residual_out, &b[c][r].residual_out},
          {&a[c][r].norm_out, &b[c][r].norm_out}};
      const char* names[] = {"allreduce_out", "residual_out", "norm_out"};
      for (int k = 0; k < 3; ++k) {
        const auto& [x, y] = outputs[k];
        if (x->empty() && y->empty()) continue;
        if (x->size() != static_cast<size_t>(n) || y->size() != static_cast<size_t>(n)) {
          errors[c].push_back(where(c, specs[c], r) + what + ": " + names[k] + " missing");
          continue;
        }
        const std::string msg = ref::first_bitwise_mismatch(x->data(), y->data(), n,
                                                             specs[c].hidden, names[k]);
        if (!msg.empty()) errors[c].push_back(where(c, specs[c], r) + what + ": " + msg);
      }
    }
  }
  report(errors);
}

void run_and_check(const World& world, const std::vector<CallSpec>& specs,
                   const RunOptions& options, uint64_t salt) {
  const std::vector<CallData> data =
      make_all_call_data(specs, world.size(), world.dtype(), mix_seed(test_seed(), salt));
  const std::vector<CallResult> results = run_calls(world, specs, data, options);
  check_calls(world, specs, data, results);
  if (::testing::Test::HasFailure()) return;  // a rerun would only repeat the noise

  // The numerics contract makes every algorithm bitwise equal to the unfused path.
  std::vector<CallSpec> unfused = specs;
  bool any_fused = false;
  for (CallSpec& s : unfused) {
    if (s.flat || s.algorithm == arfAlgoUnfused) continue;
    s.algorithm = arfAlgoUnfused;
    any_fused = true;
  }
  if (!any_fused) return;
  const std::vector<CallResult> unfused_results = run_calls(world, unfused, data, options);
  if (::testing::Test::HasFailure()) return;  // the unfused run itself failed: already reported
  check_identical(specs, results, unfused_results, "fused vs unfused");
}

}  // namespace arf::test
