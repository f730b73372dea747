// ARF_HD marks functions shared by host and device code (protocol arithmetic, quant formats), so the
// CPU tests and the reference run the very code the kernels run.
#pragma once

#if defined(__CUDACC__)
#define ARF_HD __host__ __device__
#else
#define ARF_HD
#endif
