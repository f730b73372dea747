// arfusion-stress: the soak, written only against include/arfusion/arfusion.h (README.md here):
// parse, set the CUDA environment before the first CUDA call, run the repeats, report. Exit
// codes: options.h StressExit.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstdlib>
#include <optional>
#include <exception>
#include <string>

#include "options.h"
#include "report.h"
#include "session.h"

// The library build linked in ("release" or a negative control: cmake/stress.cmake), recorded in
// the report.
#ifndef ARF_STRESS_VARIANT
#define ARF_STRESS_VARIANT "release"
#endif

namespace arf::stress {
namespace {

int run(int argc, char** argv, const char* library_variant) {
  int code = kStressOk;
  std::optional<StressOptions> parsed =
      parse_stress_options(argc, argv, &code, [](const char* name) { return std::getenv(name); });
  if (!parsed) return code;
  parsed->library_variant = library_variant;
  const StressOptions& o = *parsed;
  // Before the first CUDA call. 32 hardware queues unless the caller chose (arfusion.h: queue
  // sharing between virtual ranks' streams is what the library then has to survive); --connections
  // forces a value, e.g. 1 to make every rank's stream share one queue.
  if (o.connections > 0) {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", std::to_string(o.connections).c_str(), /*overwrite=*/1);
  } else {
    setenv("CUDA_DEVICE_MAX_CONNECTIONS", "32", /*overwrite=*/0);
  }
  setenv("NCCL_NVLS_ENABLE", "0", /*overwrite=*/0);
  // Read by the library at communicator creation (docs/protocol.md, "The co-resident test mode");
  // the options refused it without --co-resident.
  if (o.co_resident) setenv("ARF_TEST_CO_RESIDENT", "1", /*overwrite=*/1);
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    std::printf("SKIPPED: no CUDA device visible — arfusion-stress not run (%s)\n",
                err != cudaSuccess ? cudaGetErrorString(err) : "0 devices");
    return kStressNoGpu;
  }
  std::printf("# arfusion-stress: %s (CUDA_DEVICE_MAX_CONNECTIONS=%s)\n", o.command_line.c_str(),
              std::getenv("CUDA_DEVICE_MAX_CONNECTIONS"));
  RunReport report;
  try {
    Session session(o);
    report.setup_error = session.setup(&report);
    for (int r = 0; report.setup_error.empty() && r < o.repeat; ++r) {
      report.setup_error = session.run_repeat(r, &report);
      if (o.list_boundaries) return kStressOk;
    }
  } catch (const std::exception& e) {
    report.setup_error = e.what();
  }
  if (!report.setup_error.empty()) std::fprintf(stderr, "arfusion-stress: %s\n", report.setup_error.c_str());
  print_report(o, report);
  if (!o.json_path.empty()) {
    const std::string path = json_path_for(o);
    if (!write_json(path, o, report)) {
      std::fprintf(stderr, "arfusion-stress: cannot write %s\n", path.c_str());
      return kStressSetup;
    }
  }
  return exit_code(o, report);
}

}  // namespace
}  // namespace arf::stress

int main(int argc, char** argv) {
  if (argc > 1 && std::string(argv[1]) == "churn") {
    std::fprintf(stderr, "arfusion-stress: the soak has one command line; drop \"churn\" (arfusion-stress --help)\n");
    return arf::stress::kStressSetup;
  }
  return arf::stress::run(argc, argv, ARF_STRESS_VARIANT);
}
