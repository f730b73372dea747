// CUDA runtime error -> Status, with the failing expression and location in the message.
#pragma once

#include <cuda_runtime_api.h>

#include <string>

#include "base/status.h"

namespace arf {

inline Status cuda_status(cudaError_t err, const char* expr, const char* file, int line) {
  if (err == cudaSuccess) return Status::ok();
  return Status(arfCudaError, std::string(file) + ":" + std::to_string(line) + ": " + expr +
                                  " failed: " + cudaGetErrorString(err));
}

}  // namespace arf

#define ARF_CUDA_RETURN_IF_ERROR(expr) \
  ARF_RETURN_IF_ERROR(::arf::cuda_status((expr), #expr, __FILE__, __LINE__))
