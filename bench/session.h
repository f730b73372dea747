// Owns what a run holds on the devices: the communicators (arfCommInitAll, or this process's rank
// under arfusion-run), the rank threads, one
// non-blocking stream per rank and the rank buffers. Teardown in the destructor, in reverse order.
#pragma once

#include <memory>
#include <string>

#include "context.h"

namespace arf {
class ProcessGroup;  // tools/common/process_group.h
}  // namespace arf

namespace arf::bench {

class Session {
 public:
  Session() = default;
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  // Creates everything for `layout`; buffers hold capacity_elems elements each (--op quant: also
  // quant_out of capacity_elems bytes and scale_out of scale_bytes). Returns "" or why not. Call
  // once, from the main thread. With a ProcessGroup (arfusion-run): this process's rank only, its
  // communicator from the launcher's environment (arfCommConfigFromEnv: transport ipc) with
  // config's capacity; the other ranks' entries of the context stay empty.
  std::string open(const BenchArgs& args, const RankLayout& layout, const arfCommConfig_t& config,
                   int64_t capacity_elems, int64_t scale_bytes = 0, ProcessGroup* group = nullptr);

  BenchContext& context() { return ctx_; }

 private:
  std::string make_streams_and_buffers(int64_t capacity_elems, int64_t scale_bytes);

  BenchContext ctx_;
  std::unique_ptr<RankPool> pool_;
};

}  // namespace arf::bench
