// Entry point of the GPU suite. Without a visible CUDA device it prints why and exits 77, which
// CMake maps to "skipped" (SKIP_RETURN_CODE), so a machine without a GPU never reports a pass.
//
// CUDA_MODULE_LOADING is deliberately left at its default (lazy since CUDA 12.2), as engines run:
// loading a kernel on its first launch may wait for the context to go idle, which deadlocks while a
// peer's kernel spins waiting for this rank. The library must load its kernels up front; running
// the suite with CUDA_MODULE_LOADING=EAGER would hide that.
//
// CUDA_DEVICE_MAX_CONNECTIONS is raised to 32 unless set (as arfusion-bench does): with the default
// 8 hardware queues, virtual ranks' streams can share a FIFO, where work one rank enqueues behind
// its own collective (a captured graph's next node) blocks a peer's collective: a deadlock no
// multi-GPU deployment has. The library orders its own enqueues for that case anyway.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

int main(int argc, char** argv) {
  // Listing the suite needs no GPU.
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--gtest_list_tests") == 0) {
      ::testing::InitGoogleTest(&argc, argv);
      return RUN_ALL_TESTS();
    }
  }
  setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);  // before the first CUDA call
  // Sandwich calls are refused until their GPU tests pass (validate.cc): these are those tests.
  setenv("ARF_EXPERIMENTAL_SANDWICH", "1", /*overwrite=*/0);
  // The nccl algorithm's communicators (multi-GPU runs): no NVLink multicast unless asked for.
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no CUDA device visible — GPU tests not run (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return 77;
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
