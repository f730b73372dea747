// One rank's device buffers of one call (call_buffers.h).
#include "callkit/call_buffers.h"

#include <utility>

namespace arf::callkit {
namespace {

std::string cuda_error(cudaError_t err, const std::string& what) {
  if (err == cudaSuccess) return "";
  return what + ": " + cudaGetErrorName(err) + " " + cudaGetErrorString(err);
}

// `first` keeps the first failure of a sequence of steps.
void keep_first(std::string* first, std::string error) {
  if (first->empty()) *first = std::move(error);
}

template <typename V>
std::string fetch(const void* device, size_t bytes, V* host) {
  host->resize(bytes / sizeof((*host)[0]));
  if (device == nullptr || bytes == 0) return "";
  return cuda_error(cudaMemcpy(host->data(), device, bytes, cudaMemcpyDeviceToHost), "download");
}

}  // namespace

// ---- DeviceBuffer ----------------------------------------------------------------------------

DeviceBuffer::DeviceBuffer(int device, size_t bytes) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  error_ = cuda_error(cudaSetDevice(device), "cudaSetDevice");
  if (!error_.empty()) return;
  error_ = cuda_error(cudaMalloc(&ptr_, bytes), "cudaMalloc(" + std::to_string(bytes) + ")");
  if (!error_.empty()) ptr_ = nullptr;
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_ == nullptr) return;
  int previous = 0;
  cudaGetDevice(&previous);
  cudaSetDevice(device_);
  cudaFree(ptr_);
  cudaSetDevice(previous);
}

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept { *this = std::move(other); }

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  std::swap(ptr_, other.ptr_);
  std::swap(bytes_, other.bytes_);
  std::swap(device_, other.device_);
  std::swap(error_, other.error_);
  return *this;
}

// ---- CallBuffers -----------------------------------------------------------------------------

CallBuffers::CallBuffers(int device, const CallSpec& spec, arfDataType_t dtype)
    : spec_(spec), dtype_(dtype), scale_in_value_(spec.scale_in_value()) {
  const size_t bytes = static_cast<size_t>(spec.elems()) * 2;
  auto alloc = [&](DeviceBuffer* buffer, size_t n) {
    *buffer = DeviceBuffer(device, n);
    keep_first(&error_, buffer->error());
  };
  alloc(&input_, bytes);
  if (!spec.has_norm()) {
    if (!(spec.alias & kAllReduceInPlace)) alloc(&allreduce_out_, bytes);
    return;
  }
  alloc(&residual_in_, bytes);
  alloc(&gamma_, static_cast<size_t>(spec.gamma_bytes()));
  if (spec.post_norm) alloc(&post_gamma_, static_cast<size_t>(spec.gamma_bytes()));
  if (!(spec.alias & kResidualInPlace)) alloc(&residual_out_, bytes);
  if (!(spec.alias & kNormIntoInput) && (!spec.quantized() || spec.norm_side_output)) {
    alloc(&norm_out_, bytes);
  }
  if (!spec.quantized()) return;
  alloc(&quant_out_, static_cast<size_t>(spec.quant_bytes()));
  alloc(&scale_out_, static_cast<size_t>(spec.scale_bytes()));
  if (spec.reads_scale_in()) alloc(&scale_in_, sizeof(float));
}

CallTensors CallBuffers::tensors() const {
  CallTensors t;
  t.input = input_.get();
  t.residual_in = residual_in_.get();
  t.gamma = gamma_.get();
  t.post_gamma = post_gamma_.get();
  t.allreduce_out = allreduce_out_.get();
  t.residual_out = residual_out_.get();
  t.norm_out = norm_out_.get();
  t.quant_out = quant_out_.get();
  t.scale_out = scale_out_.get();
  t.scale_in = static_cast<const float*>(scale_in_.get());
  return t;
}

std::string CallBuffers::upload(const CallData& data, int rank, cudaStream_t stream,
                                int poison_byte) const {
  std::string error;
  auto copy = [&](const DeviceBuffer& dst, const void* src, const char* what) {
    if (dst.get() == nullptr) return;
    keep_first(&error, cuda_error(cudaMemcpyAsync(dst.get(), src, dst.bytes(),
                                                  cudaMemcpyHostToDevice, stream), what));
  };
  copy(input_, data.inputs[static_cast<size_t>(rank)].data(), "upload input");
  if (spec_.has_norm()) {
    copy(residual_in_, data.residual_in.data(), "upload residual");
    copy(gamma_, spec_.gamma_fp32 ? static_cast<const void*>(data.gamma32.data())
                                  : static_cast<const void*>(data.gamma16.data()),
         "upload gamma");
    copy(post_gamma_, spec_.gamma_fp32 ? static_cast<const void*>(data.post_gamma32.data())
                                       : static_cast<const void*>(data.post_gamma16.data()),
         "upload post_gamma");
  }
  copy(scale_in_, &scale_in_value_, "upload scale_in");
  for (const DeviceBuffer* out :
       {&allreduce_out_, &residual_out_, &norm_out_, &quant_out_, &scale_out_}) {
    if (out->get() == nullptr) continue;
    keep_first(&error, cuda_error(cudaMemsetAsync(out->get(), poison_byte, out->bytes(), stream),
                                  "poison"));
  }
  return error;
}

arfStatus_t CallBuffers::launch(arfComm_t comm, cudaStream_t stream) const {
  return launch_call(comm, spec_, dtype_, tensors(), stream);
}

std::string CallBuffers::clobber_inputs(cudaStream_t stream) const {
  const bool input_is_output = spec_.has_norm() ? (spec_.alias & kNormIntoInput) != 0
                                                : (spec_.alias & kAllReduceInPlace) != 0;
  const bool residual_is_output = spec_.has_norm() && (spec_.alias & kResidualInPlace) != 0;
  std::string error;
  for (const DeviceBuffer* in : {&input_, &residual_in_, &gamma_, &post_gamma_, &scale_in_}) {
    if (in->get() == nullptr) continue;
    if ((in == &input_ && input_is_output) || (in == &residual_in_ && residual_is_output)) {
      continue;
    }
    keep_first(&error, cuda_error(cudaMemsetAsync(in->get(), kClobberByte, in->bytes(), stream),
                                  "clobber input"));
  }
  return error;
}

std::string CallBuffers::download(cudaStream_t stream, RankOutputs* out) const {
  std::string error = cuda_error(cudaStreamSynchronize(stream), "synchronize before download");
  if (!error.empty()) return error;
  const arfFusedArgs_t a = args();
  const size_t bytes = static_cast<size_t>(spec_.elems()) * 2;
  if (!spec_.has_norm()) return fetch(a.allreduce_out, bytes, &out->allreduce);
  keep_first(&error, fetch(a.residual_out, bytes, &out->residual_out));
  keep_first(&error, fetch(a.norm_out, a.norm_out == nullptr ? 0 : bytes, &out->norm_out));
  keep_first(&error, fetch(quant_out_.get(), quant_out_.bytes(), &out->quant_out));
  keep_first(&error, fetch(scale_out_.get(), scale_out_.bytes(), &out->scale_out));
  return error;
}

}  // namespace arf::callkit
