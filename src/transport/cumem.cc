// cuMem with POSIX file-descriptor handles (cumem.h), through driver entry points resolved at run
// time: no link dependency on libcuda.
#include "transport/cumem.h"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <mutex>
#include <string>

#include "base/cuda_check.h"

namespace arf::cumem {
namespace {

// decltype of the declarations in cuda.h: only types, so nothing links against libcuda.
struct Driver {
  decltype(&::cuDeviceGet) device_get = nullptr;
  decltype(&::cuDeviceGetAttribute) device_get_attribute = nullptr;
  decltype(&::cuMemGetAllocationGranularity) granularity = nullptr;
  decltype(&::cuMemCreate) create = nullptr;
  decltype(&::cuMemExportToShareableHandle) export_handle = nullptr;
  decltype(&::cuMemImportFromShareableHandle) import_handle = nullptr;
  decltype(&::cuMemAddressReserve) reserve = nullptr;
  decltype(&::cuMemMap) map = nullptr;
  decltype(&::cuMemSetAccess) set_access = nullptr;
  decltype(&::cuMemUnmap) unmap = nullptr;
  decltype(&::cuMemAddressFree) address_free = nullptr;
  decltype(&::cuMemRelease) release = nullptr;
  decltype(&::cuGetErrorString) error_string = nullptr;
  std::string missing;  // why the driver API is unusable ("" when every entry point resolved)
};

template <typename Fn>
void resolve(const char* name, Fn* fn, std::string* missing) {
  void* ptr = nullptr;
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
  // 12000: the ABI of each function as of CUDA 12.0 (all of these are older and unchanged since).
  const cudaError_t err = cudaGetDriverEntryPointByVersion(name, &ptr, 12000, cudaEnableDefault, &found);
  if (err != cudaSuccess || found != cudaDriverEntryPointSuccess || ptr == nullptr) {
    if (missing->empty()) {
      *missing = std::string("driver entry point ") + name + " unavailable (" +
                 cudaGetErrorString(err) + ")";
    }
    return;
  }
  *fn = reinterpret_cast<Fn>(ptr);
}

const Driver& driver() {
  static Driver d;
  static std::once_flag once;
  std::call_once(once, [] {
    resolve("cuDeviceGet", &d.device_get, &d.missing);
    resolve("cuDeviceGetAttribute", &d.device_get_attribute, &d.missing);
    resolve("cuMemGetAllocationGranularity", &d.granularity, &d.missing);
    resolve("cuMemCreate", &d.create, &d.missing);
    resolve("cuMemExportToShareableHandle", &d.export_handle, &d.missing);
    resolve("cuMemImportFromShareableHandle", &d.import_handle, &d.missing);
    resolve("cuMemAddressReserve", &d.reserve, &d.missing);
    resolve("cuMemMap", &d.map, &d.missing);
    resolve("cuMemSetAccess", &d.set_access, &d.missing);
    resolve("cuMemUnmap", &d.unmap, &d.missing);
    resolve("cuMemAddressFree", &d.address_free, &d.missing);
    resolve("cuMemRelease", &d.release, &d.missing);
    resolve("cuGetErrorString", &d.error_string, &d.missing);
  });
  return d;
}

Status driver_status(CUresult r, const char* what, arfStatus_t code = arfCudaError) {
  if (r == CUDA_SUCCESS) return Status::ok();
  const char* text = nullptr;
  if (driver().error_string != nullptr) driver().error_string(r, &text);
  return Status(code, std::string(what) + " failed: " + (text ? text : "CUresult ") +
                          (text ? "" : std::to_string(static_cast<int>(r))));
}

#define ARF_CU_RETURN_IF_ERROR(expr) ARF_RETURN_IF_ERROR(driver_status((expr), #expr))

CUdeviceptr as_cu(void* p) { return static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(p)); }
void* as_ptr(CUdeviceptr p) { return reinterpret_cast<void*>(static_cast<uintptr_t>(p)); }

CUmemAllocationProp exportable_prop(CUdevice device) {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  prop.requestedHandleTypes = CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR;
  return prop;
}

// Reserves an address range for `bytes`, maps `handle` there and enables read/write from `device`.
// On failure undoes what it did (the handle stays the caller's).
Status map_and_enable(uint64_t handle, size_t bytes, CUdevice device, void** out) {
  const Driver& d = driver();
  CUdeviceptr va = 0;
  ARF_CU_RETURN_IF_ERROR(d.reserve(&va, bytes, 0, 0, 0));
  Status s = driver_status(d.map(va, bytes, 0, handle, 0), "cuMemMap");
  if (!s.is_ok()) {
    (void)d.address_free(va, bytes);
    return s;
  }
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = device;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  // Unsupported: the usual cause is no peer path between the owner's device and this one.
  s = driver_status(d.set_access(va, bytes, &access, 1), "cuMemSetAccess", arfUnsupported);
  if (!s.is_ok()) {
    (void)d.unmap(va, bytes);
    (void)d.address_free(va, bytes);
    return s;
  }
  *out = as_ptr(va);
  return Status::ok();
}

Result<CUdevice> cu_device(int ordinal) {
  const Driver& d = driver();
  if (!d.missing.empty()) return unsupported("cuMem: " + d.missing);
  // The runtime creates (and makes current) the device's primary context, which cuMem needs.
  ARF_CUDA_RETURN_IF_ERROR(cudaSetDevice(ordinal));
  ARF_CUDA_RETURN_IF_ERROR(cudaFree(nullptr));
  CUdevice dev = 0;
  ARF_CU_RETURN_IF_ERROR(d.device_get(&dev, ordinal));
  return dev;
}

}  // namespace

Status check_supported(int device) {
  Result<CUdevice> dev = cu_device(device);
  if (!dev.is_ok()) return dev.status();
  const Driver& d = driver();
  int vmm = 0;
  int fd_handles = 0;
  ARF_CU_RETURN_IF_ERROR(d.device_get_attribute(
      &vmm, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, dev.value()));
  ARF_CU_RETURN_IF_ERROR(d.device_get_attribute(
      &fd_handles, CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED, dev.value()));
  if (!vmm || !fd_handles) {
    return unsupported("device " + std::to_string(device) + " lacks " +
                       (!vmm ? "virtual memory management" : "POSIX file descriptor handles") +
                       " (cuMem), which the ipc transport needs");
  }
  return Status::ok();
}

Result<Mapping> create_exportable(int device, size_t min_bytes) {
  Result<CUdevice> dev = cu_device(device);
  if (!dev.is_ok()) return dev.status();
  const Driver& d = driver();
  const CUmemAllocationProp prop = exportable_prop(dev.value());
  size_t granularity = 0;
  ARF_CU_RETURN_IF_ERROR(
      d.granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED));
  if (granularity == 0) return internal_error("cuMem granularity 0");
  Mapping m;
  m.device = device;
  m.bytes = (min_bytes + granularity - 1) / granularity * granularity;
  CUmemGenericAllocationHandle handle = 0;
  ARF_CU_RETURN_IF_ERROR(d.create(&handle, m.bytes, &prop, 0));
  m.handle = handle;
  const Status mapped = map_and_enable(m.handle, m.bytes, dev.value(), &m.ptr);
  if (!mapped.is_ok()) {
    (void)d.release(handle);
    return mapped;
  }
  return m;
}

Result<int> export_fd(const Mapping& mapping) {
  const Driver& d = driver();
  if (!d.missing.empty()) return unsupported("cuMem: " + d.missing);
  int fd = -1;
  ARF_CU_RETURN_IF_ERROR(d.export_handle(&fd, mapping.handle,
                                         CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR, 0));
  return fd;
}

Result<Mapping> import_fd(int fd, size_t bytes, int device) {
  Result<CUdevice> dev = cu_device(device);
  if (!dev.is_ok()) return dev.status();
  const Driver& d = driver();
  CUmemGenericAllocationHandle handle = 0;
  ARF_RETURN_IF_ERROR(driver_status(
      d.import_handle(&handle, reinterpret_cast<void*>(static_cast<uintptr_t>(fd)),
                      CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR),
      "cuMemImportFromShareableHandle", arfUnsupported));
  Mapping m;
  m.handle = handle;
  m.bytes = bytes;
  m.device = device;
  const Status mapped = map_and_enable(handle, bytes, dev.value(), &m.ptr);
  if (!mapped.is_ok()) {
    (void)d.release(handle);
    return mapped;
  }
  return m;
}

Status release(Mapping* m) {
  if (m->handle == 0 && m->ptr == nullptr) return Status::ok();
  const Driver& d = driver();
  Status first;
  auto keep_first = [&first](Status s) {
    if (first.is_ok() && !s.is_ok()) first = std::move(s);
  };
  if (m->ptr != nullptr) {
    keep_first(driver_status(d.unmap(as_cu(m->ptr), m->bytes), "cuMemUnmap"));
    keep_first(driver_status(d.address_free(as_cu(m->ptr), m->bytes), "cuMemAddressFree"));
  }
  if (m->handle != 0) keep_first(driver_status(d.release(m->handle), "cuMemRelease"));
  *m = Mapping{};
  return first;
}

}  // namespace arf::cumem
