// The unfused path's standalone epilogue kernels for fp16.
#include "kernels/launch.cuh"

template arf::Status arf::launch_local_epilogue<__half>(int, int, arf::Pattern, const arf::KernelParams&,
                                                     cudaStream_t);
template arf::Status arf::preload_local_epilogue<__half>();
