// Create / destroy cycles: a communicator created and destroyed again and again (an engine that
// rebuilds its groups) must not grow what the process holds. Every test forks its ranks
// (ipc_test_util.h: the parent never initialises CUDA; children die with it, PR_SET_PDEATHSIG;
// every wait is bounded and the parent SIGKILLs what outlives its deadline). The ipc ranks meet
// between cycles through a SharedBoard (fault_util.h) to measure while neither holds a
// communicator.
//
//   IpcLifecycle       ARF_LIFECYCLE_CYCLES (default 1000) create / call / destroy cycles at world
//                      2 over ipc: no growth of descriptors, threads, mappings or device memory
//                      between cycle 10 and the last.
//   LocalLifecycle     the same over the local transport with arfCommInitAll (world 2 and 8
//                      virtual ranks, one thread per rank), in one forked child.
//
// Devices: ARF_TEST_DEVICES as everywhere in tests/ipc (rank r on entry r % n), default all on
// device 0, where device memory is device-wide: the tests measure it only at points where every
// process of the test is quiescent (board barriers). Memory figures are wrong if something else
// uses the GPU meanwhile (run these alone).
// NCCL: the children set ARF_NCCL=0 unless ARF_NCCL is already set (default_environment), so a
// two-GPU run does not build an NCCL communicator in every cycle.
// ARF_FAULTS_NEGATIVE_CONTROL=1 makes the tests leak every cycle's communicator: they must then
// FAIL (descriptors, mappings, device memory), which shows the checks can see a leak.
//
// Run on one H200 (all ranks on device 0, sm_90 build of dc1b35f; these tests were then one file
// with those of test_ipc_kill.cc and test_ipc_two_comms.cc, whose 11 tests passed in ~90 s at 1000
// cycles): ipc world 2 took 13 ms per cycle, local world 2 7.5 ms, world 8 19 ms. With the
// negative control the lifecycle tests saw +60 descriptors, +80 mappings and -240 MiB over 20
// cycles: all failed.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "ipc/fault_util.h"
#include "ipc/ipc_rank.h"
#include "ipc/ipc_test_util.h"

namespace arf::ipc_test {
namespace {

// Cycle 10 is the baseline (one-time costs paid: modules, the driver's pools, the library's
// statics); the last cycle is compared with it.
constexpr int kBaselineCycle = 10;
constexpr int kMinCycles = 2 * kBaselineCycle;
constexpr int kDefaultCycles = 1000;
// Small capacity: a cycle costs its init, not a large memset. One workspace is still ~5 MiB
// (world 2) - 20 MiB (world 8), so a workspace leaked per cycle shows after a few cycles.
constexpr size_t kLifecycleMaxTokens = 64;
// Growth allowed between the baseline and the last cycle (constant, whatever the cycle count):
//  - descriptors 2, threads 1: a lazily opened driver node or helper thread is one-time; any
//    per-cycle leak exceeds it after 3 cycles (at least 10 are compared);
//  - mappings 16: the driver maps host staging memory on its own;
//  - device memory 8 MiB: two processes' 2 MiB sub-allocation chunks (cudaMalloc of small call
//    buffers) may sit differently at the two points; a leaked workspace is >= 5 MiB PER CYCLE;
//  - resident host memory 64 MiB: malloc's arenas; catches >= 64 KiB per cycle at 1000 cycles
//    (e.g. leaked pinned or memfd pages), and nothing smaller at a quick run's cycle count.
constexpr int kLifecycleFdSlack = 2;
constexpr int kLifecycleThreadSlack = 1;
constexpr int kLifecycleMapsSlack = 16;
constexpr int64_t kLifecycleDeviceSlackBytes = 8 * kMiB;
constexpr int64_t kLifecycleRssSlackKiB = 64 * 1024;
// The parent's backstop per cycle (a cycle takes tens of milliseconds; each wait in it is bounded
// by the communicator's own timeouts, far below this).
constexpr double kSecondsPerCycleDeadline = 0.5;

double lifecycle_deadline(int cycles) { return 120.0 + kSecondsPerCycleDeadline * cycles; }

// Calls of the cycles, in turn: every algorithm, both unquantized patterns.
std::vector<CallSpec> lifecycle_specs() {
  return {spec_of(arfPatternAllReduce, arfAlgoOneshotLamport, 4),
          spec_of(arfPatternResidualRmsNorm, arfAlgoOneshotPull, 8),
          spec_of(arfPatternAllReduce, arfAlgoTwoshot, 64),
          spec_of(arfPatternResidualRmsNorm, arfAlgoAuto, 1),
          spec_of(arfPatternResidualRmsNorm, arfAlgoUnfused, 3)};
}

struct CycleTimes {
  double init = 0, call = 0, destroy = 0, worst = 0;
  int worst_cycle = -1;
  void add(int cycle, double i, double c, double d) {
    init += i;
    call += c;
    destroy += d;
    if (i + c + d > worst) worst = i + c + d, worst_cycle = cycle;
  }
  std::string text(int cycles) const {
    char buf[256];
    std::snprintf(buf, sizeof(buf),
                  "%d cycles: %.2f ms per cycle (init %.2f, call %.2f, destroy %.2f), slowest "
                  "cycle %d: %.2f ms",
                  cycles, 1e3 * (init + call + destroy) / cycles, 1e3 * init / cycles,
                  1e3 * call / cycles, 1e3 * destroy / cycles, worst_cycle, 1e3 * worst);
    return buf;
  }
};

// Growth between the baseline (after cycle kBaselineCycle) and the last cycle, each check naming
// what it would catch (the slack constants above).
void check_growth(RankContext& ctx, const ResourceSnapshot& base, const ResourceSnapshot& end,
                  int cycles, bool with_device) {
  const int compared = cycles - kBaselineCycle;
  ctx.note("after cycle " + std::to_string(kBaselineCycle) + ": " + base.summary() +
           "\nafter cycle " + std::to_string(cycles) + ": " + end.summary());
  const int fd_growth = static_cast<int>(end.fds.size()) - static_cast<int>(base.fds.size());
  if (fd_growth > kLifecycleFdSlack) {
    ctx.fail(std::to_string(fd_growth) + " more open descriptors after " +
             std::to_string(compared) + " more cycles (slack " +
             std::to_string(kLifecycleFdSlack) + "):\n" + fd_difference(base, end));
  }
  if (end.threads - base.threads > kLifecycleThreadSlack) {
    ctx.fail(std::to_string(end.threads - base.threads) + " more threads after " +
             std::to_string(compared) + " more cycles (slack " +
             std::to_string(kLifecycleThreadSlack) + ")");
  }
  if (end.maps - base.maps > kLifecycleMapsSlack) {
    ctx.fail(std::to_string(end.maps - base.maps) + " more memory mappings after " +
             std::to_string(compared) + " more cycles (slack " +
             std::to_string(kLifecycleMapsSlack) + ")");
  }
  if (end.rss_kib - base.rss_kib > kLifecycleRssSlackKiB) {
    ctx.fail("resident host memory grew by " + fmt_mib((end.rss_kib - base.rss_kib) * 1024) +
             " over " + std::to_string(compared) + " cycles (slack " +
             fmt_mib(kLifecycleRssSlackKiB * 1024) + ")");
  }
  if (with_device) {
    const int64_t lost =
        static_cast<int64_t>(base.device_free) - static_cast<int64_t>(end.device_free);
    if (lost > kLifecycleDeviceSlackBytes) {
      ctx.fail("free device memory fell by " + fmt_mib(lost) + " over " +
               std::to_string(compared) + " cycles (slack " +
               fmt_mib(kLifecycleDeviceSlackBytes) + ")");
    }
  }
}

// The id of cycle c: the group's id with its bytes 8..15 replaced by a hash of c (bytes 0..15
// key the ipc rendezvous), so both ranks derive the same fresh id for every cycle.
arfUniqueId cycle_id(const arfUniqueId& base, int cycle) {
  arfUniqueId id = base;
  const uint64_t h = mix_seed(0xC1C1E5ull, static_cast<uint64_t>(cycle));
  std::memcpy(id.internal + 8, &h, sizeof(h));
  return id;
}

// Board words of the lifecycle test.
enum LifecycleWord : int { kWordBaseStart = 0, kWordBaseTaken, kWordEndStart, kWordEndTaken };

void lifecycle_ipc_rank(RankContext& ctx, const SharedBoard& board, int cycles, uint64_t seed) {
  default_environment();
  if (!init_device(ctx)) return;
  const cudaStream_t stream = make_stream(ctx);
  if (stream == nullptr) return;
  arfCommConfig_t config = ipc_config(ctx, arfBFloat16);
  config.max_tokens = kLifecycleMaxTokens;
  const std::vector<CallSpec> specs = lifecycle_specs();
  std::vector<std::unique_ptr<CallBuffers>> buffers;  // allocated once, reused by every cycle
  for (const CallSpec& s : specs) {
    buffers.push_back(CallBuffers::create(ctx, s, arfBFloat16));
    if (buffers.back() == nullptr) return;
  }
  ResourceSnapshot base, end;
  CycleTimes times;
  int done = 0;
  for (int c = 0; c < cycles; ++c) {
    const size_t k = static_cast<size_t>(c) % specs.size();
    const CallData data = make_call_data(specs[k], ctx.world(), arfBFloat16, mix_seed(seed, c));
    if (!buffers[k]->upload(ctx, data, stream)) break;
    config.id = cycle_id(ctx.slot().id, c);
    const Clock::time_point t0 = Clock::now();
    const arfComm_t comm = init_comm(ctx, config);
    if (comm == nullptr) break;
    const Clock::time_point t1 = Clock::now();
    bool ok = true;
    if (const arfStatus_t st = buffers[k]->launch(comm, stream); st != arfSuccess) {
      ctx.fail("cycle " + std::to_string(c) + " [" + specs[k].label() + "]: " + status_text(st));
      ok = false;
    }
    RankOutputs got;
    ok = ok && buffers[k]->clobber_inputs(ctx, stream) && buffers[k]->download(ctx, stream, &got);
    if (ok) {
      if (const arfStatus_t async = arfCommGetAsyncError(comm); async != arfSuccess) {
        ctx.fail("cycle " + std::to_string(c) + ": arfCommGetAsyncError: " + status_text(async));
        ok = false;
      } else if (const std::string e = check_outputs(specs[k], arfBFloat16, data, got);
                 !e.empty()) {
        ctx.fail("cycle " + std::to_string(c) + " [" + specs[k].label() + "]:\n" + e);
      }
      // A sample of cycles compared bitwise across ranks (every cycle would flood the report).
      if (c < 5 || c == cycles - 1) {
        publish_outputs(ctx, "cycle " + std::to_string(c) + " ", c, got);
      }
    }
    const Clock::time_point t2 = Clock::now();
    // Destroy must succeed on a healthy communicator (destroy_comm fails the rank otherwise).
    if (!negative_control()) destroy_comm(ctx, comm);
    const Clock::time_point t3 = Clock::now();
    times.add(c, std::chrono::duration<double>(t1 - t0).count(),
              std::chrono::duration<double>(t2 - t1).count(),
              std::chrono::duration<double>(t3 - t2).count());
    if (!ok || ctx.failed()) break;
    done = c + 1;
    if (done % 100 == 0 && ctx.rank() == 0) ctx.note(times.text(done));
    // Both processes between cycles, neither holding a communicator, when either measures.
    if (done == kBaselineCycle || done == cycles) {
      const int start_word = done == kBaselineCycle ? kWordBaseStart : kWordEndStart;
      ResourceSnapshot* into = done == kBaselineCycle ? &base : &end;
      if (!board.arrive_and_wait(ctx, start_word, ctx.world(), kBoardSeconds, "between cycles") ||
          !snapshot(ctx, true, into)) {
        break;
      }
      // Nobody allocates (next cycle) or frees (teardown) before both have measured.
      if (!board.arrive_and_wait(ctx, done == kBaselineCycle ? kWordBaseTaken : kWordEndTaken,
                                 ctx.world(), kBoardSeconds, "snapshot taken")) {
        break;
      }
    }
  }
  buffers.clear();
  cuda_ok(ctx, cudaStreamDestroy(stream), "cudaStreamDestroy");
  ctx.note(times.text(std::max(done, 1)));
  ctx.publish_text("cycles", std::to_string(done));
  if (done != cycles) {
    ctx.fail("stopped after " + std::to_string(done) + " of " + std::to_string(cycles) +
             " cycles");
    board.raise_abort(ctx.rank());
    return;
  }
  check_growth(ctx, base, end, cycles, /*with_device=*/true);
}

TEST(IpcLifecycle, CreateCallDestroyCyclesWorld2LeakNothing) {
  const int cycles = env_cycles(kDefaultCycles, kMinCycles);
  const auto board = SharedBoard::create();
  ASSERT_NE(board, nullptr);
  const uint64_t seed = test_seed();
  const Clock::time_point start = Clock::now();
  const auto results = run_processes(
      test_name(), one_group(2),
      [&](RankContext& ctx) { lifecycle_ipc_rank(ctx, *board, cycles, seed); },
      lifecycle_deadline(cycles));
  const double seconds = seconds_since(start);
  std::printf("IpcLifecycle: %d cycles at world 2 in %s (%.2f ms per cycle)\n", cycles,
              fmt_seconds(seconds).c_str(), 1e3 * seconds / cycles);
  expect_all_passed(results);
  for (const ProcessResult& r : results) {
    EXPECT_EQ(r.texts.count("cycles") ? r.texts.at("cycles") : "", std::to_string(cycles))
        << "rank " << r.slot.rank << " did not complete every cycle";
  }
  // Six sampled cycles, each with at least one output.
  expect_identical_hashes(results, 6);
}

// The host figures of this process, and free device memory summed over the distinct devices of
// `devices` (each synchronized first): virtual ranks may sit on several GPUs.
bool local_snapshot(RankContext& ctx, const std::vector<int>& devices, ResourceSnapshot* out) {
  if (!snapshot(ctx, false, out)) return false;
  std::vector<int> seen;
  for (int d : devices) {
    if (std::find(seen.begin(), seen.end(), d) != seen.end()) continue;
    seen.push_back(d);
    size_t free = 0, total = 0;
    if (!cuda_ok(ctx, cudaSetDevice(d), "cudaSetDevice") ||
        !cuda_ok(ctx, cudaDeviceSynchronize(), "cudaDeviceSynchronize before a snapshot") ||
        !cuda_ok(ctx, cudaMemGetInfo(&free, &total), "cudaMemGetInfo")) {
      return false;
    }
    out->device_free += free;
    out->device_total += total;
  }
  return true;
}

// The local transport: every rank in one process, created by arfCommInitAll, each rank's call on
// its own thread (virtual ranks sharing a GPU must be driven concurrently: arfusion.h). Runs in a
// forked child, as every test of this binary, so the parent stays CUDA-free.
void lifecycle_local(RankContext& ctx, int world, int cycles, uint64_t seed,
                     const std::string& scenario) {
  default_environment();
  if (!init_device(ctx)) return;
  std::vector<int> devices;
  std::vector<RankContext> ranks;  // per-thread failure records (RankContext is not thread-safe)
  for (int r = 0; r < world; ++r) {
    devices.push_back(device_for_rank(r));
    ranks.emplace_back(RankSlot{0, r, world, {}}, 1, scenario + " (local rank)", -1);
  }
  const std::vector<CallSpec> specs = lifecycle_specs();
  std::vector<cudaStream_t> streams(world, nullptr);
  std::vector<std::vector<std::unique_ptr<CallBuffers>>> buffers(world);
  for (int r = 0; r < world; ++r) {
    if (!cuda_ok(ctx, cudaSetDevice(devices[r]), "cudaSetDevice")) return;
    streams[r] = make_stream(ranks[r]);
    if (streams[r] == nullptr) return;
    for (const CallSpec& s : specs) {
      buffers[r].push_back(CallBuffers::create(ranks[r], s, arfBFloat16));
      if (buffers[r].back() == nullptr) return;
    }
  }
  arfCommConfig_t config;
  arfCommConfigInit(&config);
  config.max_tokens = kLifecycleMaxTokens;
  config.max_hidden = kMaxHidden;
  config.dtype = arfBFloat16;
  config.timeout_seconds = kDeviceTimeoutSeconds;
  config.init_timeout_seconds = kInitTimeoutSeconds;
  ResourceSnapshot base, end;
  CycleTimes times;
  int done = 0;
  std::vector<arfComm_t> comms(world, nullptr);
  for (int c = 0; c < cycles; ++c) {
    const size_t k = static_cast<size_t>(c) % specs.size();
    const CallData data = make_call_data(specs[k], world, arfBFloat16, mix_seed(seed, c));
    const Clock::time_point t0 = Clock::now();
    if (const arfStatus_t st = arfCommInitAll(comms.data(), world, devices.data(), &config);
        st != arfSuccess) {
      ctx.fail("cycle " + std::to_string(c) + ": arfCommInitAll: " + status_text(st));
      break;
    }
    const Clock::time_point t1 = Clock::now();
    std::vector<RankOutputs> got(world);
    std::vector<std::string> errors(world);
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        RankContext& rc = ranks[r];
        if (!cuda_ok(rc, cudaSetDevice(devices[r]), "cudaSetDevice") ||
            !buffers[r][k]->upload(rc, data, streams[r])) {
          return;
        }
        if (const arfStatus_t st = buffers[r][k]->launch(comms[r], streams[r]); st != arfSuccess) {
          rc.fail("cycle " + std::to_string(c) + " [" + specs[k].label() + "]: " + status_text(st));
          return;
        }
        if (!buffers[r][k]->clobber_inputs(rc, streams[r]) ||
            !buffers[r][k]->download(rc, streams[r], &got[r])) {
          return;
        }
        if (const arfStatus_t async = arfCommGetAsyncError(comms[r]); async != arfSuccess) {
          rc.fail("cycle " + std::to_string(c) + ": arfCommGetAsyncError: " + status_text(async));
          return;
        }
        errors[r] = check_outputs(specs[k], arfBFloat16, data, got[r]);
      });
    }
    for (std::thread& t : threads) t.join();
    bool ok = true;
    for (int r = 0; r < world; ++r) {
      ok = ok && !ranks[r].failed();
      if (!errors[r].empty()) {
        ranks[r].fail("cycle " + std::to_string(c) + " [" + specs[k].label() + "]:\n" + errors[r]);
      }
      // Cross-rank bitwise identity (the reference check allows tolerance on norm_out).
      if (r > 0 && !ranks[r].failed() && !ranks[0].failed() &&
          (got[r].allreduce != got[0].allreduce || got[r].residual_out != got[0].residual_out ||
           got[r].norm_out != got[0].norm_out)) {
        ranks[r].fail("cycle " + std::to_string(c) + ": outputs differ from rank 0's");
      }
    }
    const Clock::time_point t2 = Clock::now();
    for (int r = 0; r < world; ++r) {
      // All ranks' work is done (every thread synchronized its stream): destroy from one thread.
      if (const arfStatus_t st = negative_control() ? arfSuccess : arfCommDestroy(comms[r]);
          st != arfSuccess) {
        ctx.fail("cycle " + std::to_string(c) + ": arfCommDestroy(rank " + std::to_string(r) +
                 "): " + status_text(st));
      }
      comms[r] = nullptr;
    }
    const Clock::time_point t3 = Clock::now();
    times.add(c, std::chrono::duration<double>(t1 - t0).count(),
              std::chrono::duration<double>(t2 - t1).count(),
              std::chrono::duration<double>(t3 - t2).count());
    bool any_failed = ctx.failed();
    for (const RankContext& rc : ranks) any_failed |= rc.failed();
    if (!ok || any_failed) break;
    done = c + 1;
    if (done % 100 == 0) ctx.note(times.text(done));
    if (done == kBaselineCycle && !local_snapshot(ctx, devices, &base)) break;
    if (done == cycles && !local_snapshot(ctx, devices, &end)) break;
  }
  for (int r = 0; r < world; ++r) {
    buffers[r].clear();
    if (streams[r] != nullptr) cuda_ok(ctx, cudaStreamDestroy(streams[r]), "cudaStreamDestroy");
  }
  for (const RankContext& rc : ranks) {
    if (rc.failed()) ctx.fail("local rank " + std::to_string(rc.rank()) + " failed (above)");
  }
  ctx.note(times.text(std::max(done, 1)));
  ctx.publish_text("cycles", std::to_string(done));
  if (done != cycles) {
    ctx.fail("stopped after " + std::to_string(done) + " of " + std::to_string(cycles) +
             " cycles");
    return;
  }
  check_growth(ctx, base, end, cycles, /*with_device=*/true);
}

class LocalLifecycle : public ::testing::TestWithParam<int> {};

TEST_P(LocalLifecycle, CreateCallDestroyCyclesLeakNothing) {
  const int world = GetParam();
  const int cycles = env_cycles(kDefaultCycles, kMinCycles);
  const uint64_t seed = test_seed();
  const std::string scenario = test_name();
  const Clock::time_point start = Clock::now();
  const auto results = run_processes(
      scenario, one_group(1),
      [&](RankContext& ctx) { lifecycle_local(ctx, world, cycles, seed, scenario); },
      lifecycle_deadline(cycles));
  const double seconds = seconds_since(start);
  std::printf("LocalLifecycle: %d cycles at world %d in %s (%.2f ms per cycle)\n", cycles, world,
              fmt_seconds(seconds).c_str(), 1e3 * seconds / cycles);
  expect_all_passed(results);
  ASSERT_EQ(results.size(), 1u);
  EXPECT_EQ(results[0].texts.count("cycles") ? results[0].texts.at("cycles") : "",
            std::to_string(cycles));
}

INSTANTIATE_TEST_SUITE_P(Local, LocalLifecycle, ::testing::Values(2, 8),
                         [](const auto& info) { return "ws" + std::to_string(info.param); });

}  // namespace
}  // namespace arf::ipc_test
