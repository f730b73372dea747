// arf::bit_cast<To>(from): the one bit cast of host and device code, the object representation of
// `from` read as a To of the same size (float <-> uint32_t for the exact IEEE arithmetic of the
// quantized formats, the packed half pairs of a 32-bit word). std::bit_cast's builtin, which nvcc
// also compiles in device code (std::bit_cast itself is a host constexpr function there); the CUDA
// packed half types (__half2, __nv_bfloat162) have user-provided copies, so they are not trivially
// copyable and go through memcpy of the value, which stays in registers.
#pragma once

#include <cstring>
#include <type_traits>

#include "base/host_device.h"

namespace arf {

template <typename To, typename From>
  requires(sizeof(To) == sizeof(From) && std::is_trivially_copyable_v<To> && std::is_trivially_copyable_v<From>)
ARF_HD constexpr To bit_cast(const From& from) noexcept {
  return __builtin_bit_cast(To, from);
}

template <typename To, typename From>
  requires(sizeof(To) == sizeof(From) && !(std::is_trivially_copyable_v<To> && std::is_trivially_copyable_v<From>))
ARF_HD To bit_cast(const From& from) noexcept {
  To to;
  memcpy(&to, &from, sizeof(To));
  return to;
}

}  // namespace arf
