// Kernels of twoshot for fp16: world sizes 1, 2, 4, 8 x patterns allreduce, residual_rmsnorm.
#include "kernels/launch.cuh"

ARF_INSTANTIATE_ALGORITHM(__half, arf::Algorithm::kTwoshot)
