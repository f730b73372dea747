// A stop at one common call for every rank (stop_control.h).
#include "stop_control.h"

#include <algorithm>

namespace arf::stress {

bool StopControl::may_issue(uint64_t k, uint64_t n) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (k >= limit_) return false;
  granted_ = std::max(granted_, k + n);
  return true;
}

void StopControl::request_stop(const std::string& reason) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (limit_ != UINT64_MAX) return;
  limit_ = granted_;
  reason_ = reason;
}

bool StopControl::stop_requested() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return limit_ != UINT64_MAX;
}

uint64_t StopControl::limit() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return limit_;
}

std::string StopControl::reason() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return reason_;
}

}  // namespace arf::stress
