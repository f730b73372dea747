// oneshot_pull kernels for bf16, plain patterns: world sizes 1, 2, 4, 8 x vectors per thread 1, 2, 4.
#include "kernels/launch.cuh"

ARF_INSTANTIATE_ALGORITHM(__nv_bfloat16, arf::Algorithm::kOneshotPull, arf::PatternGroup::kPlain)
