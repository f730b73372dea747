// dlopen/dlsym of the NCCL entry points the baseline column needs.
#include "nccl_loader.h"

#include <dlfcn.h>

#include <cstdlib>

namespace arf::bench {
namespace {

template <typename Fn>
bool resolve(void* handle, const char* name, Fn* fn, std::string* missing) {
  *fn = reinterpret_cast<Fn>(dlsym(handle, name));
  if (*fn == nullptr) *missing += std::string(missing->empty() ? "" : ", ") + name;
  return *fn != nullptr;
}

}  // namespace

std::string load_nccl(NcclApi* api) {
  const char* env = std::getenv("ARF_NCCL_LIBRARY");
  api->path = env != nullptr && env[0] != '\0' ? env : "libnccl.so.2";
  api->handle = dlopen(api->path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (api->handle == nullptr) {
    const char* why = dlerror();
    return "dlopen(" + api->path + ") failed: " + (why != nullptr ? why : "unknown error");
  }
  std::string missing;
  resolve(api->handle, "ncclCommInitAll", &api->comm_init_all, &missing);
  resolve(api->handle, "ncclAllReduce", &api->all_reduce, &missing);
  resolve(api->handle, "ncclCommDestroy", &api->comm_destroy, &missing);
  resolve(api->handle, "ncclGetErrorString", &api->get_error_string, &missing);
  resolve(api->handle, "ncclGroupStart", &api->group_start, &missing);
  resolve(api->handle, "ncclGroupEnd", &api->group_end, &missing);
  if (!missing.empty()) return api->path + " lacks " + missing;
  ncclResult_t (*get_version)(int*) = nullptr;
  std::string optional;
  if (resolve(api->handle, "ncclGetVersion", &get_version, &optional)) get_version(&api->version);
  return "";
}

}  // namespace arf::bench
