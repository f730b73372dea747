// Kernels of oneshot_pull for bf16: world sizes 1, 2, 4, 8 x patterns allreduce, residual_rmsnorm.
#include "kernels/launch.cuh"

ARF_INSTANTIATE_ALGORITHM(__nv_bfloat16, arf::Algorithm::kOneshotPull)
