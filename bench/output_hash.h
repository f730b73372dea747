// FNV-1a over output bytes. Under arfusion-run rank 0's outputs live in another
// process, so the checks compare ranks through these 64-bit hashes instead of
// element by element (a collision between two different outputs is not a
// practical risk; the element-wise checks against the reference still run on
// every rank).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace arf::bench {

inline constexpr uint64_t kOutputHashSeed = 1469598103934665603ull;

template <typename T>
uint64_t hash_output(const std::vector<T> &v, uint64_t h = kOutputHashSeed) {
  const auto *p = reinterpret_cast<const unsigned char *>(v.data());
  for (size_t i = 0; i < v.size() * sizeof(T); ++i) h = (h ^ p[i]) * 1099511628211ull;
  return h;
}

}  // namespace arf::bench
