// Bytes from the kernel's random source, for rendezvous ids (local.h new_unique_id, the ipc
// bootstrap's UniqueId::generate): ids name sockets another user must not be able to guess.
#pragma once

#include <cstdint>
#include <span>

#include "base/status.h"

namespace arf {

// Fills `bytes` from getrandom(2) (blocks only until the kernel's pool is seeded, early at boot).
// Internal naming errno when the kernel refuses.
Status fill_random(std::span<uint8_t> bytes);

}  // namespace arf
