// FNV-1a over output bytes. When the ranks are processes (arfusion-run), rank 0's outputs live in
// another process, so the tools compare ranks through these 64-bit hashes instead of element by
// element (a collision between two different outputs is not a practical risk; the element-wise
// checks against the reference still run on every rank).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace arf {

inline constexpr uint64_t kOutputHashSeed = 1469598103934665603ull;

// Continues the hash `h` over `bytes` bytes at `data`.
inline uint64_t hash_bytes(const void* data, size_t bytes, uint64_t h = kOutputHashSeed) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

template <typename T>
uint64_t hash_output(const std::vector<T>& v, uint64_t h = kOutputHashSeed) {
  return hash_bytes(v.data(), v.size() * sizeof(T), h);
}

}  // namespace arf
