// The ipc transport's rendezvous and group (ipc.h).
#include "transport/ipc.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/cuda_check.h"
#include "transport/ipc_bootstrap.h"
#include "transport/peer_probe.h"
#include "transport/shared_call_log.h"

namespace arf::ipc {
namespace {

// What each rank tells every other, in one all_gather: its facts, and whether its local setup
// (allocation, export) worked — so a failure on one rank becomes the same verdict on all.
struct Wire {
  int32_t code = 0;   // arfStatus_t of the local step; 0 = ok
  char error[240] = {};
  uint8_t uuid[16] = {};
  int32_t device = -1;
  int32_t sm_count = 0;
  int32_t dtype = 0;
  int64_t max_tokens = 0;
  int64_t max_hidden = 0;
  int64_t oneshot_max_tokens = 0;
  int64_t total_bytes = 0;    // workspace layout size
  uint64_t mapped_bytes = 0;  // cuMem mapping size (granularity-rounded)
  uint64_t table_bytes = 0;   // tuning table text length (rank 0's is the one used)
  uint32_t counters_near_wrap = 0;  // RankInfo's
  int32_t verify_calls = 0;         // RankInfo's
  int32_t max_ctas = 0;             // RankInfo's
};

// A step's outcome as exchanged between ranks.
struct Verdict {
  int32_t code = 0;
  char error[240] = {};
};

template <size_t N>
void copy_text(char (&dst)[N], const std::string& text) {
  const size_t n = std::min(text.size(), N - 1);
  std::memcpy(dst, text.data(), n);
  dst[n] = '\0';
}

Verdict verdict_of(const Status& s) {
  Verdict v;
  v.code = s.is_ok() ? 0 : static_cast<int32_t>(s.code());
  if (!s.is_ok()) copy_text(v.error, s.message());
  return v;
}

// Every rank's verdict of one step: OK when all succeeded, else the first failure (lowest rank),
// naming it, with `phase` — identical on every rank.
Status agree(const std::vector<Verdict>& all, const char* phase) {
  for (size_t r = 0; r < all.size(); ++r) {
    if (all[r].code == 0) continue;
    const arfStatus_t code = all[r].code > 0 && all[r].code <= arfCommFailed
                                 ? static_cast<arfStatus_t>(all[r].code)
                                 : arfInternal;
    return Status(code, std::string("ipc init (") + phase + "): rank " + std::to_string(r) +
                            ": " + all[r].error);
  }
  return Status::ok();
}

// Exchanges this rank's outcome of a step and returns the common verdict.
Status exchange_verdict(Bootstrap& boot, const Status& mine, const char* phase) {
  Result<std::vector<Verdict>> all = boot.all_gather_value(verdict_of(mine));
  if (!all.is_ok()) return all.status();
  return agree(all.value(), phase);
}

// Capacity, dtype and layout must agree, or peers would index past each other's buffers.
Status check_same_capacity(const std::vector<Wire>& wires) {
  const Wire& w0 = wires[0];
  for (size_t r = 1; r < wires.size(); ++r) {
    const Wire& w = wires[r];
    if (w.dtype != w0.dtype || w.max_tokens != w0.max_tokens || w.max_hidden != w0.max_hidden ||
        w.oneshot_max_tokens != w0.oneshot_max_tokens || w.total_bytes != w0.total_bytes) {
      return invalid_argument(
          "ipc init: rank " + std::to_string(r) + "'s capacity (dtype " + std::to_string(w.dtype) +
          ", max_tokens " + std::to_string(w.max_tokens) + ", max_hidden " +
          std::to_string(w.max_hidden) + ", oneshot_max_tokens " +
          std::to_string(w.oneshot_max_tokens) + ") differs from rank 0's (dtype " +
          std::to_string(w0.dtype) + ", max_tokens " + std::to_string(w0.max_tokens) +
          ", max_hidden " + std::to_string(w0.max_hidden) + ", oneshot_max_tokens " +
          std::to_string(w0.oneshot_max_tokens) + ")");
    }
  }
  return Status::ok();
}

// Ranks whose devices have the same UUID share a GPU: the key is the first such rank.
int device_key(const std::vector<Wire>& wires, size_t r) {
  for (size_t q = 0; q < r; ++q) {
    if (std::memcmp(wires[q].uuid, wires[r].uuid, sizeof(wires[r].uuid)) == 0) {
      return static_cast<int>(q);
    }
  }
  return static_cast<int>(r);
}

uint64_t salt_of(const arfUniqueId& id) {
  uint64_t salt = 0;
  std::memcpy(&salt, id.internal, sizeof(salt));
  return salt;
}

class IpcGroup final : public Group {
 public:
  IpcGroup(std::vector<RankInfo> infos, Bootstrap boot, SharedCallLog calls,
           std::string peer_path_failure)
      : infos_(std::move(infos)),
        boot_(std::move(boot)),
        calls_(std::move(calls)),
        peer_path_failure_(std::move(peer_path_failure)) {}
  ~IpcGroup() override = default;

  const std::vector<RankInfo>& infos() const override { return infos_; }

  // Every mapping in this process is ours alone to undo (ipc.h, Lifetime).
  Status leave(int rank) override {
    (void)rank;
    boot_.reset();  // peers still in an exchange with us fail at once (EOF), naming us
    Status first;
    for (RankInfo& info : infos_) {
      const Status s = free_workspace(&info.workspace);
      if (first.is_ok() && !s.is_ok()) first = s;
    }
    return first;
  }

  std::string peer_path_failure() const override { return peer_path_failure_; }

  bool shares_device(int) const override { return false; }
  // Processes on one GPU run one at a time where the device time-slices their contexts, but at
  // once under MPS: there a collective CTA spinning for a mate holds the SM that the mate's
  // earlier kernels need, as between virtual ranks, so the gate waits for them as well (on the
  // mapped flag words; under time-slicing it only waits for the mate's slice, as the collective
  // itself would).
  uint32_t device_mates_mask(int rank) const override {
    uint32_t mask = 0;
    for (size_t m = 0; m < infos_.size(); ++m) {
      const bool mate = static_cast<int>(m) != rank && infos_[m].device_key == infos_[rank].device_key;
      if (mate) mask |= 1u << m;
    }
    return mask;
  }
  Status wait_enqueue_turn(int, uint64_t, double) const override { return Status::ok(); }
  void mark_enqueued(int, uint64_t) override {}
  // Across processes through the failure notice of the shared call log (shared_call_log.h).
  void mark_failed(int, const Status& why) override { calls_.mark_failed(why.message()); }
  Status peer_failure(int) const override { return calls_.peer_failure(); }
  // Across processes through shared rings (shared_call_log.h): a mismatch or a refusal is seen
  // before the later rank launches, as in one process.
  Status record_call(int, uint64_t call_index, const local::CallEntry& entry) override {
    return calls_.record(call_index, entry);
  }

  // The bootstrap's all_gather (equal sizes: a length byte pair and zero padding), bounded by the
  // timeout the bootstrap was formed with.
  Result<std::vector<std::string>> exchange(int, const std::string& mine, double) override {
    if (!boot_) return Status(arfCommFailed, "ipc group already left");
    if (mine.size() > kMaxExchangeBytes) return internal_error("exchange: contribution too large");
    std::vector<uint8_t> blob(kMaxExchangeBytes + 2, 0);
    blob[0] = static_cast<uint8_t>(mine.size() & 0xFF);
    blob[1] = static_cast<uint8_t>(mine.size() >> 8);
    std::memcpy(blob.data() + 2, mine.data(), mine.size());
    Result<std::vector<uint8_t>> all = boot_->all_gather(blob);
    if (!all.is_ok()) return all.status();
    std::vector<std::string> out;
    for (size_t r = 0; r < infos_.size(); ++r) {
      const uint8_t* b = all.value().data() + r * blob.size();
      const size_t n = std::min<size_t>(b[0] | (static_cast<size_t>(b[1]) << 8), kMaxExchangeBytes);
      out.emplace_back(reinterpret_cast<const char*>(b + 2), n);
    }
    return out;
  }

 private:
  std::vector<RankInfo> infos_;
  std::optional<Bootstrap> boot_;  // open until leave: init-time agreements (exchange)
  SharedCallLog calls_;
  std::string peer_path_failure_;
};

// Frees every workspace in `infos` (own and imported); used when init fails after some exist.
void free_all(std::vector<RankInfo>* infos) {
  for (RankInfo& info : *infos) (void)free_workspace(&info.workspace);
}

// This rank's local setup: allocation, export, device identity, call log. Returns the wire to
// publish (code set on failure) and fills *ws / *export_fd / *calls on success.
Wire prepare(const JoinRequest& req, Workspace* ws, Fd* export_fd,
             std::optional<SharedCallLog>* calls) {
  Wire w;
  const RankInfo& p = req.proto;
  w.device = p.device;
  w.sm_count = p.sm_count;
  w.dtype = static_cast<int32_t>(p.dtype);
  w.max_tokens = p.max_tokens;
  w.max_hidden = p.max_hidden;
  w.oneshot_max_tokens = p.oneshot_max_tokens;
  w.total_bytes = req.layout.total_bytes;
  w.table_bytes = p.tuning_table_json.size();
  w.counters_near_wrap = p.counters_near_wrap;
  w.verify_calls = p.verify_calls ? 1 : 0;
  w.max_ctas = p.max_ctas;

  auto fail = [&w](const Status& s) {
    w.code = static_cast<int32_t>(s.code());
    copy_text(w.error, s.message());
    return w;
  };
  cudaDeviceProp prop{};
  Status s = cuda_status(cudaGetDeviceProperties(&prop, p.device), "cudaGetDeviceProperties",
                         __FILE__, __LINE__);
  if (!s.is_ok()) return fail(s);
  std::memcpy(w.uuid, prop.uuid.bytes, sizeof(w.uuid));
  Result<SharedCallLog> log = SharedCallLog::create(req.world, req.rank);
  if (!log.is_ok()) return fail(log.status());
  calls->emplace(log.take());
  Result<Workspace> allocated = allocate_workspace(req.layout, p.device, WorkspaceMemory::kShareable,
                                                   p.counters_near_wrap);
  if (!allocated.is_ok()) return fail(allocated.status());
  *ws = allocated.take();
  w.mapped_bytes = ws->mapping.bytes;
  Result<int> fd = cumem::export_fd(ws->mapping);
  if (!fd.is_ok()) {
    (void)free_workspace(ws);
    return fail(fd.status());
  }
  export_fd->reset(fd.value());
  return w;
}

// Rank 0's tuning table text, carried to every rank (all_gather needs equal sizes: the others send
// zeros of the same length).
Result<std::string> share_table(Bootstrap& boot, const std::vector<Wire>& wires,
                                const std::string& mine) {
  const uint64_t bytes = wires[0].table_bytes;
  if (bytes == 0) return std::string();
  if (bytes > kMaxBlobBytes) {
    return invalid_argument("ipc init: rank 0's tuning table is " + std::to_string(bytes) +
                            " bytes; at most " + std::to_string(kMaxBlobBytes) + " can be shared");
  }
  std::vector<uint8_t> blob(bytes, 0);
  if (boot.rank() == 0) std::memcpy(blob.data(), mine.data(), bytes);
  Result<std::vector<uint8_t>> all = boot.all_gather(blob);
  if (!all.is_ok()) return all.status();
  return std::string(reinterpret_cast<const char*>(all.value().data()), bytes);
}

// Imports every peer's workspace (own stays as allocated). Status of the first failure.
Status import_peers(const JoinRequest& req, const std::vector<Wire>& wires,
                    const std::vector<Fd>& memory_fds, const std::vector<Fd>& error_fds,
                    std::vector<RankInfo>* infos) {
  for (int r = 0; r < req.world; ++r) {
    if (r == req.rank) continue;
    Result<Workspace> peer =
        import_workspace(req.layout, req.proto.device, memory_fds[static_cast<size_t>(r)].get(),
                         wires[static_cast<size_t>(r)].mapped_bytes,
                         error_fds[static_cast<size_t>(r)].get());
    if (!peer.is_ok()) {
      return Status(peer.status().code(), "cannot map rank " + std::to_string(r) +
                                              "'s workspace: " + peer.status().message());
    }
    (*infos)[static_cast<size_t>(r)].workspace = peer.take();
  }
  return Status::ok();
}

// The pairwise probe: every rank writes its value into every rank's probe slot, all wait, then
// each checks what every peer wrote into its own memory and reads its own writes back through
// every peer mapping. Returns this rank's verdict (naming the failing pair).
Status probe_pairs(Bootstrap& boot, const JoinRequest& req, const std::vector<RankInfo>& infos) {
  const uint64_t salt = salt_of(req.id);
  void* slots[kMaxRanks] = {};
  for (int p = 0; p < req.world; ++p) slots[p] = infos[static_cast<size_t>(p)].workspace.probe();
  const Status wrote = run_probe_writes(slots, req.rank, req.world, salt);
  // Everyone waits for everyone's writes, even after a local failure (it is reported next).
  const Status met = boot.barrier();
  if (!met.is_ok()) return met;
  ARF_RETURN_IF_ERROR(wrote);
  uint64_t received[kMaxRanks] = {};
  ARF_CUDA_RETURN_IF_ERROR(cudaMemcpy(received, slots[req.rank], sizeof(uint64_t) * req.world,
                                      cudaMemcpyDeviceToHost));
  uint64_t readback[kMaxRanks] = {};
  ARF_RETURN_IF_ERROR(run_probe_reads(slots, req.rank, req.world, readback));
  for (int p = 0; p < req.world; ++p) {
    if (received[p] != probe_value(salt, p, req.rank)) {
      return unsupported("probe: rank " + std::to_string(p) + "'s store into rank " +
                         std::to_string(req.rank) + "'s workspace did not arrive");
    }
    if (readback[p] != probe_value(salt, req.rank, p)) {
      return unsupported("probe: rank " + std::to_string(req.rank) + " read back a wrong value " +
                         "from rank " + std::to_string(p) + "'s workspace");
    }
  }
  return Status::ok();
}

}  // namespace

Result<std::shared_ptr<Group>> join(const JoinRequest& req) {
  UniqueId key;
  std::memcpy(key.bytes.data(), req.id.internal, key.bytes.size());
  Result<Bootstrap> connected = Bootstrap::connect(key, req.rank, req.world, req.timeout_seconds);
  if (!connected.is_ok()) return connected.status();
  Bootstrap boot = connected.take();

  Workspace own;
  Fd export_fd;
  std::optional<SharedCallLog> calls;
  const Wire mine = prepare(req, &own, &export_fd, &calls);
  Result<std::vector<Wire>> wires = boot.all_gather_value(mine);
  if (!wires.is_ok()) {
    (void)free_workspace(&own);
    return wires.status();
  }
  std::vector<Verdict> setup(wires.value().size());
  for (size_t r = 0; r < setup.size(); ++r) {
    setup[r].code = wires.value()[r].code;
    std::memcpy(setup[r].error, wires.value()[r].error, sizeof(setup[r].error));
  }
  Status s = agree(setup, "allocate and export the workspace");
  if (s.is_ok()) s = check_same_capacity(wires.value());  // same data: same verdict everywhere
  if (!s.is_ok()) {
    (void)free_workspace(&own);
    return s;
  }

  std::vector<RankInfo> infos(static_cast<size_t>(req.world));
  for (size_t r = 0; r < infos.size(); ++r) {
    const Wire& w = wires.value()[r];
    RankInfo& info = infos[r];
    info.device = w.device;
    info.device_key = device_key(wires.value(), r);
    info.sm_count = w.sm_count;
    info.dtype = static_cast<DType>(w.dtype);
    info.max_tokens = w.max_tokens;
    info.max_hidden = w.max_hidden;
    info.oneshot_max_tokens = w.oneshot_max_tokens;
    info.counters_near_wrap = w.counters_near_wrap;
    info.verify_calls = w.verify_calls != 0;
    info.max_ctas = w.max_ctas;
  }
  infos[static_cast<size_t>(req.rank)].workspace = own;
  auto fail = [&infos](Status why) {
    free_all(&infos);
    return why;
  };
  if (Status same = check_same_settings(infos); !same.is_ok()) return fail(same);  // same everywhere
  Result<std::string> table = share_table(boot, wires.value(), req.proto.tuning_table_json);
  if (!table.is_ok()) return fail(table.status());
  infos[0].tuning_table_json = table.take();

  Result<std::vector<Fd>> memory_fds = boot.all_gather_fds(export_fd.get());
  if (!memory_fds.is_ok()) return fail(memory_fds.status());
  Result<std::vector<Fd>> error_fds = boot.all_gather_fds(own.error_fd);
  if (!error_fds.is_ok()) return fail(error_fds.status());
  Result<std::vector<Fd>> log_fds = boot.all_gather_fds(calls->fd());
  if (!log_fds.is_ok()) return fail(log_fds.status());
  s = exchange_verdict(boot, calls->attach(log_fds.value()), "map peer call logs");
  if (!s.is_ok()) return fail(s);
  s = import_peers(req, wires.value(), memory_fds.value(), error_fds.value(), &infos);
  s = exchange_verdict(boot, s, "import peer workspaces");
  // Unsupported (no path between two ranks' memory) leaves the group usable for NCCL: the
  // communicator decides (Group::peer_path_failure); anything else is fatal.
  if (!s.is_ok() && s.code() != arfUnsupported) return fail(s);
  if (s.is_ok()) {
    s = probe_pairs(boot, req, infos);
    s = exchange_verdict(boot, s, "peer probe");
    if (!s.is_ok() && s.code() != arfUnsupported) return fail(s);
  }
  // The group keeps the bootstrap for init-time agreements (exchange); after init nothing uses it,
  // and a peer's later exit shows up as the bounded waits' Timeout naming it.
  return std::shared_ptr<Group>(std::make_shared<IpcGroup>(
      std::move(infos), std::move(boot), std::move(*calls), s.is_ok() ? "" : s.message()));
}

}  // namespace arf::ipc
