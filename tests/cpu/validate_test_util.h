// Shared by the host-side validation tests (test_validate.cc, test_sandwich_validate.cc): a
// well-formed residual + RMSNorm call over fabricated addresses that are never dereferenced, and
// the device check validate() is given in place of the CUDA query, so no GPU is needed.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "core/validate.h"

namespace arf::validate_test {

inline constexpr int kTokens = 16;
inline constexpr int kHidden = 4096;

inline void* addr(uint64_t a) { return reinterpret_cast<void*>(static_cast<uintptr_t>(a)); }

// Each tensor of the call in its own range, 256 MiB apart, all 256-byte aligned; a test's other
// tensors go in [0x60000000, kForeignBase).
inline constexpr uint64_t kInput = 0x10000000, kResidualIn = 0x20000000, kGamma = 0x30000000,
                          kResidualOut = 0x40000000, kNormOut = 0x50000000;
// Memory at and above it is another device's for foreign_memory_check.
inline constexpr uint64_t kForeignBase = 0x70000000;

// A bf16 communicator of `world` ranks with room for 128 tokens of 8192 (Lamport slots too).
inline StaticFacts small_facts(int world) {
  StaticFacts facts;
  facts.world = world;
  facts.dtype = DType::kBf16;
  facts.max_tokens = 128;
  facts.max_hidden = 8192;
  facts.oneshot_max_tokens = 128;
  return facts;
}

// arfFusedArgsInit's residual + RMSNorm call of kTokens x kHidden with input, residual_in, gamma,
// residual_out and norm_out at the addresses above.
inline arfFusedArgs_t norm_call() {
  arfFusedArgs_t args{};
  arfFusedArgsInit(&args);
  args.num_tokens = kTokens;
  args.hidden = kHidden;
  args.input = addr(kInput);
  args.residual_in = addr(kResidualIn);
  args.gamma = addr(kGamma);
  args.residual_out = addr(kResidualOut);
  args.norm_out = addr(kNormOut);
  return args;
}

// The injected device check: memory at or above kForeignBase is device 1's, with the message a
// real check gives ("<name> is memory of device 1, the communicator is on device <device>").
inline PointerCheck foreign_memory_check() {
  return [](const void* p, const char* name, int device) -> Status {
    if (reinterpret_cast<uintptr_t>(p) >= kForeignBase) {
      return invalid_argument(std::string(name) +
                              " is memory of device 1, the communicator is on device " +
                              std::to_string(device));
    }
    return Status::ok();
  };
}

// `s` has status `code` and a message containing `substring` (the message is what a user sees).
inline void expect_status(const Status& s, arfStatus_t code, const std::string& substring) {
  EXPECT_EQ(s.code(), code) << s.message();
  EXPECT_NE(s.message().find(substring), std::string::npos)
      << "message: " << s.message() << "\nexpected to contain: " << substring;
}

}  // namespace arf::validate_test
