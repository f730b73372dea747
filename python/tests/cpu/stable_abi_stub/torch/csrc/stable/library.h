// Stand-in (see ../../../README.md): registration macros and the boxing helper, as declarations.
#pragma once
#include <cstdint>
using AOTITorchError = int32_t;
#define AOTI_TORCH_SUCCESS 0
struct StableLibraryStandIn {
  template <class Boxed>
  StableLibraryStandIn& impl(const char* name, Boxed fn);
};
template <class F>
F* torch_box_stand_in(F* f) { return f; }
#define TORCH_BOX(f) torch_box_stand_in(f)
#define STABLE_TORCH_LIBRARY_IMPL(ns, k, m) [[maybe_unused]] static void stable_impl_##ns##_##k(StableLibraryStandIn& m)
