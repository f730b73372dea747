// Rank output relay of arfusion-run: every rank's stdout and stderr arrive on pipes in arbitrary
// chunks; the launcher re-emits them as whole lines, each prefixed "[rank r] ", with one write()
// per batch of complete lines, so lines of different ranks never interleave mid-line.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace arf::run {

class LinePrefixer {
 public:
  // A line longer than max_line_bytes without a newline is emitted in pieces of that size, each
  // ending in a newline (the relay must not hold an unbounded line in memory).
  explicit LinePrefixer(std::string prefix, size_t max_line_bytes = size_t{64} << 10);

  // Appends to *out every line completed by data, each with the prefix and its newline; keeps the
  // unterminated tail for the next call.
  void feed(std::string_view data, std::string* out);

  // End of stream: the unterminated tail, if any, as one more line with a newline added.
  void finish(std::string* out);

 private:
  void emit(std::string_view line, std::string* out) const;

  std::string prefix_;
  size_t max_line_bytes_;
  std::string pending_;  // bytes after the last newline
};

// "[rank 3] ", or "" when prefixing is off.
std::string rank_prefix(int rank, bool enabled);

// write(2) until done; false on an error other than EINTR (EPIPE included: output is dropped).
bool write_all(int fd, std::string_view data);

}  // namespace arf::run
