// Makes a device current for one scope and restores the caller's device afterwards: the
// communicator's files that call CUDA on the rank's device (creation, teardown, the launch paths).
#pragma once

#include <cuda_runtime_api.h>

#include "base/cuda_check.h"

namespace arf {

// Makes `device` current for one call and restores the caller's device afterwards, so that one
// thread may drive several communicators (on different devices) without surprises.
class ScopedDevice {
 public:
  Status enter(int device) {
    ARF_CUDA_RETURN_IF_ERROR(cudaGetDevice(&previous_));
    if (previous_ != device) {
      ARF_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
      restore_ = true;
    }
    return Status::ok();
  }
  // A destructor cannot report; cudaSetDevice to a device that was current a moment ago fails only
  // if the runtime is already broken, which the next checked call will report.
  ~ScopedDevice() {
    if (restore_) (void)cudaSetDevice(previous_);
  }

 private:
  int previous_ = 0;
  bool restore_ = false;
};

}  // namespace arf
