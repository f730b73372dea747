// Local epilogue kernels for bf16 (second kernels of unfused and fallback levels 2 and 3).
#include "kernels/launch.cuh"

ARF_INSTANTIATE_LOCAL_EPILOGUE(__nv_bfloat16, arf::PatternGroup::kPlain)
#if !defined(ARF_DIAGNOSTIC_KERNEL_SUBSET)  // diagnostic variants: unquantized patterns only (launch.cu)
ARF_INSTANTIATE_LOCAL_EPILOGUE(__nv_bfloat16, arf::PatternGroup::kQuant)
ARF_INSTANTIATE_LOCAL_EPILOGUE(__nv_bfloat16, arf::PatternGroup::kQuantOnly)
#endif
