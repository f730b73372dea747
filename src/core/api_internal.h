// The communicator behind a C handle, for the library's own tests and tools that must reach
// internals the C API does not expose (tests/gpu corrupts protocol state through it). Not part of
// the public API; nothing in include/ declares it.
#pragma once

#include "arfusion/arfusion.h"

namespace arf {

class Communicator;
// nullptr for a null handle.
Communicator* communicator_of(arfComm_t comm);

}  // namespace arf
