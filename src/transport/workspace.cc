// Workspace sizing, allocation and initialisation (see workspace.h). One cudaMalloc per rank keeps
// the peer-visible state in one mapping (one IPC handle later, for the ipc transport).
#include "transport/workspace.h"

#include <cuda_runtime_api.h>

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "base/cuda_check.h"
#include "common/protocol_index.h"
#include "transport/lamport_fill.h"

namespace arf {
namespace {

constexpr int64_t align_up(int64_t v, int64_t a) { return (v + a - 1) / a * a; }

// a * b, or false when it would exceed INT64_MAX (operands are non-negative).
bool checked_mul(int64_t a, int64_t b, int64_t* out) {
  if (a != 0 && b > INT64_MAX / a) return false;
  *out = a * b;
  return true;
}

// Appends a region of count x elem_bytes at the next aligned offset; false on overflow.
bool append_region(int64_t count, int64_t elem_bytes, int64_t* cursor, int64_t* offset) {
  int64_t bytes = 0;
  if (!checked_mul(count, elem_bytes, &bytes)) return false;
  *offset = align_up(*cursor, kWorkspaceAlignBytes);
  if (bytes > INT64_MAX - kWorkspaceAlignBytes - *offset) return false;
  *cursor = *offset + bytes;
  return true;
}

}  // namespace

Result<WorkspaceLayout> workspace_layout(int world, DType dtype, int64_t max_tokens,
                                         int64_t max_hidden, int64_t oneshot_max_tokens) {
  if (world < 1 || world > kMaxRanks || max_tokens < 1 || oneshot_max_tokens < 1 ||
      oneshot_max_tokens > max_tokens || max_hidden < kElemsPerVec || max_hidden > kMaxHidden ||
      max_hidden % kElemsPerVec != 0 || dtype == DType::kFp32) {
    return invalid_argument("workspace_layout: bad capacity (world " + std::to_string(world) +
                            ", max_tokens " + std::to_string(max_tokens) + ", max_hidden " +
                            std::to_string(max_hidden) + ", oneshot_max_tokens " +
                            std::to_string(oneshot_max_tokens) + ")");
  }
  WorkspaceLayout l;
  l.world = world;
  l.dtype = dtype;
  const int64_t elem = static_cast<int64_t>(dtype_bytes(dtype));
  // Each rank owns ceil(row_vecs / world) vectors of every row in the two-shot reduce-scatter.
  const int64_t part_elems = (max_hidden / kElemsPerVec + world - 1) / world * kElemsPerVec;
  int64_t lamport_elems = 0;
  bool ok = checked_mul(oneshot_max_tokens, max_hidden, &l.lamport_slot_elems) &&
            checked_mul(max_tokens, part_elems, &l.scatter_slot_elems) &&
            checked_mul(max_tokens, max_hidden, &l.capacity_elems) &&
            checked_mul(l.lamport_slot_elems, kLamportBuffers * world, &lamport_elems);
  int64_t scatter_elems = 0;
  ok = ok && checked_mul(l.scatter_slot_elems, world, &scatter_elems);
  int64_t cursor = 0;
  ok = ok && append_region(1, sizeof(ControlBlock), &cursor, &l.ctrl_offset) &&
       append_region(int64_t{kFlagRows} * kMaxRanks, sizeof(uint64_t), &cursor, &l.flags_offset) &&
       append_region(kVerifyWords, sizeof(uint32_t), &cursor, &l.verify_offset) &&
       append_region(lamport_elems, elem, &cursor, &l.lamport_offset) &&
       append_region(l.capacity_elems, elem, &cursor, &l.pull_offset) &&
       append_region(scatter_elems, elem, &cursor, &l.scatter_offset) &&
       append_region(l.capacity_elems, elem, &cursor, &l.gather_offset) &&
       append_region(l.capacity_elems, elem, &cursor, &l.scratch_offset) &&
       append_region(kMaxRanks, sizeof(uint64_t), &cursor, &l.probe_offset);
  if (!ok) {
    return invalid_argument("workspace size overflows 64 bits (max_tokens " +
                            std::to_string(max_tokens) + ", max_hidden " +
                            std::to_string(max_hidden) + ")");
  }
  l.total_bytes = align_up(cursor, kWorkspaceAlignBytes);
  return l;
}

namespace {
char* at(void* base, int64_t offset) { return static_cast<char*>(base) + offset; }
}  // namespace

ControlBlock* Workspace::ctrl() const {
  return reinterpret_cast<ControlBlock*>(at(base, layout.ctrl_offset));
}
uint64_t* Workspace::flags() const {
  return reinterpret_cast<uint64_t*>(at(base, layout.flags_offset));
}
uint32_t* Workspace::verify() const {
  return reinterpret_cast<uint32_t*>(at(base, layout.verify_offset));
}
void* Workspace::lamport() const { return at(base, layout.lamport_offset); }
void* Workspace::pull() const { return at(base, layout.pull_offset); }
void* Workspace::scatter() const { return at(base, layout.scatter_offset); }
void* Workspace::gather() const { return at(base, layout.gather_offset); }
void* Workspace::scratch() const { return at(base, layout.scratch_offset); }
uint64_t* Workspace::probe() const {
  return reinterpret_cast<uint64_t*>(at(base, layout.probe_offset));
}

namespace {

// The counters of a workspace whose protocol state starts `before_wrap` calls short of 2^32: the
// call index, every CTA's barrier epoch and the gate epoch, and every flag word (the last epoch
// "passed", so that the first barrier waits for start + 1, written by the peers' first call).
// Flags stay zero when before_wrap is 0 (the memset).
struct CounterStart {
  ControlBlock ctrl;
  std::vector<uint64_t> flags;
};

// The initial control block: zero (before_wrap 0) or the counters near the wrap, and no call
// released (release_from UINT64_MAX: 0 would release every call).
CounterStart initial_counters(uint32_t before_wrap) {
  CounterStart c{};
  std::memset(&c.ctrl, 0, sizeof(c.ctrl));
  c.ctrl.release_from = UINT64_MAX;
  if (before_wrap == 0) return c;
  const uint32_t epoch = static_cast<uint32_t>(0 - before_wrap);
  c.ctrl.call_index = (uint64_t{1} << 32) - before_wrap;
  c.ctrl.calls_entered = c.ctrl.call_index;
  c.ctrl.gate_epoch = epoch;
  for (uint32_t& e : c.ctrl.cta_epoch) e = epoch;
  c.flags.assign(static_cast<size_t>(kFlagRows) * kMaxRanks,
                 protocol::flag_word(epoch, static_cast<uint32_t>(c.ctrl.call_index - 1)));
  return c;
}

// Zeroes the whole allocation (ControlBlock, flags and the data regions, whose content is never
// read before written) and then writes the Lamport sentinel, on a private stream so that the
// caller's streams and the legacy default stream are not serialized with init. Then the control
// block's initial state (initial_counters: nothing released; with counters_before_wrap, the
// counters near the wrap).
Status initialise(const Workspace& ws, uint32_t counters_before_wrap) {
  cudaStream_t stream = nullptr;
  ARF_CUDA_RETURN_IF_ERROR(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  Status status = cuda_status(cudaMemsetAsync(ws.base, 0, ws.layout.total_bytes, stream),
                              "cudaMemsetAsync(workspace)", __FILE__, __LINE__);
  if (status.is_ok()) {
    status = fill_negative_zero(ws.lamport(), ws.layout.lamport_elems(), ws.layout.dtype, stream);
  }
  const CounterStart start = initial_counters(counters_before_wrap);
  if (status.is_ok()) {
    // Pageable sources: the copies complete before these calls return, so `start` may go.
    status = cuda_status(cudaMemcpyAsync(ws.ctrl(), &start.ctrl, sizeof(start.ctrl),
                                         cudaMemcpyHostToDevice, stream),
                         "cudaMemcpyAsync(control block)", __FILE__, __LINE__);
    if (status.is_ok() && !start.flags.empty()) {
      status = cuda_status(cudaMemcpyAsync(ws.flags(), start.flags.data(),
                                           start.flags.size() * sizeof(uint64_t),
                                           cudaMemcpyHostToDevice, stream),
                           "cudaMemcpyAsync(flags)", __FILE__, __LINE__);
    }
  }
  if (status.is_ok()) {
    status = cuda_status(cudaStreamSynchronize(stream), "cudaStreamSynchronize(init)", __FILE__,
                         __LINE__);
  }
  const cudaError_t destroy_err = cudaStreamDestroy(stream);
  ARF_RETURN_IF_ERROR(status);
  ARF_CUDA_RETURN_IF_ERROR(destroy_err);
  return Status::ok();
}

}  // namespace

namespace {

// The ErrorRecord of a kShareable workspace: one page of a memfd, mapped shared and registered with
// CUDA, so the kernels write it through the device pointer while peer processes read their own
// (read-only) mapping of the same pages, exactly as ranks of one process read a pinned record.
constexpr size_t kErrorPageBytes = 4096;
static_assert(sizeof(ErrorRecord) <= kErrorPageBytes);

Status create_shared_error_record(Workspace* ws) {
  const int fd = static_cast<int>(::memfd_create("arfusion-error-record", MFD_CLOEXEC));
  if (fd < 0) return internal_error(std::string("memfd_create: ") + std::strerror(errno));
  ws->error_fd = fd;
  if (::ftruncate(fd, static_cast<off_t>(kErrorPageBytes)) != 0) {
    return internal_error(std::string("ftruncate(error record): ") + std::strerror(errno));
  }
  void* host = ::mmap(nullptr, kErrorPageBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (host == MAP_FAILED) return internal_error(std::string("mmap(error record): ") + std::strerror(errno));
  std::memset(host, 0, kErrorPageBytes);
  ws->error_host = static_cast<ErrorRecord*>(host);
  const cudaError_t reg =
      cudaHostRegister(host, kErrorPageBytes, cudaHostRegisterMapped | cudaHostRegisterPortable);
  if (reg != cudaSuccess) {
    ::munmap(host, kErrorPageBytes);
    ws->error_host = nullptr;
    return cuda_status(reg, "cudaHostRegister(error record memfd)", __FILE__, __LINE__);
  }
  void* device_ptr = nullptr;
  ARF_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&device_ptr, host, 0));
  ws->error_device = static_cast<ErrorRecord*>(device_ptr);
  return Status::ok();
}

Status create_private_error_record(Workspace* ws) {
  void* host = nullptr;
  // Portable: the record is read by whichever host thread polls; Mapped: the kernel writes it
  // while still running, and the host can read it without synchronizing.
  ARF_CUDA_RETURN_IF_ERROR(
      cudaHostAlloc(&host, sizeof(ErrorRecord), cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(host, 0, sizeof(ErrorRecord));
  ws->error_host = static_cast<ErrorRecord*>(host);
  void* device_ptr = nullptr;
  ARF_CUDA_RETURN_IF_ERROR(cudaHostGetDevicePointer(&device_ptr, host, 0));
  ws->error_device = static_cast<ErrorRecord*>(device_ptr);
  return Status::ok();
}

Status allocate_memory(Workspace* ws) {
  if (ws->memory == WorkspaceMemory::kPrivate) {
    ARF_CUDA_RETURN_IF_ERROR(cudaMalloc(&ws->base, static_cast<size_t>(ws->layout.total_bytes)));
    return create_private_error_record(ws);
  }
  ARF_RETURN_IF_ERROR(cumem::check_supported(ws->device));
  Result<cumem::Mapping> mapping =
      cumem::create_exportable(ws->device, static_cast<size_t>(ws->layout.total_bytes));
  if (!mapping.is_ok()) return mapping.status();
  ws->mapping = mapping.take();
  ws->base = ws->mapping.ptr;
  return create_shared_error_record(ws);
}

}  // namespace

Result<Workspace> allocate_workspace(const WorkspaceLayout& layout, int device,
                                     WorkspaceMemory memory, uint32_t counters_before_wrap) {
  ARF_CUDA_RETURN_IF_ERROR(cudaSetDevice(device));
  Workspace ws;
  ws.device = device;
  ws.layout = layout;
  ws.memory = memory;
  Status status = allocate_memory(&ws);
  if (status.is_ok()) status = initialise(ws, counters_before_wrap);
  if (!status.is_ok()) {
    (void)free_workspace(&ws);  // the first error is the one worth reporting
    return status.with_context(__FILE__, __LINE__);
  }
  return ws;
}

Result<Workspace> import_workspace(const WorkspaceLayout& layout, int device, int memory_fd,
                                   size_t mapped_bytes, int error_fd) {
  if (mapped_bytes < static_cast<size_t>(layout.total_bytes)) {
    return invalid_argument("peer workspace of " + std::to_string(mapped_bytes) +
                            " bytes is smaller than the layout's " +
                            std::to_string(layout.total_bytes));
  }
  Workspace ws;
  ws.device = device;
  ws.layout = layout;
  ws.memory = WorkspaceMemory::kShareable;
  ws.imported = true;
  Result<cumem::Mapping> mapping = cumem::import_fd(memory_fd, mapped_bytes, device);
  if (!mapping.is_ok()) return mapping.status();
  ws.mapping = mapping.take();
  ws.base = ws.mapping.ptr;
  void* host = ::mmap(nullptr, kErrorPageBytes, PROT_READ, MAP_SHARED, error_fd, 0);
  if (host == MAP_FAILED) {
    const Status s = internal_error(std::string("mmap(peer error record): ") + std::strerror(errno));
    (void)free_workspace(&ws);
    return s;
  }
  ws.error_host = static_cast<ErrorRecord*>(host);
  return ws;
}

Status free_workspace(Workspace* ws) {
  if (ws->base == nullptr && ws->error_host == nullptr && ws->error_fd < 0) return Status::ok();
  Status first;
  auto keep_first = [&first](Status s) {
    if (first.is_ok() && !s.is_ok()) first = std::move(s);
  };
  keep_first(cuda_status(cudaSetDevice(ws->device), "cudaSetDevice", __FILE__, __LINE__));
  if (ws->memory == WorkspaceMemory::kPrivate) {
    if (ws->base) keep_first(cuda_status(cudaFree(ws->base), "cudaFree(workspace)", __FILE__, __LINE__));
    if (ws->error_host) {
      keep_first(cuda_status(cudaFreeHost(ws->error_host), "cudaFreeHost", __FILE__, __LINE__));
    }
  } else {
    keep_first(cumem::release(&ws->mapping));
    if (ws->error_host) {
      if (!ws->imported) {
        keep_first(cuda_status(cudaHostUnregister(ws->error_host), "cudaHostUnregister", __FILE__,
                               __LINE__));
      }
      ::munmap(ws->error_host, kErrorPageBytes);
    }
    if (ws->error_fd >= 0) ::close(ws->error_fd);
  }
  ws->base = nullptr;
  ws->error_host = nullptr;
  ws->error_device = nullptr;
  ws->error_fd = -1;
  return first;
}

}  // namespace arf
