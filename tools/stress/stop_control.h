// Every rank stops after the SAME call, whatever asked for the stop (time budget, Ctrl-C, an
// error on one rank): a rank that issued one call more than its peers would stall in it until the
// bounded wait expires, which would be reported as a timeout that the soak itself caused.
//
// Contract: a rank thread asks may_issue(k, n) before issuing its calls k .. k+n-1 (one step: an
// eager call, or a graph replay of n calls; steps in order, the same steps on every rank). A stop
// fixes the limit at one past the largest call any rank was already granted, so every rank issues
// exactly calls 0 .. limit-1 and no granted call is ever taken back.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>

namespace arf::stress {

class StopControl {
 public:
  bool may_issue(uint64_t k, uint64_t n = 1);
  void request_stop(const std::string& reason);  // the first reason is kept
  bool stop_requested() const;
  uint64_t limit() const;                        // UINT64_MAX while no stop was requested
  std::string reason() const;

 private:
  mutable std::mutex mutex_;
  uint64_t granted_ = 0;  // one past the largest k granted
  uint64_t limit_ = UINT64_MAX;
  std::string reason_;
};

}  // namespace arf::stress
