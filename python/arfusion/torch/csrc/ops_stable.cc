// torch.ops.arfusion.*: the schemas and CUDA kernels of the arfusion ops, written against torch's
// stable ABI (torch >= 2.10), the one implementation of every op. The package's build compiles
// this file against the installing interpreter's torch (cmake/torch_ops.cmake, targeting the 2.10
// ABI) into arfusion/torch/libarfusion_torch_ops.so; arfusion/torch/_oplib.py loads it and
// arfusion/torch/ops.py registers the fake implementations tracing uses (and documents the ops).
//
// Communicators are named by strings (compiled graphs never hold pointers): Python's
// Communicator registers its handle here under its name (arfusion_torch_register) and removes it
// before arfCommDestroy (arfusion_torch_unregister).
//
// Errors are std::runtime_error (torch raises RuntimeError). A failure of the library reads
//   arfusion error [<arfStatus_t name>] in <C function> (communicator '<name>'[, first lost call N]): <message>
// and an argument refused here "arfusion.<op>: <why>"; arfusion.torch.ops.translate_error turns
// them into arfusion.ArfError and ValueError.
#include <torch/csrc/stable/library.h>
#include <torch/csrc/stable/ops.h>
#include <torch/csrc/stable/tensor.h>
#include <torch/headeronly/core/ScalarType.h>

#include <arfusion/arfusion.h>

#include <cstdint>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

// In the C shim, but declared there only under USE_CUDA (a torch build macro).
extern "C" AOTITorchError aoti_torch_get_current_cuda_stream(int32_t device_index, void** ret_stream);

namespace {

using torch::headeronly::ScalarType;
using torch::stable::Tensor;

struct RegisteredComm {
  arfComm_t comm;
  int32_t device;
};

std::mutex registry_mutex;
std::unordered_map<std::string, RegisteredComm>& registry() {
  static auto* map = new std::unordered_map<std::string, RegisteredComm>();  // never destroyed:
  return *map;  // a call at interpreter exit must not meet a destroyed map
}

const char* status_name(arfStatus_t s) {
  switch (s) {
    case arfSuccess: return "arfSuccess";
    case arfInvalidArgument: return "arfInvalidArgument";
    case arfUnsupported: return "arfUnsupported";
    case arfCudaError: return "arfCudaError";
    case arfNcclError: return "arfNcclError";
    case arfTimeout: return "arfTimeout";
    case arfInternal: return "arfInternal";
    case arfCommFailed: return "arfCommFailed";
  }
  return "arfUnknownStatus";
}

[[noreturn]] void fail(const std::string& what) { throw std::runtime_error(what); }

RegisteredComm lookup(const std::string& name) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  auto it = registry().find(name);
  if (it == registry().end()) {
    std::string known;
    for (const auto& [k, v] : registry()) known += (known.empty() ? "'" : ", '") + k + "'";
    fail("arfusion: no communicator named '" + name + "' in this process (registered: " +
         (known.empty() ? std::string("none") : known) +
         "); create it with arfusion.torch.Communicator.from_group(..., name=...) before running "
         "the model (a compiled graph refers to communicators by name)");
  }
  return it->second;
}

// ", first lost call N" once the communicator has an asynchronous error, else "".
std::string first_lost_call_text(const RegisteredComm& c) {
  uint64_t call = UINT64_MAX;
  if (arfCommGetFirstLostCall(c.comm, &call) != arfSuccess || call == UINT64_MAX) return "";
  return ", first lost call " + std::to_string(call);
}

// The library's failure as an exception: the call's own message, and the communicator's
// asynchronous error and first lost call when there is one (the Python binding's raise_failure).
[[noreturn]] void raise_failure(const RegisteredComm& c, const std::string& name, arfStatus_t status,
                                const char* function) {
  std::string message = arfGetLastErrorString();
  arfStatus_t async_status = arfCommGetAsyncError(c.comm);
  std::string lost;
  if (async_status != arfSuccess) {
    std::string async_message = arfGetLastErrorString();
    lost = first_lost_call_text(c);
    if (!async_message.empty() && message.find(async_message) == std::string::npos)
      message += std::string("; asynchronous error ") + status_name(async_status) + ": " + async_message;
    if (status == arfCommFailed) status = async_status;  // the cause, not the refusal
  }
  fail(std::string("arfusion error [") + status_name(status) + "] in " + function +
       " (communicator '" + name + "'" + lost + "): " + message);
}

// After a launch: an asynchronous error seen now (no synchronization) fails this call.
void check_async(const RegisteredComm& c, const std::string& name) {
  arfStatus_t status = arfCommGetAsyncError(c.comm);
  if (status == arfSuccess) return;
  std::string message = arfGetLastErrorString();
  fail(std::string("arfusion error [") + status_name(status) + "] in arfCommGetAsyncError (communicator '" +
       name + "'" + first_lost_call_text(c) + "): " + message);
}

// torch::stable::contiguous is a dispatcher call even for a contiguous tensor (~1 us of host
// time through the stable ABI); most inputs already are.
Tensor contiguous_of(const Tensor& t) { return t.is_contiguous() ? t : torch::stable::contiguous(t); }

void check_shim(AOTITorchError e, const char* what) {
  if (e != AOTI_TORCH_SUCCESS) fail(std::string("arfusion: ") + what + " failed");
}

// A new contiguous CUDA tensor of x's sizes, dtype and device (x: a CUDA tensor). The outputs of
// the out-of-place ops: the stable ABI's empty_like goes through the boxed dispatcher (a few us
// per call, measured), the C shim's empty_strided calls the allocator directly.
Tensor empty_contiguous_like(const Tensor& x) {
  const int64_t ndim = x.dim();
  std::vector<int64_t> sizes(static_cast<size_t>(ndim)), strides(static_cast<size_t>(ndim));
  int64_t stride = 1;
  for (int64_t d = ndim - 1; d >= 0; --d) {
    sizes[d] = x.size(d);
    strides[d] = stride;
    stride *= sizes[d] > 1 ? sizes[d] : 1;
  }
  int32_t dtype = 0;
  check_shim(aoti_torch_get_dtype(x.get(), &dtype), "aoti_torch_get_dtype");
  AtenTensorHandle out = nullptr;
  check_shim(aoti_torch_empty_strided(ndim, sizes.data(), strides.data(), dtype, aoti_torch_device_type_cuda(),
                                      x.get_device_index(), &out),
             "aoti_torch_empty_strided");
  return Tensor(out);
}

cudaStream_t current_stream(int32_t device) {
  void* stream = nullptr;
  if (aoti_torch_get_current_cuda_stream(device, &stream) != AOTI_TORCH_SUCCESS)
    fail("arfusion: cannot read torch's current CUDA stream of device " + std::to_string(device));
  return static_cast<cudaStream_t>(stream);
}

std::string shape_string(const Tensor& t) {
  std::string s = "(";
  for (int64_t d = 0; d < t.dim(); ++d) s += (d ? ", " : "") + std::to_string(t.size(d));
  return s + (t.dim() == 1 ? ",)" : ")");
}

const char* dtype_name(ScalarType t) {
  switch (t) {
    case ScalarType::BFloat16: return "torch.bfloat16";
    case ScalarType::Half: return "torch.float16";
    case ScalarType::Float: return "torch.float32";
    default: return "another dtype";
  }
}

std::optional<arfDataType_t> arf_dtype(ScalarType t) {
  switch (t) {
    case ScalarType::BFloat16: return arfBFloat16;
    case ScalarType::Half: return arfFloat16;
    case ScalarType::Float: return arfFloat32;
    default: return std::nullopt;
  }
}

struct RowsHidden {
  int64_t rows, hidden;
};

RowsHidden rows_hidden(const Tensor& input) {
  if (input.dim() < 1) fail("arfusion: input must have at least one dimension (the hidden size last)");
  int64_t hidden = input.size(input.dim() - 1);
  return {hidden != 0 ? input.numel() / hidden : 0, hidden};
}

RowsHidden check_common(const Tensor& input, const Tensor* residual, const Tensor& weight,
                        const char* what) {
  RowsHidden rh = rows_hidden(input);
  const std::string op = std::string("arfusion.") + what + ": ";
  if (residual != nullptr) {
    bool same = residual->dim() == input.dim();
    for (int64_t d = 0; same && d < input.dim(); ++d) same = residual->size(d) == input.size(d);
    if (!same)
      fail(op + "residual shape " + shape_string(*residual) + " != input shape " + shape_string(input));
    if (residual->scalar_type() != input.scalar_type())
      fail(op + "residual dtype " + dtype_name(residual->scalar_type()) + " != input dtype " +
           dtype_name(input.scalar_type()));
  }
  if (weight.dim() != 1 || weight.size(0) != rh.hidden)
    fail(op + "weight must be 1-D of the hidden size " + std::to_string(rh.hidden) + ", got shape " +
         shape_string(weight));
  if (weight.scalar_type() != input.scalar_type() && weight.scalar_type() != ScalarType::Float)
    fail(op + "weight dtype " + dtype_name(weight.scalar_type()) + " must be the input's (" +
         dtype_name(input.scalar_type()) + ") or torch.float32");
  return rh;
}

void on_device(const RegisteredComm& c, const std::string& name, const char* what, const char* tensor,
               const Tensor& t) {
  if (!t.is_cuda() || t.get_device_index() != c.device)
    fail(std::string("arfusion.") + what + ": " + tensor + " is on " +
         (t.is_cuda() ? "cuda:" + std::to_string(t.get_device_index()) : std::string("cpu")) +
         ", the communicator '" + name + "' on cuda:" + std::to_string(c.device));
}

arfNormRounding_t norm_rounding_value(const std::string& s) {
  if (s == "once") return arfNormRoundOnce;
  if (s == "before_weight") return arfNormRoundBeforeWeight;
  fail("arfusion: norm_rounding must be one of ('once', 'before_weight'), not '" + s + "'");
}

arfAlgorithm_t algorithm_value(const std::string& s) {
  arfAlgorithm_t a;
  if (arfAlgorithmFromName(s.c_str(), &a) != arfSuccess)
    fail("arfusion: unknown algorithm '" + s +
         "' (auto, oneshot_lamport, oneshot_pull, twoshot, unfused, nccl)");
  return a;
}

// The activation dtype as the library's: the input's own (a call in another dtype than the
// communicator's is the library's to refuse, arfInvalidArgument), never the communicator's.
arfDataType_t activation_dtype(const Tensor& input, const char* what) {
  ScalarType t = input.scalar_type();
  if (t != ScalarType::BFloat16 && t != ScalarType::Half)
    fail(std::string("arfusion.") + what + ": input dtype " + dtype_name(t) +
         ": the activation dtype is torch.bfloat16 or torch.float16");
  return *arf_dtype(t);
}

arfFusedArgs_t norm_args(arfDataType_t dtype, int64_t rows, int64_t hidden, const Tensor& weight,
                         double eps, bool gamma_plus_one, const std::string& norm_rounding,
                         const std::string& algorithm) {
  arfFusedArgs_t a;
  arfFusedArgsInit(&a);
  a.pattern = arfPatternResidualRmsNorm;
  a.algorithm = algorithm_value(algorithm);
  a.dtype = dtype;
  a.num_tokens = static_cast<size_t>(rows);
  a.hidden = static_cast<size_t>(hidden);
  a.gamma = weight.data_ptr();
  a.gamma_dtype = *arf_dtype(weight.scalar_type());
  a.gamma_plus_one = gamma_plus_one ? 1 : 0;
  a.eps = static_cast<float>(eps);
  a.norm_rounding = norm_rounding_value(norm_rounding);
  return a;
}

// A sandwich call's post-norm weight (arfFusedArgs_t::post_gamma): 1-D of the hidden size in the
// norm weight's dtype (the library reads both with one gamma_dtype), on the communicator's device.
// Returns the contiguous tensor the call reads; the library refuses the call (arfUnsupported) until
// sandwich calls are offered.
std::optional<Tensor> post_weight_of(const RegisteredComm& c, const std::string& name, const char* what,
                                     const std::optional<Tensor>& post_weight, const Tensor& weight,
                                     int64_t hidden) {
  if (!post_weight) return std::nullopt;
  const std::string op = std::string("arfusion.") + what + ": ";
  if (post_weight->dim() != 1 || post_weight->size(0) != hidden)
    fail(op + "post_weight must be 1-D of the hidden size " + std::to_string(hidden) + ", got shape " +
         shape_string(*post_weight));
  if (post_weight->scalar_type() != weight.scalar_type())
    fail(op + "post_weight dtype " + dtype_name(post_weight->scalar_type()) + " != weight dtype " +
         dtype_name(weight.scalar_type()) + " (the library reads both norms' weights in one dtype)");
  on_device(c, name, what, "post_weight", *post_weight);
  return contiguous_of(*post_weight);
}

void launch(const RegisteredComm& c, const std::string& name, const arfFusedArgs_t& a) {
  arfStatus_t s = arfFusedAllReduce(c.comm, &a, current_stream(c.device));
  if (s != arfSuccess) raise_failure(c, name, s, "arfFusedAllReduce");
  check_async(c, name);
}

// residual := all_reduce(input) + residual; input := RMSNorm(residual) * weight.
void fused_add_rms_norm(Tensor input, Tensor residual, Tensor weight, double eps, std::string comm,
                        bool gamma_plus_one, std::string norm_rounding, std::string algorithm) {
  RegisteredComm c = lookup(comm);
  RowsHidden rh = check_common(input, &residual, weight, "fused_add_rms_norm");
  on_device(c, comm, "fused_add_rms_norm", "input", input);
  on_device(c, comm, "fused_add_rms_norm", "residual", residual);
  on_device(c, comm, "fused_add_rms_norm", "weight", weight);
  if (!input.is_contiguous() || !residual.is_contiguous())
    fail("arfusion.fused_add_rms_norm: input and residual are written in place and must be contiguous");
  if (rh.rows == 0) return;
  Tensor w = contiguous_of(weight);
  arfFusedArgs_t a = norm_args(activation_dtype(input, "fused_add_rms_norm"), rh.rows, rh.hidden, w,
                               eps, gamma_plus_one, norm_rounding, algorithm);
  a.input = input.data_ptr();
  a.residual_in = residual.data_ptr();
  a.residual_out = residual.data_ptr();
  a.norm_out = input.data_ptr();
  launch(c, comm, a);
}

// -> (norm_out, residual_out); residual None: residual_out = all_reduce(input).
// post_weight set: a sandwich call (h = RMSNorm(all_reduce(input)) * post_weight, rounded;
// residual_out = h + residual; norm_out = RMSNorm(residual_out) * weight).
std::tuple<Tensor, Tensor> fused_add_rms_norm_out(Tensor input, std::optional<Tensor> residual,
                                                  Tensor weight, double eps, std::string comm,
                                                  bool gamma_plus_one, std::string norm_rounding,
                                                  std::string algorithm,
                                                  std::optional<Tensor> post_weight) {
  RegisteredComm c = lookup(comm);
  RowsHidden rh = check_common(input, residual ? &*residual : nullptr, weight, "fused_add_rms_norm_out");
  on_device(c, comm, "fused_add_rms_norm_out", "input", input);
  if (residual) on_device(c, comm, "fused_add_rms_norm_out", "residual", *residual);
  on_device(c, comm, "fused_add_rms_norm_out", "weight", weight);
  std::optional<Tensor> pw =
      post_weight_of(c, comm, "fused_add_rms_norm_out", post_weight, weight, rh.hidden);
  Tensor x = contiguous_of(input);
  Tensor norm = empty_contiguous_like(x);
  Tensor res_out = empty_contiguous_like(x);
  if (rh.rows == 0) return {norm, res_out};
  std::optional<Tensor> r;
  if (residual) r = contiguous_of(*residual);
  Tensor w = contiguous_of(weight);
  arfFusedArgs_t a = norm_args(activation_dtype(input, "fused_add_rms_norm_out"), rh.rows, rh.hidden,
                               w, eps, gamma_plus_one, norm_rounding, algorithm);
  a.input = x.data_ptr();
  a.residual_in = r ? r->data_ptr() : nullptr;
  a.residual_out = res_out.data_ptr();
  a.norm_out = norm.data_ptr();
  a.post_gamma = pw ? pw->data_ptr() : nullptr;
  launch(c, comm, a);
  return {norm, res_out};
}

void all_reduce_into(const RegisteredComm& c, const std::string& name, const Tensor& in, void* out) {
  arfDataType_t dt = activation_dtype(in, "all_reduce");
  arfStatus_t s = arfAllReduce(c.comm, in.data_ptr(), out, static_cast<size_t>(in.numel()), dt,
                               current_stream(c.device));
  if (s != arfSuccess) raise_failure(c, name, s, "arfAllReduce");
  check_async(c, name);
}

Tensor all_reduce(Tensor input, std::string comm) {
  RegisteredComm c = lookup(comm);
  on_device(c, comm, "all_reduce", "input", input);
  Tensor x = contiguous_of(input);
  Tensor out = empty_contiguous_like(x);
  if (x.numel() == 0) return out;
  all_reduce_into(c, comm, x, out.data_ptr());
  return out;
}

void all_reduce_(Tensor input, std::string comm) {
  RegisteredComm c = lookup(comm);
  on_device(c, comm, "all_reduce_", "input", input);
  if (!input.is_contiguous())
    fail("arfusion.all_reduce_: the input is written in place and must be contiguous");
  if (input.numel() == 0) return;
  all_reduce_into(c, comm, input, input.data_ptr());
}

// ---- fused_add_rms_norm_quant: outputs shaped as the library lays them out (arfQuantOutputLayout)

struct QuantCall {
  arfPattern_t pattern;
  arfScaleLayout_t layout;
  arfScaleFormat_t format;
};

QuantCall parse_quant(const std::string& quant, const std::string& layout, const std::string& format) {
  const std::string op = "arfusion.fused_add_rms_norm_quant: ";
  QuantCall q{};
  if (quant == "fp8_per_tensor") q.pattern = arfPatternResidualRmsNormFp8PerTensor;
  else if (quant == "fp8_per_token") q.pattern = arfPatternResidualRmsNormFp8PerToken;
  else if (quant == "fp8_per_group") q.pattern = arfPatternResidualRmsNormFp8PerGroup;
  else if (quant == "nvfp4") q.pattern = arfPatternResidualRmsNormNvfp4;
  else if (quant == "mxfp4") q.pattern = arfPatternResidualRmsNormMxfp4;
  else fail(op + "unknown quant '" + quant + "' (fp8_per_tensor, fp8_per_token, fp8_per_group, nvfp4, mxfp4)");
  if (layout == "row_major") q.layout = arfScaleRowMajor;
  else if (layout == "mn_major") q.layout = arfScaleMnMajor;
  else if (layout == "swizzled_128x4") q.layout = arfScaleSwizzled128x4;
  else fail(op + "unknown scale_layout '" + layout + "' (row_major, mn_major, swizzled_128x4)");
  if (format == "fp32") q.format = arfScaleFp32;
  else if (format == "ue8m0_as_fp32") q.format = arfScaleUe8m0AsFp32;
  else if (format == "ue8m0_packed") q.format = arfScaleUe8m0Packed;
  else fail(op + "unknown scale_format '" + format + "' (fp32, ue8m0_as_fp32, ue8m0_packed)");
  return q;
}

ScalarType element_dtype(arfElementType_t e) {
  switch (e) {
    case arfElementFloat32: return ScalarType::Float;
    case arfElementFloat8E4M3: return ScalarType::Float8_e4m3fn;
    case arfElementUInt8: return ScalarType::Byte;
  }
  fail("arfusion.fused_add_rms_norm_quant: the library named an unknown element type");
}

std::vector<int64_t> buffer_shape(const arfQuantBuffer_t& b) {
  return std::vector<int64_t>(b.dims, b.dims + b.rank);
}

std::tuple<Tensor, Tensor, Tensor, Tensor> fused_add_rms_norm_quant(
    Tensor input, std::optional<Tensor> residual, Tensor weight, std::optional<Tensor> scale, double eps,
    std::string comm, std::string quant, std::string scale_layout, std::string scale_format,
    bool with_norm, bool gamma_plus_one, std::string norm_rounding, std::string algorithm,
    int64_t fallback, std::string scale_rule, std::optional<Tensor> post_weight) {
  const char* what = "fused_add_rms_norm_quant";
  const std::string op = std::string("arfusion.") + what + ": ";
  RegisteredComm c = lookup(comm);
  RowsHidden rh = check_common(input, residual ? &*residual : nullptr, weight, what);
  const QuantCall q = parse_quant(quant, scale_layout, scale_format);
  const bool needs_scale = quant == "fp8_per_tensor" || quant == "nvfp4";
  if (needs_scale) {
    if (!scale) fail(op + quant + " needs `scale` (a float32 device tensor of one element)");
    if (scale->scalar_type() != ScalarType::Float || scale->numel() != 1)
      fail(op + "`scale` must be a float32 tensor of one element, got " + dtype_name(scale->scalar_type()) +
           " with " + std::to_string(scale->numel()) + " elements");
  } else if (scale) {
    fail(op + quant + " takes no input `scale`");
  }
  arfFp8ScaleRule_t rule = arfFp8ScaleDivide;
  if (scale_rule == "times_reciprocal") rule = arfFp8ScaleTimesReciprocal;
  else if (scale_rule != "divide")
    fail("arfusion: unknown scale_rule '" + scale_rule + "' (one of 'divide', 'times_reciprocal')");
  if (rule != arfFp8ScaleDivide && quant != "fp8_per_token" && quant != "fp8_per_group")
    fail(op + "scale_rule '" + scale_rule + "' applies to fp8_per_token and fp8_per_group only, not " + quant);
  on_device(c, comm, what, "input", input);
  if (residual) on_device(c, comm, what, "residual", *residual);
  on_device(c, comm, what, "weight", weight);
  if (scale) on_device(c, comm, what, "scale", *scale);
  std::optional<Tensor> pw = post_weight_of(c, comm, what, post_weight, weight, rh.hidden);
  arfQuantOutputs_t out;
  if (arfQuantOutputLayout(q.pattern, q.layout, q.format, static_cast<size_t>(rh.rows),
                           static_cast<size_t>(rh.hidden), &out) != arfSuccess)
    fail(op + arfGetLastErrorString());
  // quant_out is [tokens, columns]: the input's leading dimensions stand for the tokens
  std::vector<int64_t> q_shape;
  for (int64_t d = 0; d + 1 < input.dim(); ++d) q_shape.push_back(input.size(d));
  q_shape.push_back(static_cast<int64_t>(out.quant_out.dims[1]));
  Tensor x = contiguous_of(input);
  Tensor q_out = torch::stable::new_empty(x, q_shape, element_dtype(out.quant_out.element));
  Tensor s_out = torch::stable::new_empty(x, buffer_shape(out.scale_out), element_dtype(out.scale_out.element));
  Tensor res_out = empty_contiguous_like(x);
  Tensor norm = with_norm ? empty_contiguous_like(x) : torch::stable::new_empty(x, {0});
  if (rh.rows == 0) return {q_out, s_out, res_out, norm};
  std::optional<Tensor> r;
  if (residual) r = contiguous_of(*residual);
  Tensor w = contiguous_of(weight);
  arfFusedArgs_t a = norm_args(activation_dtype(input, what), rh.rows, rh.hidden, w, eps, gamma_plus_one,
                               norm_rounding, algorithm);
  a.pattern = q.pattern;
  a.scale_layout = q.layout;
  a.scale_format = q.format;
  a.fallback = static_cast<arfFallbackLevel_t>(fallback);
  a.scale_rule = rule;
  a.input = x.data_ptr();
  a.residual_in = r ? r->data_ptr() : nullptr;
  a.residual_out = res_out.data_ptr();
  a.norm_out = with_norm ? norm.data_ptr() : nullptr;
  a.quant_out = q_out.data_ptr();
  a.scale_out = out.scale_out.bytes != 0 ? s_out.data_ptr() : nullptr;
  a.scale_in = scale ? static_cast<const float*>(scale->data_ptr()) : nullptr;
  a.post_gamma = pw ? pw->data_ptr() : nullptr;
  launch(c, comm, a);
  return {q_out, s_out, res_out, norm};
}

}  // namespace

// The schemas (ops.py documents the arguments); the kernels above take exactly these arguments.
STABLE_TORCH_LIBRARY(arfusion, m) {
  m.def("fused_add_rms_norm(Tensor(a!) input, Tensor(b!) residual, Tensor weight, float eps, str comm, "
        "bool gamma_plus_one=False, str norm_rounding=\"once\", str algorithm=\"auto\") -> ()");
  m.def("fused_add_rms_norm_out(Tensor input, Tensor? residual, Tensor weight, float eps, str comm, "
        "bool gamma_plus_one=False, str norm_rounding=\"once\", str algorithm=\"auto\", "
        "Tensor? post_weight=None) -> (Tensor, Tensor)");
  m.def("fused_add_rms_norm_quant(Tensor input, Tensor? residual, Tensor weight, Tensor? scale, float eps, "
        "str comm, str quant, str scale_layout=\"row_major\", str scale_format=\"fp32\", "
        "bool with_norm=False, bool gamma_plus_one=False, str norm_rounding=\"once\", "
        "str algorithm=\"auto\", int fallback=0, str scale_rule=\"divide\", Tensor? post_weight=None) "
        "-> (Tensor, Tensor, Tensor, Tensor)");
  m.def("all_reduce(Tensor input, str comm) -> Tensor");
  m.def("all_reduce_(Tensor(a!) input, str comm) -> ()");
}

STABLE_TORCH_LIBRARY_IMPL(arfusion, CUDA, m) {
  m.impl("fused_add_rms_norm", TORCH_BOX(&fused_add_rms_norm));
  m.impl("fused_add_rms_norm_out", TORCH_BOX(&fused_add_rms_norm_out));
  m.impl("fused_add_rms_norm_quant", TORCH_BOX(&fused_add_rms_norm_quant));
  m.impl("all_reduce", TORCH_BOX(&all_reduce));
  m.impl("all_reduce_", TORCH_BOX(&all_reduce_));
}

// The C side Python uses (ctypes) to learn what this library implements and to name communicators.
extern "C" {

__attribute__((visibility("default"))) unsigned arfusion_torch_ops_api_version() {
  return ARF_API_VERSION;  // the header this library was built against
}

// The arfAbiQuery this library calls: Python compares it with the one of the libarfusion.so it
// loaded, since the kernels are handed that library's communicator handles.
__attribute__((visibility("default"))) void* arfusion_torch_ops_arf_abi_query() {
  return reinterpret_cast<void*>(&arfAbiQuery);
}

// 0: registered; 1: the name is taken.
__attribute__((visibility("default"))) int arfusion_torch_register(const char* name, void* comm,
                                                                   int device) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  bool inserted = registry().emplace(name, RegisteredComm{static_cast<arfComm_t>(comm), device}).second;
  return inserted ? 0 : 1;
}

__attribute__((visibility("default"))) void arfusion_torch_unregister(const char* name) {
  std::lock_guard<std::mutex> lock(registry_mutex);
  registry().erase(name);
}

}  // extern "C"
