// Implementation of the GPU test harness (harness.h).
#include "gpu/harness.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

#include "gpu/edge_values.h"

namespace arf::test {

const char* dtype_tag(arfDataType_t dtype) { return dtype == arfFloat16 ? "fp16" : "bf16"; }

std::string algorithm_tag(arfAlgorithm_t algorithm) {
  std::string out;
  bool upper = true;
  for (const char* p = arfAlgorithmName(algorithm); *p != '\0'; ++p) {
    if (*p == '_') {
      upper = true;
      continue;
    }
    out += upper ? static_cast<char>(std::toupper(*p)) : *p;
    upper = false;
  }
  return out;
}

bool cuda_ok(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return true;
  ADD_FAILURE() << what << ": " << cudaGetErrorName(err) << " " << cudaGetErrorString(err);
  return false;
}

std::string status_text(arfStatus_t status) {
  return std::string(arfGetStatusString(status)) + ": " + arfGetLastErrorString();
}

std::string plan_text(const arfPlan_t& plan) {
  std::ostringstream os;
  os << arfAlgorithmName(plan.algorithm) << " (inner " << arfAlgorithmName(plan.inner_allreduce)
     << ", " << plan.num_kernels << " kernels, grid " << plan.grid << ", block " << plan.block
     << (plan.forced ? ", forced" : "") << ": " << plan.reason << ")";
  return os.str();
}

// ---- HangGuard -------------------------------------------------------------------------------

struct HangGuard::State {
  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
};

HangGuard::HangGuard(double seconds, std::string what) : state_(std::make_shared<State>()) {
  std::thread([state = state_, seconds, what = std::move(what)] {
    std::unique_lock<std::mutex> lock(state->mu);
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
    if (state->cv.wait_until(lock, deadline, [&] { return state->done; })) return;
    std::fprintf(stderr, "\nHANG: %s did not finish within %.0f s (bounded waits should have "
                 "expired long before); aborting the GPU suite\n", what.c_str(), seconds);
    std::fflush(stderr);
    std::_Exit(1);
  }).detach();
}

HangGuard::~HangGuard() {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->done = true;
  }
  state_->cv.notify_all();
}

// ---- DeviceBuffer ----------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(int device, size_t bytes) : callkit::DeviceBuffer(device, bytes) {
  if (!error().empty()) ADD_FAILURE() << error();
}

// ---- World -----------------------------------------------------------------------------------

std::vector<int> test_devices(int world_size) {
  std::vector<int> listed;
  if (const char* env = std::getenv("ARF_TEST_DEVICES"); env != nullptr && *env != '\0') {
    std::stringstream ss(env);
    std::string item;
    while (std::getline(ss, item, ',')) listed.push_back(std::atoi(item.c_str()));
  }
  if (listed.empty()) listed.push_back(0);
  std::vector<int> devices(world_size);
  for (int r = 0; r < world_size; ++r) devices[r] = listed[r % listed.size()];
  return devices;
}

namespace {

// WorldOptions::per_rank: one thread per rank, each with its own config, all with one id.
bool init_ranks_one_by_one(const WorldOptions& options, const std::vector<int>& devices,
                           const arfCommConfig_t& base, std::vector<arfComm_t>* comms) {
  arfUniqueId id;
  if (arfGetUniqueId(&id) != arfSuccess) {
    ADD_FAILURE() << "arfGetUniqueId: " << arfGetLastErrorString();
    return false;
  }
  const int n = options.world_size;
  std::vector<arfStatus_t> status(n, arfSuccess);
  std::vector<std::string> message(n);
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      arfCommConfig_t c = base;
      c.transport = arfTransportLocal;
      c.rank = r;
      c.world_size = n;
      c.device = devices[r];
      c.id = id;
      options.per_rank(r, &c);
      status[r] = arfCommInitRank(&(*comms)[r], &c);
      message[r] = arfGetLastErrorString();
    });
  }
  for (std::thread& t : threads) t.join();
  bool ok = true;
  for (int r = 0; r < n; ++r) {
    if (status[r] == arfSuccess) continue;
    ADD_FAILURE() << "arfCommInitRank(rank " << r << " of " << n << "): " << message[r];
    ok = false;
  }
  if (!ok) {
    for (arfComm_t& comm : *comms) (void)arfCommDestroy(comm);
    comms->clear();
  }
  return ok;
}

}  // namespace

std::unique_ptr<World> World::create(const WorldOptions& options) {
  std::unique_ptr<World> world(new World());
  world->options_ = options;
  world->devices_ = options.devices.empty() ? test_devices(options.world_size) : options.devices;
  arfCommConfig_t config;
  arfCommConfigInit(&config);
  config.dtype = options.dtype;
  config.max_tokens = options.max_tokens;
  config.max_hidden = options.max_hidden;
  config.oneshot_max_tokens = options.oneshot_max_tokens;
  config.timeout_seconds = options.timeout_seconds;
  config.programmatic_launch = options.programmatic_launch ? 1 : 0;
  world->comms_.assign(options.world_size, nullptr);
  if (options.per_rank) {
    if (!init_ranks_one_by_one(options, world->devices_, config, &world->comms_)) return nullptr;
  } else {
    const arfStatus_t st = arfCommInitAll(world->comms_.data(), options.world_size,
                                          world->devices_.data(), &config);
    if (st != arfSuccess) {
      ADD_FAILURE() << "arfCommInitAll(world " << options.world_size << "): " << status_text(st);
      world->comms_.clear();
      return nullptr;
    }
  }
  for (int r = 0; r < options.world_size; ++r) {
    cudaStream_t stream = nullptr;
    cuda_ok(cudaSetDevice(world->devices_[r]), "cudaSetDevice");
    if (!cuda_ok(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream")) {
      return nullptr;
    }
    world->streams_.push_back(stream);
  }
  return world;
}

World::~World() {
  for (size_t r = 0; r < comms_.size(); ++r) {
    const arfStatus_t st = arfCommDestroy(comms_[r]);
    // A communicator failed by a timeout test may report its failure here; anything else is a bug.
    if (st != arfSuccess && st != arfCommFailed && st != arfTimeout) {
      ADD_FAILURE() << "arfCommDestroy(rank " << r << "): " << status_text(st);
    }
  }
  for (size_t r = 0; r < streams_.size(); ++r) {
    cudaSetDevice(devices_[r]);
    cudaStreamDestroy(streams_[r]);
  }
}

void World::run_ranks(const std::function<void(int rank)>& fn) const {
  std::vector<std::thread> threads;
  for (int r = 0; r < size(); ++r) {
    threads.emplace_back([this, r, &fn] {
      if (cuda_ok(cudaSetDevice(devices_[r]), "cudaSetDevice")) fn(r);
    });
  }
  for (std::thread& t : threads) t.join();
}

// ---- data ------------------------------------------------------------------------------------

std::string CallSpec::label() const {
  std::string label = callkit::CallSpec::label();
  if (content != Content::kRandom) label += " content " + std::to_string(static_cast<int>(content));
  return label;
}

uint64_t test_seed() {
  const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info == nullptr ? "none" : std::string(info->test_suite_name()) + "." +
                                                    info->name();
  uint64_t h = 0xCBF29CE484222325ull;  // FNV-1a
  for (char c : name) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001B3ull;
  return h;
}

namespace {

// The content's special values over one rank's random input (make_call_data drew it).
void apply_content(std::vector<uint16_t>& v, const CallSpec& spec, DType dtype, int rank,
                   int world_size) {
  const Content content = spec.content;
  if (content == Content::kNanInf) {
    sprinkle_nan_inf_input(v.data(), spec.num_tokens, spec.hidden, rank, world_size, dtype);
  }
  if (content == Content::kAllNegativeZero) std::fill(v.begin(), v.end(), 0x8000);
  if (content == Content::kAllNegativeSubnormal) std::fill(v.begin(), v.end(), 0x8001);
  if (content == Content::kSentinelMix) {
    // Three in four elements special, at positions that differ per rank so every lane of a 16-byte
    // vector sees -0.0 from some rank.
    for (size_t i = 0; i < v.size(); ++i) {
      switch ((i + 3 * static_cast<size_t>(rank)) % 4) {
        case 0: v[i] = 0x8000; break;
        case 1: v[i] = 0x8001; break;
        case 2: v[i] = static_cast<uint16_t>(0x8000 | (1 + i % 0x7F)); break;
        default: break;
      }
    }
  }
}

}  // namespace

CallData make_call_data(const CallSpec& spec, int world_size, arfDataType_t dtype, uint64_t seed) {
  const DType rd = ref_dtype(dtype);
  CallData d = callkit::make_call_data(spec, world_size, dtype, seed);
  for (int r = 0; r < world_size; ++r) apply_content(d.inputs[r], spec, rd, r, world_size);
  if (!spec.has_norm()) return d;
  if (spec.content == Content::kAllNegativeZero) {
    std::fill(d.residual_in.begin(), d.residual_in.end(), 0x8000);  // an all-zero row: norm 0
  }
  if (spec.content == Content::kNanInf) {
    sprinkle_nan_inf_residual(d.residual_in.data(), spec.num_tokens, spec.hidden, rd);
  }
  return d;
}

std::vector<CallData> make_all_call_data(const std::vector<CallSpec>& specs, int world_size,
                                         arfDataType_t dtype, uint64_t base_seed) {
  std::vector<CallData> data(specs.size());
  parallel_for(static_cast<int64_t>(specs.size()), [&](int64_t c) {
    data[c] = make_call_data(specs[c], world_size, dtype, mix_seed(base_seed, c));
  });
  return data;
}

void parallel_for(int64_t n, const std::function<void(int64_t)>& fn) {
  const int64_t workers =
      std::min<int64_t>(n, std::max(1u, std::thread::hardware_concurrency()));
  std::atomic<int64_t> next{0};
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < workers; ++w) {
    threads.emplace_back([&] {
      for (int64_t i = next++; i < n; i = next++) fn(i);
    });
  }
  for (std::thread& t : threads) t.join();
}

// ---- CallBuffers -----------------------------------------------------------------------------

CallBuffers::CallBuffers(int device, const callkit::CallSpec& spec, arfDataType_t dtype,
                         Content content)
    : callkit::CallBuffers(device, spec, dtype), content_(content) {
  if (!error().empty()) ADD_FAILURE() << error();
}

void CallBuffers::upload(const CallData& data, int rank, cudaStream_t stream) const {
  // 0xFF is NaN in every dtype: an output the kernel never wrote cannot pass. Where NaN is an
  // expected output (kNanInf) a NaN poison could, so those calls poison with a finite value.
  const int poison = content_ == Content::kNanInf ? kFinitePoisonByte : callkit::kPoisonByte;
  const std::string error = callkit::CallBuffers::upload(data, rank, stream, poison);
  if (!error.empty()) ADD_FAILURE() << error;
}

void CallBuffers::clobber_inputs(cudaStream_t stream) const {
  const std::string error = callkit::CallBuffers::clobber_inputs(stream);
  if (!error.empty()) ADD_FAILURE() << error;
}

RankOutputs CallBuffers::download(cudaStream_t stream) const {
  RankOutputs out;
  const std::string error = callkit::CallBuffers::download(stream, &out);
  if (!error.empty()) ADD_FAILURE() << error;
  return out;
}

}  // namespace arf::test
