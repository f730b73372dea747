// Local epilogue kernels for fp16 (second kernels of unfused and fallback levels 2 and 3).
#include "kernels/launch.cuh"

ARF_INSTANTIATE_LOCAL_EPILOGUE(__half, arf::PatternGroup::kPlain)
ARF_INSTANTIATE_LOCAL_EPILOGUE(__half, arf::PatternGroup::kQuant)
ARF_INSTANTIATE_LOCAL_EPILOGUE(__half, arf::PatternGroup::kQuantOnly)
