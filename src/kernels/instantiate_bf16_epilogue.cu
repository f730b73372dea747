// The unfused path's standalone epilogue kernels for bf16.
#include "kernels/launch.cuh"

template arf::Status arf::launch_local_epilogue<__nv_bfloat16>(int, int, arf::Pattern, const arf::KernelParams&,
                                                     cudaStream_t);
template arf::Status arf::preload_local_epilogue<__nv_bfloat16>();
