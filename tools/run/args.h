// Command line of arfusion-run: how many rank processes, on which devices, under
// which rendezvous id, with which time limits, and the command each rank runs. Parsing forks
// nothing and touches no GPU, so it is unit-tested on every machine (test_args.cc).
#pragma once

#include <optional>
#include <string>
#include <vector>

namespace arf::run {

// Exit codes of the launcher itself (the ranks' own codes are passed through: launcher.h).
inline constexpr int kExitUsage = 2;            // bad command line
inline constexpr int kExitTimeout = 124;        // --timeout expired (as coreutils timeout)
inline constexpr int kExitLauncherError = 125;  // fork/pipe/poll failed in the launcher
inline constexpr int kExitCannotExec = 126;     // command found but not executable (child side)
inline constexpr int kExitNotFound = 127;       // command not found (child side)
inline constexpr int kExitSkipped = 77;         // every rank skipped or succeeded, one skipped

struct RunArgs {
  int num_ranks = 0;
  std::vector<int> devices;          // device of rank r = devices[r]; size == num_ranks
  double timeout_seconds = 0;        // 0: no limit
  double grace_seconds = 5;          // SIGTERM -> SIGKILL delay when stopping ranks
  // Lowercase hex, kRendezvousIdHexChars: from --id-file, else the launcher's own
  // ARF_RENDEZVOUS_ID, else fresh from getrandom. Never taken from argv (visible to every user).
  std::string rendezvous_id;
  bool prefix = true;                // "[rank r] " before every output line
  std::vector<std::string> command;  // argv of every rank; non-empty
};

inline constexpr int kRendezvousIdHexChars = 32;  // 16 random bytes

// "0,0,1,1" -> {0,0,1,1}. nullopt on an empty list, an empty item, a non-number or a negative
// ordinal, with *error saying which.
std::optional<std::vector<int>> parse_device_list(const std::string& list, std::string* error);

// How many GPUs a rank could see, found without CUDA: the entries of CUDA_VISIBLE_DEVICES when it
// is set (ordinals are then relative to it, as in CUDA), else the /dev/nvidiaN nodes under dev_dir.
// 0 when neither finds any.
int count_visible_devices(const char* cuda_visible_devices, const std::string& dev_dir);

// Rank r -> r % num_visible, or device 0 for every rank when num_visible is 0.
std::vector<int> default_devices(int num_ranks, int num_visible);

// Exactly kRendezvousIdHexChars hex digits, either case (the ipc bootstrap's UniqueId text form,
// src/transport/ipc_bootstrap.h); lowercased on success.
std::optional<std::string> normalize_rendezvous_id(const std::string& id);

// kRendezvousIdHexChars hex digits from getrandom(2).
std::string random_rendezvous_id();

// The id in `path` (--id-file): a regular file owned by this process's user with no group or
// other permission bits (mode 0600 or stricter: the id admits processes to the job), holding the
// 32 hex digits, surrounding whitespace allowed. nullopt with *error saying what is wrong.
std::optional<std::string> read_rendezvous_id_file(const std::string& path, std::string* error);

// Parses argv: options, then "--", then the command. nullopt with *exit_code set on --help (0) or
// on an error (kExitUsage; the message is already printed on stderr).
std::optional<RunArgs> parse_args(int argc, char** argv, int* exit_code);

}  // namespace arf::run
