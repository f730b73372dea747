// fill_random (random_bytes.h).
#include "transport/random_bytes.h"

#include <sys/random.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace arf {

Status fill_random(std::span<uint8_t> bytes) {
  for (size_t got = 0; got < bytes.size();) {
    const ssize_t n = ::getrandom(bytes.data() + got, bytes.size() - got, 0);
    if (n > 0) got += static_cast<size_t>(n);
    if (n < 0 && errno != EINTR) {
      return internal_error(std::string("getrandom for a unique id: ") + std::strerror(errno));
    }
  }
  return Status::ok();
}

}  // namespace arf
