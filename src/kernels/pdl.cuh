// Programmatic dependent launch (arfCommConfig_t::programmatic_launch). With it, a kernel of ours
// may be scheduled while the kernel before it on the stream is still finishing, and the kernel
// after it (launched with the attribute by whoever launches it) may start its prologue before ours
// has exited. Every kernel of ours therefore:
//  - calls pdl_wait() before its first global memory access: griddepcontrol.wait returns once every
//    prerequisite grid has COMPLETED and its memory is visible (the producer of our inputs, and our
//    own previous call, whose protocol state we are about to read);
//  - calls pdl_launch_dependents() as its last statement, after every output store: a dependent
//    that waits (griddepcontrol.wait) sees our outputs final; one that does not wait was not
//    launched with the attribute and is ordered by the stream as usual.
// Both instructions are no-ops for a kernel launched without the attribute. sm_90+.
#pragma once

namespace arf {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

}  // namespace arf
