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

DType ref_dtype(arfDataType_t dtype) {
  switch (dtype) {
    case arfFloat16: return DType::kFp16;
    case arfFloat32: return DType::kFp32;
    default: return DType::kBf16;
  }
}

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

DeviceBuffer::DeviceBuffer(int device, size_t bytes) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  if (!cuda_ok(cudaSetDevice(device), "cudaSetDevice")) return;
  if (!cuda_ok(cudaMalloc(&ptr_, bytes), "cudaMalloc")) ptr_ = nullptr;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ == nullptr) return;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  cuda_ok(cudaFree(ptr_), "cudaFree");
  cudaSetDevice(previous);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  std::swap(ptr_, other.ptr_);
  std::swap(bytes_, other.bytes_);
  std::swap(device_, other.device_);
  return *this;
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

std::unique_ptr<World> World::create(const WorldOptions& options) {
  std::unique_ptr<World> world(new World());
  world->options_ = options;
  world->devices_ = test_devices(options.world_size);
  arfCommConfig_t config;
  arfCommConfigInit(&config);
  config.dtype = options.dtype;
  config.max_tokens = options.max_tokens;
  config.max_hidden = options.max_hidden;
  config.oneshot_max_tokens = options.oneshot_max_tokens;
  config.timeout_seconds = options.timeout_seconds;
  config.programmatic_launch = options.programmatic_launch ? 1 : 0;
  world->comms_.assign(options.world_size, nullptr);
  const arfStatus_t st = arfCommInitAll(world->comms_.data(), options.world_size,
                                        world->devices_.data(), &config);
  if (st != arfSuccess) {
    ADD_FAILURE() << "arfCommInitAll(world " << options.world_size << "): " << status_text(st);
    world->comms_.clear();
    return nullptr;
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
  std::ostringstream os;
  os << (flat ? "flat_allreduce" : arfPatternName(pattern)) << " " << arfAlgorithmName(algorithm)
     << " tokens " << num_tokens << " hidden " << hidden;
  if (gamma_fp32) os << " gamma_fp32";
  if (gamma_plus_one) os << " gamma+1";
  if (alias != kNoAlias) os << " alias 0x" << std::hex << alias << std::dec;
  if (content != Content::kRandom) os << " content " << static_cast<int>(content);
  if (no_residual) os << " no_residual";
  if (norm_rounding != arfNormRoundOnce) os << " round_before_weight";
  return os.str();
}

uint64_t mix_seed(uint64_t a, uint64_t b) {
  uint64_t z = a ^ (b + 0x9E3779B97F4A7C15ull + (a << 6) + (a >> 2));
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
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

void fill_content(std::vector<uint16_t>& v, const CallSpec& spec, DType dtype, uint64_t seed,
                  int rank, int world_size) {
  const Content content = spec.content;
  ref::fill_random(v.data(), static_cast<int64_t>(v.size()), dtype, seed);
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
  CallData d;
  d.inputs.resize(world_size);
  for (int r = 0; r < world_size; ++r) {
    d.inputs[r].resize(spec.elems());
    fill_content(d.inputs[r], spec, rd, mix_seed(seed, r + 1), r, world_size);
  }
  if (!spec.has_norm()) return d;
  d.residual_in.resize(spec.elems());
  ref::fill_random(d.residual_in.data(), spec.elems(), rd, mix_seed(seed, 1001));
  if (spec.content == Content::kAllNegativeZero) {
    std::fill(d.residual_in.begin(), d.residual_in.end(), 0x8000);  // an all-zero row: norm 0
  }
  if (spec.content == Content::kNanInf) {
    sprinkle_nan_inf_residual(d.residual_in.data(), spec.num_tokens, spec.hidden, rd);
  }
  std::vector<uint16_t> g(spec.hidden);
  ref::fill_random(g.data(), spec.hidden, rd, mix_seed(seed, 1002));
  const float base = spec.gamma_plus_one ? 0.0f : 1.0f;
  for (uint16_t bits : g) {
    const float x = ref::to_float(bits, rd);
    // 0.1003 gives fp32 gamma a full mantissa, so rounding it to the dtype would show.
    if (spec.gamma_fp32) d.gamma32.push_back(base + 0.1003f * x);
    else d.gamma16.push_back(ref::from_float(base + 0.1f * x, rd));
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

CallBuffers::CallBuffers(int device, const CallSpec& spec, arfDataType_t dtype)
    : spec_(spec), dtype_(dtype) {
  const size_t bytes = static_cast<size_t>(spec.elems()) * 2;
  input_ = DeviceBuffer(device, bytes);
  if (!spec.has_norm()) {
    if (!(spec.alias & kAllReduceInPlace)) allreduce_out_ = DeviceBuffer(device, bytes);
    return;
  }
  residual_in_ = DeviceBuffer(device, bytes);
  gamma_ = DeviceBuffer(device, static_cast<size_t>(spec.hidden) * (spec.gamma_fp32 ? 4 : 2));
  if (!(spec.alias & kResidualInPlace)) residual_out_ = DeviceBuffer(device, bytes);
  if (!(spec.alias & kNormIntoInput)) norm_out_ = DeviceBuffer(device, bytes);
}

void* CallBuffers::allreduce_out() const {
  return (spec_.alias & kAllReduceInPlace) ? input_.get() : allreduce_out_.get();
}
void* CallBuffers::residual_out() const {
  // Without a residual the in-place form writes the (unread) residual_in buffer.
  return (spec_.alias & kResidualInPlace) ? residual_in_.get() : residual_out_.get();
}
void* CallBuffers::norm_out() const {
  return (spec_.alias & kNormIntoInput) ? input_.get() : norm_out_.get();
}

void CallBuffers::upload(const CallData& data, int rank, cudaStream_t stream) const {
  const size_t bytes = static_cast<size_t>(spec_.elems()) * 2;
  cuda_ok(cudaMemcpyAsync(input_.get(), data.inputs[rank].data(), bytes, cudaMemcpyHostToDevice,
                          stream), "upload input");
  // 0xFFFF is NaN in bf16 and fp16: an output the kernel never wrote cannot pass. Where NaN is an
  // expected output (kNanInf) a NaN poison could, so those calls poison with a finite value.
  const int poison = spec_.content == Content::kNanInf ? kFinitePoisonByte : 0xFF;
  for (const DeviceBuffer* out : {&allreduce_out_, &residual_out_, &norm_out_}) {
    if (out->get() != nullptr) {
      cuda_ok(cudaMemsetAsync(out->get(), poison, bytes, stream), "poison");
    }
  }
  if (!spec_.has_norm()) return;
  cuda_ok(cudaMemcpyAsync(residual_in_.get(), data.residual_in.data(), bytes,
                          cudaMemcpyHostToDevice, stream), "upload residual");
  const void* gamma = spec_.gamma_fp32 ? static_cast<const void*>(data.gamma32.data())
                                       : static_cast<const void*>(data.gamma16.data());
  cuda_ok(cudaMemcpyAsync(gamma_.get(), gamma, gamma_.bytes(), cudaMemcpyHostToDevice, stream),
          "upload gamma");
}

arfFusedArgs_t CallBuffers::args() const {
  arfFusedArgs_t a;
  arfFusedArgsInit(&a);
  a.pattern = spec_.pattern;
  a.algorithm = spec_.algorithm;
  a.dtype = dtype_;
  a.num_tokens = static_cast<size_t>(spec_.num_tokens);
  a.hidden = static_cast<size_t>(spec_.hidden);
  a.input = input_.get();
  if (!spec_.has_norm()) {
    a.allreduce_out = allreduce_out();
    return a;
  }
  a.residual_in = spec_.no_residual ? nullptr : residual_in_.get();
  a.residual_out = residual_out();
  a.norm_rounding = spec_.norm_rounding;
  a.norm_out = norm_out();
  a.gamma = gamma_.get();
  a.gamma_dtype = spec_.gamma_fp32 ? arfFloat32 : dtype_;
  a.gamma_plus_one = spec_.gamma_plus_one ? 1 : 0;
  a.eps = spec_.eps;
  return a;
}

arfStatus_t CallBuffers::launch(arfComm_t comm, cudaStream_t stream) const {
  if (spec_.flat) {
    return arfAllReduce(comm, input_.get(), allreduce_out(), static_cast<size_t>(spec_.elems()),
                        dtype_, stream);
  }
  const arfFusedArgs_t a = args();
  return arfFusedAllReduce(comm, &a, stream);
}

void CallBuffers::clobber_inputs(cudaStream_t stream) const {
  // 0x5A5A is a large finite value in both dtypes: a late read of it corrupts a result visibly.
  const size_t bytes = static_cast<size_t>(spec_.elems()) * 2;
  auto clobber = [&](void* ptr, size_t n) {
    cuda_ok(cudaMemsetAsync(ptr, 0x5A, n, stream), "clobber input");
  };
  if (!spec_.has_norm()) {
    if (!(spec_.alias & kAllReduceInPlace)) clobber(input_.get(), bytes);
    return;
  }
  if (!(spec_.alias & kNormIntoInput)) clobber(input_.get(), bytes);
  if (!(spec_.alias & kResidualInPlace)) clobber(residual_in_.get(), bytes);
  clobber(gamma_.get(), gamma_.bytes());
}

RankOutputs CallBuffers::download(cudaStream_t stream) const {
  RankOutputs out;
  if (!cuda_ok(cudaStreamSynchronize(stream), "sync before download")) return out;
  const size_t n = static_cast<size_t>(spec_.elems());
  auto fetch = [&](void* ptr, std::vector<uint16_t>& dst) {
    dst.resize(n);
    cuda_ok(cudaMemcpy(dst.data(), ptr, n * 2, cudaMemcpyDeviceToHost), "download");
  };
  if (!spec_.has_norm()) {
    fetch(allreduce_out(), out.allreduce);
  } else {
    fetch(residual_out(), out.residual_out);
    fetch(norm_out(), out.norm_out);
  }
  return out;
}

}  // namespace arf::test
