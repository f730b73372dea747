// Entry point of arfusion_ipc_tests. Before gtest runs, a forked child asks CUDA how many devices
// there are (the parent itself must never initialise CUDA: its children could not use CUDA after
// fork). Without a device the binary prints "arfusion_ipc_tests: SKIPPED: no CUDA device" and
// exits 77, which ctest reports as skipped (SKIP_RETURN_CODE), so a CPU-only machine never
// reports a pass. A malformed ARF_TEST_DEVICES, or one naming a device that is not there, is an
// error (exit 1), not a skip.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "ipc/ipc_test_util.h"

namespace arf::ipc_test {
namespace {

// "" when ARF_TEST_DEVICES is unset or a well-formed list; else what is wrong with it.
std::string devices_env_error() {
  const char* env = std::getenv("ARF_TEST_DEVICES");
  if (env == nullptr || *env == '\0') return "";
  std::string item;
  const std::string text = std::string(env) + ",";
  for (char ch : text) {
    if (ch != ',') {
      item += ch;
      continue;
    }
    char* end = nullptr;
    const long v = std::strtol(item.c_str(), &end, 10);
    if (item.empty() || *end != '\0' || v < 0 || v >= 1024) {
      return "ARF_TEST_DEVICES='" + std::string(env) + "': '" + item +
             "' is not a device ordinal (expected e.g. \"0,1\")";
    }
    item.clear();
  }
  return "";
}

// Runs cudaGetDeviceCount in a child (the parent stays CUDA-free). Returns 77 (skip) without a
// device, 1 when the probe itself broke or ARF_TEST_DEVICES names a missing device, 0 to go on.
int probe_devices() {
  const auto results = run_processes(
      "device probe", {RankSlot{}},
      [](RankContext& ctx) {
        int count = 0;
        const cudaError_t err = cudaGetDeviceCount(&count);
        ctx.publish_text("count", std::to_string(err == cudaSuccess ? count : 0));
        ctx.publish_text("error", err == cudaSuccess ? "" : std::string(cudaGetErrorName(err)) +
                                                                ": " + cudaGetErrorString(err));
      },
      kShortDeadlineSeconds);
  const ProcessResult& probe = results.at(0);
  if (!probe.passed() || probe.texts.count("count") == 0) {
    std::printf("arfusion_ipc_tests: the device probe (cudaGetDeviceCount in a child) did not "
                "finish: %s\n", probe.outcome().c_str());
    return 1;
  }
  const int count = std::atoi(probe.texts.at("count").c_str());
  if (count <= 0) {
    const std::string why = probe.texts.count("error") ? probe.texts.at("error") : "";
    std::printf("arfusion_ipc_tests: SKIPPED: no CUDA device (%s)\n",
                why.empty() ? "0 devices" : why.c_str());
    return 77;
  }
  std::string used;
  for (int d : listed_devices()) {
    if (d >= count) {
      std::printf("arfusion_ipc_tests: ARF_TEST_DEVICES names device %d; %d visible\n", d, count);
      return 1;
    }
    if (!used.empty()) used += ',';
    used += std::to_string(d);
  }
  std::printf("arfusion_ipc_tests: %d CUDA device(s) visible; ranks on devices {%s} (rank r on "
              "entry r %% n)\n", count, used.c_str());
  return 0;
}

}  // namespace
}  // namespace arf::ipc_test

int main(int argc, char** argv) {
  // Listing the tests needs no GPU (and no probe).
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--gtest_list_tests") == 0) {
      ::testing::InitGoogleTest(&argc, argv);
      return RUN_ALL_TESTS();
    }
  }
  if (const std::string e = arf::ipc_test::devices_env_error(); !e.empty()) {
    std::printf("arfusion_ipc_tests: %s\n", e.c_str());
    return 1;
  }
  if (const int probe = arf::ipc_test::probe_devices(); probe != 0) return probe;
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
