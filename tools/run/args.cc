// CLI11 parsing of the arfusion-run command line (args.h). Everything after the first "--" is the
// command, untouched, so the command's own flags never reach CLI11.
#include "args.h"

#include <dirent.h>
#include <sys/random.h>

#include <CLI/CLI.hpp>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>

namespace arf::run {
namespace {

constexpr int kMaxRanks = 1024;      // two pipes per rank; far below any fd limit
constexpr double kMaxSeconds = 1e9;  // finite, and far from overflowing steady_clock
constexpr const char* kMissingSeparator =
    "missing '--' before the command (arfusion-run -n N [options] -- cmd args...)";

constexpr const char* kHelpFooter =
    "Each rank gets ARF_RANK, ARF_LOCAL_RANK, ARF_WORLD_SIZE, ARF_DEVICE, ARF_RENDEZVOUS_ID\n"
    "(and CUDA_DEVICE_MAX_CONNECTIONS=32, NCCL_NVLS_ENABLE=0 unless set).\n"
    "Exit status: 0 all ranks 0; 77 none failed, some skipped; else the first failing rank's\n"
    "code, or 128+signal; 124 timeout; 2 bad command line; 125 launcher error.\n"
    "Details: tools/run/README.md.";

// Seconds >= 0 (CLI::NonNegativeNumber would print DBL_MAX as the range's end).
const CLI::Validator kSeconds(
    [](std::string& text) -> std::string {
      char* end = nullptr;
      const double value = std::strtod(text.c_str(), &end);
      if (end == text.c_str() || *end != '\0' || !(value >= 0 && value <= kMaxSeconds)) {
        return "'" + text + "' is not a number of seconds in [0, 1e9]";
      }
      return "";
    },
    "SECONDS");

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream ss(list);
  for (std::string item; std::getline(ss, item, ',');) items.push_back(item);
  if (!list.empty() && list.back() == ',') items.emplace_back();  // getline drops a trailing one
  return items;
}

// Non-negative decimal that fits an int, or -1.
int parse_ordinal(const std::string& text) {
  if (text.empty() || text.size() > 9) return -1;
  for (char c : text) {
    if (!std::isdigit(static_cast<unsigned char>(c))) return -1;
  }
  return std::atoi(text.c_str());
}

// argv index of the first "--", or argc.
int find_separator(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--") == 0) return i;
  }
  return argc;
}

int usage_error(const std::string& message) {
  std::fprintf(stderr, "arfusion-run: %s\nRun with --help for more information.\n",
               message.c_str());
  return kExitUsage;
}

}  // namespace

std::optional<std::vector<int>> parse_device_list(const std::string& list, std::string* error) {
  std::vector<int> devices;
  for (const std::string& item : split(list)) {
    const int device = parse_ordinal(item);
    if (device < 0) {
      *error = "--devices: '" + item + "' in '" + list +
               "' is not a device ordinal (comma-separated integers >= 0, e.g. 0,0,1,1)";
      return std::nullopt;
    }
    devices.push_back(device);
  }
  if (devices.empty()) {
    *error = "--devices: empty list";
    return std::nullopt;
  }
  return devices;
}

int count_visible_devices(const char* cuda_visible_devices, const std::string& dev_dir) {
  if (cuda_visible_devices != nullptr) {
    // CUDA reads entries up to the first empty one; "" hides every device.
    int count = 0;
    for (const std::string& item : split(cuda_visible_devices)) {
      if (item.empty()) break;
      ++count;
    }
    return count;
  }
  DIR* dir = opendir(dev_dir.c_str());
  if (dir == nullptr) return 0;
  int count = 0;
  while (const dirent* entry = readdir(dir)) {
    const char* name = entry->d_name;
    if (std::strncmp(name, "nvidia", 6) == 0 && parse_ordinal(name + 6) >= 0) ++count;
  }
  closedir(dir);
  return count;
}

std::vector<int> default_devices(int num_ranks, int num_visible) {
  std::vector<int> devices(static_cast<size_t>(num_ranks), 0);
  if (num_visible > 0) {
    for (int r = 0; r < num_ranks; ++r) devices[static_cast<size_t>(r)] = r % num_visible;
  }
  return devices;
}

std::optional<std::string> normalize_rendezvous_id(const std::string& id) {
  if (id.size() != static_cast<size_t>(kRendezvousIdHexChars)) return std::nullopt;
  std::string lower;
  for (char c : id) {
    if (!std::isxdigit(static_cast<unsigned char>(c))) return std::nullopt;
    lower.push_back(static_cast<char>(std::tolower(static_cast<unsigned char>(c))));
  }
  return lower;
}

std::string random_rendezvous_id() {
  unsigned char bytes[kRendezvousIdHexChars / 2];
  size_t filled = 0;
  while (filled < sizeof(bytes)) {
    const ssize_t got = getrandom(bytes + filled, sizeof(bytes) - filled, 0);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) {
      std::perror("arfusion-run: getrandom");
      std::exit(kExitLauncherError);
    }
    filled += static_cast<size_t>(got);
  }
  std::string hex;
  for (unsigned char b : bytes) {
    static constexpr char kDigits[] = "0123456789abcdef";
    hex.push_back(kDigits[b >> 4]);
    hex.push_back(kDigits[b & 15]);
  }
  return hex;
}

namespace {

// Option values that need checks CLI11 cannot express.
struct RawOptions {
  std::string devices;
  bool devices_given = false;
  bool n_given = false;
  std::string id;
};

void add_options(CLI::App& app, RunArgs& a, RawOptions& raw) {
  app.add_option("-n,--nranks", a.num_ranks, "number of rank processes")
      ->check(CLI::Range(1, kMaxRanks));
  app.add_option("--devices", raw.devices,
                 "device of each rank, e.g. 0,0,1,1 (repeats share a GPU); default: rank r on "
                 "r % visible GPUs (CUDA_VISIBLE_DEVICES entries, else /dev/nvidiaN nodes), or 0");
  app.add_option("--timeout", a.timeout_seconds,
                 "stop every rank after SECONDS, exit 124 (0: none)")
      ->check(kSeconds);
  app.add_option("--grace", a.grace_seconds, "SECONDS between SIGTERM and SIGKILL when stopping")
      ->check(kSeconds)
      ->capture_default_str();
  app.add_option("--id", raw.id, "rendezvous id, 32 hex digits (default: fresh from getrandom)");
  app.add_flag("--prefix,!--no-prefix", a.prefix, "'[rank r] ' before each output line (default)");
}

// Fills a.devices and a.num_ranks; an error message, or "".
std::string resolve_devices(const RawOptions& raw, RunArgs& a) {
  if (!raw.devices_given) {
    if (!raw.n_given) return "-n N (or --devices) is required";
    a.devices = default_devices(a.num_ranks,
                                count_visible_devices(std::getenv("CUDA_VISIBLE_DEVICES"), "/dev"));
    return "";
  }
  std::string error;
  const auto list = parse_device_list(raw.devices, &error);
  if (!list) return error;
  if (raw.n_given && static_cast<int>(list->size()) != a.num_ranks) {
    return "--devices lists " + std::to_string(list->size()) + " devices for -n " +
           std::to_string(a.num_ranks) + " ranks";
  }
  if (static_cast<int>(list->size()) > kMaxRanks) {
    return "--devices: at most " + std::to_string(kMaxRanks) + " ranks";
  }
  a.devices = *list;
  a.num_ranks = static_cast<int>(list->size());
  return "";
}

std::string resolve_id(const RawOptions& raw, RunArgs& a) {
  if (raw.id.empty()) {
    a.rendezvous_id = random_rendezvous_id();
    return "";
  }
  const auto normalized = normalize_rendezvous_id(raw.id);
  if (!normalized) return "--id: '" + raw.id + "' is not 32 hex digits";
  a.rendezvous_id = *normalized;
  return "";
}

}  // namespace

std::optional<RunArgs> parse_args(int argc, char** argv, int* exit_code) {
  RunArgs a;
  RawOptions raw;
  CLI::App app{
      "arfusion-run -n N [options] -- command [args...]: start N rank processes of one job"};
  app.footer(kHelpFooter);
  app.failure_message([](const CLI::App*, const CLI::Error& e) {
    return std::string("arfusion-run: ") + e.what() + "\nRun with --help for more information.\n";
  });
  add_options(app, a, raw);
  const int separator = find_separator(argc, argv);
  try {
    app.parse(separator, argv);
  } catch (const CLI::ExtrasError& e) {
    // "arfusion-run -n 2 cmd": the command is an extra only because "--" is missing.
    if (separator >= argc) {
      *exit_code = usage_error(kMissingSeparator);
    } else {
      app.exit(e);
      *exit_code = kExitUsage;
    }
    return std::nullopt;
  } catch (const CLI::ParseError& e) {
    *exit_code = app.exit(e) == 0 ? 0 : kExitUsage;
    return std::nullopt;
  }
  raw.devices_given = app.count("--devices") > 0;
  raw.n_given = app.count("-n") > 0;
  std::string error;
  if (separator >= argc) {
    error = kMissingSeparator;
  } else if (separator + 1 == argc) {
    error = "no command after '--'";
  } else {
    error = resolve_devices(raw, a);
    if (error.empty()) error = resolve_id(raw, a);
  }
  if (!error.empty()) {
    *exit_code = usage_error(error);
    return std::nullopt;
  }
  a.command.assign(argv + separator + 1, argv + argc);
  return a;
}

}  // namespace arf::run
