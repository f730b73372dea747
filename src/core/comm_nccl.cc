// The `nccl` algorithm's part of the communicator (communicator.h): the vote at creation (can every
// rank load NCCL and create its communicator?) and the call path (ncclAllReduce, then arfusion's
// epilogue kernel).
#include "core/communicator.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/scoped_device.h"
#include "launch/launch.h"

namespace arf {
namespace {

// setup_nccl's agreement rounds: every rank casts "1<payload>" (yes) or "0<why>" (no), cut to what
// Group::exchange carries.
std::string ballot(bool yes, const std::string& text) {
  std::string b = (yes ? "1" : "0") + text;
  b.resize(std::min(b.size(), Group::kMaxExchangeBytes));
  return b;
}

// The lowest rank that voted no, with its reason; nullopt when every rank said yes.
std::optional<std::pair<size_t, std::string>> first_no(const std::vector<std::string>& ballots) {
  for (size_t r = 0; r < ballots.size(); ++r) {
    const std::string& b = ballots[r];
    if (b.empty() || b[0] != '1') return std::make_pair(r, b.empty() ? std::string("?") : b.substr(1));
  }
  return std::nullopt;
}

}  // namespace

Status Communicator::setup_nccl(double timeout_seconds) {
  // Whether to try at all follows from agreed facts, so every rank takes the same branch.
  if (facts_.world < 2) {
    nccl_why_ = "world 1 has nothing to all-reduce";
    return Status::ok();
  }
  if (facts_.max_ranks_per_device > 1) {
    nccl_why_ = "ranks share a GPU (NCCL needs one rank per GPU)";
    return Status::ok();
  }
  std::string why;
  const nccl::Api* api = nccl::api(&why);
  // Round 1: who can load NCCL; rank 0 also hands out the id ("1" + NCCL_UNIQUE_ID_BYTES).
  std::string mine = ballot(api != nullptr, api != nullptr ? "" : why);
  ncclUniqueId id{};
  if (rank_ == 0 && api != nullptr) {
    const Status got = nccl::status(*api, api->get_unique_id(&id), "ncclGetUniqueId");
    mine = ballot(got.is_ok(), got.is_ok() ? std::string(id.internal, sizeof(id.internal))
                                           : got.message());
  }
  Result<std::vector<std::string>> loaded = group_->exchange(rank_, mine, timeout_seconds);
  if (!loaded.is_ok()) return loaded.status();
  if (const auto no = first_no(loaded.value())) {
    nccl_why_ = "rank " + std::to_string(no->first) + " cannot use NCCL: " + no->second;
    return Status::ok();
  }
  if (loaded.value()[0].size() != 1 + sizeof(id.internal)) return internal_error("bad NCCL id");
  std::memcpy(id.internal, loaded.value()[0].data() + 1, sizeof(id.internal));
  // Round 2: create, then agree; one rank's failure disables nccl on all.
  Status created;
  {
    ScopedDevice scoped;
    created = scoped.enter(device_);
    if (created.is_ok()) {
      created = nccl_.init(*api, id, rank_, facts_.world, timeout_seconds, facts_.max_ctas);
    }
  }
  Result<std::vector<std::string>> made = group_->exchange(
      rank_, ballot(created.is_ok(), created.is_ok() ? "" : created.message()), timeout_seconds);
  if (!made.is_ok()) return made.status();
  if (const auto no = first_no(made.value())) {
    (void)nccl_.close(/*abort=*/true, timeout_seconds);
    nccl_why_ = "NCCL communicator creation failed on rank " + std::to_string(no->first) + ": " +
                no->second;
    return Status::ok();
  }
  facts_.nccl = true;
  return Status::ok();
}

Status Communicator::launch_nccl(const Plan& plan, Pattern pattern, const KernelParams& params,
                                 cudaStream_t stream) {
  // The sum lands where unfused puts it: the caller's output, else norm_out, else the scratch.
  void* sum = pattern == Pattern::kAllReduce ? params.allreduce_out
              : params.norm_out != nullptr   ? params.norm_out
                                             : params.scratch;
  ScopedDevice scoped;
  ARF_RETURN_IF_ERROR(scoped.enter(device_));
  if (Status reduced = nccl_.all_reduce(params.input, sum, static_cast<size_t>(params.num_elems),
                                        facts_.dtype, stream);
      !reduced.is_ok()) {
    // NCCL refused or did not settle the collective: peers may be inside it, so later calls
    // would pair with the wrong ones. The communicator is failed, like after a kernel timeout.
    return fail(reduced);
  }
  if (pattern != Pattern::kAllReduce) {
    KernelParams epilogue = params;
    epilogue.input = sum;
    ARF_RETURN_IF_ERROR(launch_epilogue(plan, pattern, facts_.dtype, epilogue, stream));
  }
  last_plan_ = plan;
  return stream_check_.after_call(stream);
}

}  // namespace arf
