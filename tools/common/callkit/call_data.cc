// One call's host data and its reference inputs (call_data.h).
#include "callkit/call_data.h"

namespace arf::callkit {

DType ref_dtype(arfDataType_t dtype) {
  switch (dtype) {
    case arfFloat16: return DType::kFp16;
    case arfFloat32: return DType::kFp32;
    default: return DType::kBf16;
  }
}

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

CallData make_call_data(const CallSpec& spec, int world, arfDataType_t dtype, uint64_t seed) {
  const DType rd = ref_dtype(dtype);
  const int64_t n = spec.elems();
  CallData d;
  d.inputs.resize(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    d.inputs[r].resize(static_cast<size_t>(n));
    ref::fill_random(d.inputs[r].data(), n, rd, mix_seed(seed, r + 1));
  }
  if (!spec.has_norm()) return d;
  d.residual_in.resize(static_cast<size_t>(n));
  ref::fill_random(d.residual_in.data(), n, rd, mix_seed(seed, 1001));
  const float base = spec.gamma_plus_one ? 0.0f : 1.0f;
  auto draw_gamma = [&](uint64_t salt, float spread, std::vector<uint16_t>* g16, std::vector<float>* g32) {
    std::vector<uint16_t> g(static_cast<size_t>(spec.hidden));
    ref::fill_random(g.data(), spec.hidden, rd, mix_seed(seed, salt));
    for (uint16_t bits : g) {
      const float x = ref::to_float(bits, rd);
      if (spec.gamma_fp32) g32->push_back(base + (spread + 0.0003f) * x);
      else g16->push_back(ref::from_float(base + spread * x, rd));
    }
  };
  draw_gamma(1002, 0.1f, &d.gamma16, &d.gamma32);
  if (spec.post_norm) draw_gamma(1003, 0.25f, &d.post_gamma16, &d.post_gamma32);
  return d;
}

ref::FusedInputs reference_inputs(const CallSpec& spec, arfDataType_t dtype,
                                  const CallData& data) {
  const DType rd = ref_dtype(dtype);
  ref::FusedInputs in;
  in.dtype = rd;
  in.num_tokens = spec.num_tokens;
  in.hidden = spec.hidden;
  for (const auto& input : data.inputs) in.rank_inputs.push_back(input.data());
  if (!spec.has_norm()) return in;
  in.residual_in = spec.no_residual ? nullptr : data.residual_in.data();
  in.norm_rounding = static_cast<int>(spec.norm_rounding);
  in.gamma = spec.gamma_fp32 ? static_cast<const void*>(data.gamma32.data())
                             : static_cast<const void*>(data.gamma16.data());
  in.gamma_dtype = spec.gamma_fp32 ? DType::kFp32 : rd;
  in.gamma_offset = spec.gamma_plus_one ? 1.0f : 0.0f;
  in.eps = spec.eps;
  if (spec.post_norm) {
    in.post_gamma = spec.gamma_fp32 ? static_cast<const void*>(data.post_gamma32.data())
                                    : static_cast<const void*>(data.post_gamma16.data());
  }
  return in;
}

}  // namespace arf::callkit
