// Stand-in (see ../../../README.md): the ScalarType values ops_stable.cc names.
#pragma once
namespace torch::headeronly {
enum class ScalarType { Byte, Half, Float, BFloat16, Float8_e4m3fn, Int, Long };
}  // namespace torch::headeronly
