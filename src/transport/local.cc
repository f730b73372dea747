// In-process rendezvous for the `local` transport (see local.h). One global mutex guards the
// registry and every forming group: init is rare and short, and a single lock makes the state
// transitions (join, time out, abandon, form) trivially atomic with respect to each other.
#include "transport/local.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <map>
#include <set>
#include <span>
#include <thread>

#include "base/cuda_check.h"
#include "transport/random_bytes.h"

namespace arf::local {
namespace {

using Clock = std::chrono::steady_clock;

enum class Slot { kEmpty, kJoined, kGone };

// A group being formed. Removed from the registry once formed (the joiners keep it alive), or once
// every rank has been accounted for after a failure (so late arrivals still fail fast).
struct Rendezvous {
  explicit Rendezvous(int world)
      : world(world), slots(world, Slot::kEmpty), infos(world), peer_status(world) {}
  int world;
  std::vector<Slot> slots;
  std::vector<RankInfo> infos;
  int joined = 0;
  int accounted = 0;  // joined or gone
  bool formed = false;
  Status failure;     // first failure; once set, every rank of this id fails with it
  std::vector<Status> peer_status;
  int reported = 0;
  std::shared_ptr<LocalGroup> group;
  std::condition_variable cv;
};

std::mutex g_mu;
std::map<std::string, std::shared_ptr<Rendezvous>>& registry() {
  static auto* r = new std::map<std::string, std::shared_ptr<Rendezvous>>();  // never destroyed:
  return *r;  // comms may be destroyed from static destructors after this TU's statics are gone
}

std::string key_of(const arfUniqueId& id) { return std::string(id.internal, sizeof(id.internal)); }

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(
                            std::chrono::duration<double>(seconds));
}

// Caller holds g_mu. Drops a failed rendezvous from the registry once nobody else can arrive.
void account_and_maybe_erase(const std::string& key, Rendezvous* r) {
  if (++r->accounted >= r->world) {
    auto it = registry().find(key);
    if (it != registry().end() && it->second.get() == r) registry().erase(it);
  }
}

// Every rank must have sized its workspace for the same capacity and dtype.
Status check_agreement(const std::vector<RankInfo>& infos) {
  const RankInfo& a = infos[0];
  for (size_t r = 1; r < infos.size(); ++r) {
    const RankInfo& b = infos[r];
    if (a.dtype != b.dtype || a.max_tokens != b.max_tokens || a.max_hidden != b.max_hidden ||
        a.oneshot_max_tokens != b.oneshot_max_tokens) {
      return invalid_argument(
          "ranks disagree on the communicator config: rank 0 has (dtype " +
          std::to_string(static_cast<int>(a.dtype)) + ", max_tokens " +
          std::to_string(a.max_tokens) + ", max_hidden " + std::to_string(a.max_hidden) +
          ", oneshot_max_tokens " + std::to_string(a.oneshot_max_tokens) + "), rank " +
          std::to_string(r) + " has (dtype " + std::to_string(static_cast<int>(b.dtype)) +
          ", max_tokens " + std::to_string(b.max_tokens) + ", max_hidden " +
          std::to_string(b.max_hidden) + ", oneshot_max_tokens " +
          std::to_string(b.oneshot_max_tokens) + ")");
    }
  }
  return Status::ok();
}

std::string seconds(double s) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%g", s);
  return buf;
}

std::string missing_ranks(const Rendezvous& r) {
  std::string out;
  for (int i = 0; i < r.world; ++i) {
    if (r.slots[i] != Slot::kEmpty) continue;
    out += (out.empty() ? "" : ", ") + std::to_string(i);
  }
  return out;
}

// Lets this rank's device load and store the workspaces of every other device in the group.
Status enable_peer_access(int rank, const std::vector<RankInfo>& infos) {
  const int mine = infos[rank].device;
  ARF_CUDA_RETURN_IF_ERROR(cudaSetDevice(mine));
  std::set<int> done;
  for (const RankInfo& peer : infos) {
    if (peer.device == mine || !done.insert(peer.device).second) continue;
    int can_access = 0;
    ARF_CUDA_RETURN_IF_ERROR(cudaDeviceCanAccessPeer(&can_access, mine, peer.device));
    if (!can_access) {
      return unsupported("device " + std::to_string(mine) + " cannot access device " +
                         std::to_string(peer.device) +
                         " (cudaDeviceCanAccessPeer = 0); the local transport needs peer access "
                         "between every pair of its devices");
    }
    const cudaError_t err = cudaDeviceEnablePeerAccess(peer.device, 0);
    if (err == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();  // another rank on this device got there first: fine
    } else {
      ARF_CUDA_RETURN_IF_ERROR(err);
    }
  }
  return Status::ok();
}

// Phase 1: wait for every rank. Caller holds `lock` on g_mu.
Status wait_for_all(std::unique_lock<std::mutex>& lock, const std::string& key, Rendezvous* r,
                    int rank, const RankInfo& info, double timeout_seconds) {
  if (r->slots[rank] != Slot::kEmpty) {
    return invalid_argument("duplicate rank " + std::to_string(rank) +
                            ": another thread already joined this id as rank " +
                            std::to_string(rank));
  }
  if (!r->failure.is_ok()) {
    r->slots[rank] = Slot::kGone;
    account_and_maybe_erase(key, r);
    return r->failure;
  }
  r->infos[rank] = info;
  r->slots[rank] = Slot::kJoined;
  ++r->joined;
  ++r->accounted;
  if (r->joined == r->world) {
    r->formed = true;
    registry().erase(key);
    r->failure = check_agreement(r->infos);
    if (r->failure.is_ok()) r->failure = check_same_settings(r->infos);
    r->cv.notify_all();
    return r->failure;
  }
  const bool done = r->cv.wait_until(lock, deadline_after(timeout_seconds),
                                     [r] { return r->formed || !r->failure.is_ok(); });
  if (!done) {
    r->failure = Status(arfTimeout, "rendezvous timed out after " + seconds(timeout_seconds) +
                                        " s: rank(s) " +
                                        missing_ranks(*r) + " of world " +
                                        std::to_string(r->world) + " never joined");
    r->cv.notify_all();
  }
  return r->failure;
}

}  // namespace

Result<std::shared_ptr<LocalGroup>> join(const arfUniqueId& id, int rank, int world,
                                         const RankInfo& info, double timeout_seconds) {
  if (world < 1 || world > kMaxRanks || rank < 0 || rank >= world) {
    return invalid_argument("rank " + std::to_string(rank) + " of world " + std::to_string(world) +
                            " is not a valid rank");
  }
  const std::string key = key_of(id);
  std::shared_ptr<Rendezvous> r;
  {
    std::unique_lock<std::mutex> lock(g_mu);
    std::shared_ptr<Rendezvous>& slot = registry()[key];
    if (!slot) slot = std::make_shared<Rendezvous>(world);
    r = slot;
    if (r->world != world) {
      return invalid_argument("world size mismatch: rank " + std::to_string(rank) + " says " +
                              std::to_string(world) + ", ranks already joined with this id say " +
                              std::to_string(r->world));
    }
    ARF_RETURN_IF_ERROR(wait_for_all(lock, key, r.get(), rank, info, timeout_seconds));
  }

  // Phase 2: every rank enables its own peer access (CUDA calls outside the lock), then all agree.
  const Status mine = enable_peer_access(rank, r->infos);
  std::unique_lock<std::mutex> lock(g_mu);
  r->peer_status[rank] = mine;
  if (++r->reported == r->world) {
    for (const Status& s : r->peer_status) {
      if (!s.is_ok()) {
        r->failure = s;
        break;
      }
    }
    if (r->failure.is_ok()) r->group = std::make_shared<LocalGroup>(r->infos);
    r->cv.notify_all();
  }
  const bool done = r->cv.wait_until(lock, deadline_after(timeout_seconds),
                                     [&] { return r->reported == r->world; });
  if (!done) {
    return Status(arfTimeout, "rendezvous timed out while ranks enabled peer access");
  }
  if (!r->failure.is_ok()) return r->failure;
  return r->group;
}

void abandon(const arfUniqueId& id, int rank, int world, const Status& why) {
  const std::string key = key_of(id);
  std::lock_guard<std::mutex> lock(g_mu);
  std::shared_ptr<Rendezvous>& slot = registry()[key];
  if (!slot) slot = std::make_shared<Rendezvous>(world);
  Rendezvous* r = slot.get();
  if (r->world != world || rank < 0 || rank >= world || r->slots[rank] != Slot::kEmpty) return;
  if (r->failure.is_ok()) {
    r->failure = Status(why.code(), "rank " + std::to_string(rank) +
                                        " failed before joining: " + why.message());
  }
  r->slots[rank] = Slot::kGone;
  r->cv.notify_all();
  account_and_maybe_erase(key, r);
}

LocalGroup::LocalGroup(std::vector<RankInfo> infos)
    : infos_(std::move(infos)),
      left_(infos_.size(), false),
      live_ranks_(static_cast<int>(infos_.size())),
      device_mates_(infos_.size()),
      enqueued_(new std::atomic<uint64_t>[infos_.size()]),
      failed_(new std::atomic<bool>[infos_.size()]),
      failure_(infos_.size()),
      exchange_arrived_(infos_.size(), false),
      exchange_pending_(infos_.size()) {
  for (size_t r = 0; r < infos_.size(); ++r) {
    enqueued_[r].store(0);
    failed_[r].store(false);
    for (size_t m = 0; m < infos_.size(); ++m) {
      if (m != r && infos_[m].device == infos_[r].device) device_mates_[r].push_back(static_cast<int>(m));
    }
  }
}

Status LocalGroup::wait_enqueue_turn(int rank, uint64_t call, double timeout_seconds) const {
  const Clock::time_point deadline = deadline_after(timeout_seconds);
  for (int mate : device_mates_[rank]) {
    // Acquire: pairs with mark_enqueued's release, so the mate's launch is in the queues first.
    while (enqueued_[mate].load(std::memory_order_acquire) < call) {
      if (failed_[mate].load(std::memory_order_acquire)) {
        std::lock_guard<std::mutex> lock(failure_mu_);
        return Status(arfCommFailed, "rank " + std::to_string(rank) + ": peer " +
                                         std::to_string(mate) + " (same device " +
                                         std::to_string(infos_[rank].device) +
                                         ") failed before enqueuing kernel " +
                                         std::to_string(call - 1) + ": " + failure_[mate]);
      }
      if (Clock::now() > deadline) {
        return Status(arfTimeout,
                      "timeout: rank " + std::to_string(rank) + " waited " + seconds(timeout_seconds) +
                          " s for peer " + std::to_string(mate) + " (same device " +
                          std::to_string(infos_[rank].device) + ") in phase host_enqueue: it has not "
                          "enqueued kernel " + std::to_string(call - 1) +
                          "; every rank must issue the same calls, each virtual rank from its own "
                          "host thread");
      }
      std::this_thread::yield();
    }
  }
  return Status::ok();
}

void LocalGroup::mark_enqueued(int rank, uint64_t calls) {
  enqueued_[rank].store(calls, std::memory_order_release);
}

void LocalGroup::mark_failed(int rank, const Status& why) {
  {
    std::lock_guard<std::mutex> lock(failure_mu_);
    if (failed_[rank].load()) return;  // the first reason stays
    failure_[rank] = why.message();
  }
  failed_[rank].store(true, std::memory_order_release);
}

Status LocalGroup::peer_failure(int rank) const {
  for (int r = 0; r < world(); ++r) {
    if (r == rank || !failed_[r].load(std::memory_order_acquire)) continue;
    std::lock_guard<std::mutex> lock(failure_mu_);
    return Status(arfCommFailed, "rank " + std::to_string(r) + " failed: " + failure_[r]);
  }
  return Status::ok();
}

Result<std::vector<std::string>> LocalGroup::exchange(int rank, const std::string& mine,
                                                      double timeout_seconds) {
  if (mine.size() > kMaxExchangeBytes) return internal_error("exchange: contribution too large");
  std::unique_lock<std::mutex> lock(mu_);
  const uint64_t generation = exchange_generation_;
  exchange_arrived_[static_cast<size_t>(rank)] = true;
  exchange_pending_[static_cast<size_t>(rank)] = mine;
  if (std::count(exchange_arrived_.begin(), exchange_arrived_.end(), true) == world()) {
    exchange_result_ = exchange_pending_;
    std::fill(exchange_arrived_.begin(), exchange_arrived_.end(), false);
    ++exchange_generation_;
    exchange_cv_.notify_all();
    return exchange_result_;
  }
  // The result stays readable until every rank (us included) arrives at the next round.
  const bool done = exchange_cv_.wait_until(lock, deadline_after(timeout_seconds),
                                            [&] { return exchange_generation_ != generation; });
  if (done) return exchange_result_;
  std::string missing;
  for (size_t r = 0; r < exchange_arrived_.size(); ++r) {
    if (!exchange_arrived_[r]) missing += (missing.empty() ? "" : ", ") + std::to_string(r);
  }
  exchange_arrived_[static_cast<size_t>(rank)] = false;  // this round is abandoned by us
  return Status(arfTimeout, "timeout: rank " + std::to_string(rank) + " waited " +
                                seconds(timeout_seconds) + " s for rank(s) " + missing +
                                " at an init exchange");
}

Status LocalGroup::leave(int rank) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (rank < 0 || rank >= world() || left_[rank]) {
      return internal_error("rank " + std::to_string(rank) + " left its group twice");
    }
    left_[rank] = true;
    if (--live_ranks_ > 0) return Status::ok();
  }
  // Last one out: every rank has synchronized its device, so no kernel can still touch any
  // workspace. Free them all, continuing past errors so one bad device does not leak the rest.
  Status first;
  for (RankInfo& info : infos_) {
    Status s = free_workspace(&info.workspace);
    if (first.is_ok() && !s.is_ok()) first = s;
  }
  return first;
}

Result<arfUniqueId> new_unique_id() {
  arfUniqueId id;
  ARF_RETURN_IF_ERROR(fill_random(
      std::span<uint8_t>(reinterpret_cast<uint8_t*>(id.internal), sizeof(id.internal))));
  return id;
}

}  // namespace arf::local
