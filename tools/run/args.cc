// CLI11 parsing of the arfusion-run command line (args.h). Everything after the first "--" is the
// command, untouched, so the command's own flags never reach CLI11.
#include "args.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

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

constexpr const char* kEnvRendezvousId = "ARF_RENDEZVOUS_ID";

constexpr const char* kHelpFooter =
    "Each rank gets ARF_RANK, ARF_LOCAL_RANK, ARF_WORLD_SIZE, ARF_DEVICE, ARF_RENDEZVOUS_ID\n"
    "(and CUDA_DEVICE_MAX_CONNECTIONS=32, NCCL_NVLS_ENABLE=0 unless set). The id travels in the\n"
    "environment only, never in argv (which every user can read); give one with --id-file or\n"
    "ARF_RENDEZVOUS_ID in the launcher's environment.\n"
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

std::optional<std::string> read_rendezvous_id_file(const std::string& path, std::string* error) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
  if (fd < 0) {
    *error = "--id-file '" + path + "': " + std::strerror(errno);
    return std::nullopt;
  }
  struct stat st{};
  std::string text;
  if (::fstat(fd, &st) != 0) {
    *error = "--id-file '" + path + "': fstat: " + std::strerror(errno);
  } else if (!S_ISREG(st.st_mode)) {
    *error = "--id-file '" + path + "' is not a regular file";
  } else if (st.st_uid != ::geteuid()) {
    *error = "--id-file '" + path + "' is owned by uid " + std::to_string(st.st_uid) +
             ", not by this user: another user could have chosen the id";
  } else if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%03o", static_cast<unsigned>(st.st_mode & 0777));
    *error = "--id-file '" + path + "' has mode " + mode +
             ": other users can read it; make it 0600 (chmod 600, or write it under umask 077)";
  } else {
    char buf[256];
    ssize_t n = 0;
    while ((n = ::read(fd, buf, sizeof(buf))) > 0 && text.size() < 4096) text.append(buf, n);
    if (n < 0) *error = "--id-file '" + path + "': read: " + std::strerror(errno);
  }
  ::close(fd);
  if (!error->empty()) return std::nullopt;
  const size_t first = text.find_first_not_of(" \t\r\n");
  const size_t last = text.find_last_not_of(" \t\r\n");
  const std::string trimmed = first == std::string::npos ? "" : text.substr(first, last - first + 1);
  const auto id = normalize_rendezvous_id(trimmed);
  if (!id) *error = "--id-file '" + path + "' does not hold 32 hex digits";
  return id;
}

namespace {

// Option values that need checks CLI11 cannot express.
struct RawOptions {
  std::string devices;
  bool devices_given = false;
  bool n_given = false;
  std::string id_file;
  std::string id_in_argv;  // --id HEX: refused (argv is visible to every user)
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
  app.add_option("--id-file", raw.id_file,
                 "file holding the rendezvous id (32 hex digits; yours, mode 0600). Default: "
                 "ARF_RENDEZVOUS_ID from this environment, else fresh from getrandom");
  // Refused with the reason, rather than "unknown option": scripts written for it need to know.
  app.add_option("--id", raw.id_in_argv)->group("");
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

// The job's id: --id-file, else the launcher's own ARF_RENDEZVOUS_ID, else fresh. Never argv: a
// process's argv is readable by every user (ps, /proc/PID/cmdline), and the id admits processes
// to the job's rendezvous. The ranks get it in their environment, which only the same user (and
// root) can read.
std::string resolve_id(const RawOptions& raw, bool id_file_given, bool id_in_argv, RunArgs& a) {
  if (id_in_argv) {
    return "--id takes no id on the command line any more: argv is visible to every user (ps). "
           "Put it in ARF_RENDEZVOUS_ID in the launcher's environment, or in a file of yours with "
           "mode 0600 passed as --id-file FILE";
  }
  const char* env = std::getenv(kEnvRendezvousId);
  const bool env_given = env != nullptr && *env != '\0';
  if (id_file_given && env_given) {
    return std::string("the id is given twice, by --id-file and by ") + kEnvRendezvousId +
           " in the environment; give one";
  }
  if (id_file_given) {
    std::string error;
    const auto id = read_rendezvous_id_file(raw.id_file, &error);
    if (!id) return error;
    a.rendezvous_id = *id;
    return "";
  }
  if (env_given) {
    const auto id = normalize_rendezvous_id(env);
    if (!id) return std::string(kEnvRendezvousId) + " in the environment is not 32 hex digits";
    a.rendezvous_id = *id;
    return "";
  }
  a.rendezvous_id = random_rendezvous_id();
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
    if (error.empty()) {
      error = resolve_id(raw, app.count("--id-file") > 0, app.count("--id") > 0, a);
    }
  }
  if (!error.empty()) {
    *exit_code = usage_error(error);
    return std::nullopt;
  }
  a.command.assign(argv + separator + 1, argv + argc);
  return a;
}

}  // namespace arf::run
