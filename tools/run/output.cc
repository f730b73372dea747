// Whole-line relay of rank output (output.h).
#include "output.h"

#include <unistd.h>

#include <cerrno>

namespace arf::run {

LinePrefixer::LinePrefixer(std::string prefix, size_t max_line_bytes)
    : prefix_(std::move(prefix)), max_line_bytes_(max_line_bytes > 0 ? max_line_bytes : 1) {}

void LinePrefixer::emit(std::string_view line, std::string* out) const {
  out->append(prefix_);
  out->append(line);
  out->push_back('\n');
}

void LinePrefixer::feed(std::string_view data, std::string* out) {
  while (!data.empty()) {
    const size_t newline = data.find('\n');
    const size_t room = max_line_bytes_ - pending_.size();  // pending_ never exceeds the limit
    if (newline == std::string_view::npos && data.size() <= room) {
      pending_.append(data);
      return;
    }
    // A complete line (newline within the limit), or an over-long one cut at the limit.
    const bool complete = newline != std::string_view::npos && newline <= room;
    pending_.append(data.substr(0, complete ? newline : room));
    emit(pending_, out);
    pending_.clear();
    data.remove_prefix(complete ? newline + 1 : room);
  }
}

void LinePrefixer::finish(std::string* out) {
  if (pending_.empty()) return;
  emit(pending_, out);
  pending_.clear();
}

std::string rank_prefix(int rank, bool enabled) {
  return enabled ? "[rank " + std::to_string(rank) + "] " : std::string();
}

bool write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    const ssize_t n = write(fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return false;
    data.remove_prefix(static_cast<size_t>(n));
  }
  return true;
}

}  // namespace arf::run
