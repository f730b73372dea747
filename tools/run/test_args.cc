// arfusion-run's command line (args.h): device lists, the default device rule, rendezvous ids and
// every usage error (exit 2). No process is started.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>

#include "args.h"

namespace arf::run {
namespace {

// parse_args over {"arfusion-run", words...}.
struct Parsed {
  std::optional<RunArgs> args;
  int exit_code = -1;
};

Parsed parse(const std::vector<const char*>& words) {
  std::vector<std::string> storage{"arfusion-run"};
  storage.insert(storage.end(), words.begin(), words.end());
  std::vector<char*> argv;
  for (std::string& w : storage) argv.push_back(w.data());
  Parsed p;
  p.args = parse_args(static_cast<int>(argv.size()), argv.data(), &p.exit_code);
  return p;
}

TEST(DeviceList, ParsesRepeats) {
  std::string error;
  EXPECT_EQ(parse_device_list("0,0,1,1", &error), (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(parse_device_list("7", &error), (std::vector<int>{7}));
}

TEST(DeviceList, RejectsMalformed) {
  for (const char* bad : {"", ",", "0,,1", "0,", "a", "-1", "1.5", "0, 1", "99999999999"}) {
    std::string error;
    EXPECT_FALSE(parse_device_list(bad, &error)) << bad;
    EXPECT_FALSE(error.empty()) << bad;
  }
}

TEST(DefaultDevices, RoundRobinOverVisible) {
  EXPECT_EQ(default_devices(4, 2), (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(default_devices(3, 8), (std::vector<int>{0, 1, 2}));
  EXPECT_EQ(default_devices(4, 1), (std::vector<int>{0, 0, 0, 0}));
  EXPECT_EQ(default_devices(2, 0), (std::vector<int>{0, 0}));  // none found: every rank on 0
}

TEST(DefaultDevices, CountsCudaVisibleDevicesFirst) {
  EXPECT_EQ(count_visible_devices("0,1,2", "/nonexistent"), 3);
  EXPECT_EQ(count_visible_devices("GPU-abc,GPU-def", "/nonexistent"), 2);
  EXPECT_EQ(count_visible_devices("", "/nonexistent"), 0);
  EXPECT_EQ(count_visible_devices("3,,4", "/nonexistent"), 1);  // CUDA stops at the gap
}

TEST(DefaultDevices, CountsDevNodes) {
  char dir[] = "/tmp/arf_run_devXXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string base = dir;
  for (const char* name : {"nvidia0", "nvidia1", "nvidia12", "nvidiactl", "nvidia-uvm", "null"}) {
    std::ofstream(base + "/" + name).put('x');
  }
  EXPECT_EQ(count_visible_devices(nullptr, base), 3);
  EXPECT_EQ(count_visible_devices(nullptr, base + "/missing"), 0);
  std::system(("rm -rf " + base).c_str());
}

TEST(RendezvousId, NormalizesHex) {
  EXPECT_EQ(normalize_rendezvous_id("0123456789ABCDEF0123456789abcdef"),
            "0123456789abcdef0123456789abcdef");
  EXPECT_FALSE(normalize_rendezvous_id("deadbeef"));                  // too short
  EXPECT_FALSE(normalize_rendezvous_id(std::string(33, 'a')));        // too long
  EXPECT_FALSE(normalize_rendezvous_id(std::string(31, 'a') + "g"));  // not hex
}

TEST(RendezvousId, RandomIsHexAndFresh) {
  const std::string a = random_rendezvous_id(), b = random_rendezvous_id();
  EXPECT_EQ(a.size(), static_cast<size_t>(kRendezvousIdHexChars));
  EXPECT_EQ(normalize_rendezvous_id(a), a);
  EXPECT_NE(a, b);
}

TEST(ParseArgs, MinimalCommand) {
  setenv("CUDA_VISIBLE_DEVICES", "0,1", 1);
  const Parsed p = parse({"-n", "4", "--", "sh", "-c", "echo -- --help"});
  unsetenv("CUDA_VISIBLE_DEVICES");
  ASSERT_TRUE(p.args);
  EXPECT_EQ(p.args->num_ranks, 4);
  EXPECT_EQ(p.args->devices, (std::vector<int>{0, 1, 0, 1}));
  EXPECT_EQ(p.args->command, (std::vector<std::string>{"sh", "-c", "echo -- --help"}));
  EXPECT_EQ(p.args->rendezvous_id.size(), static_cast<size_t>(kRendezvousIdHexChars));
  EXPECT_TRUE(p.args->prefix);
  EXPECT_EQ(p.args->timeout_seconds, 0);
  EXPECT_EQ(p.args->grace_seconds, 5);
}

// A file of this user with mode `mode` holding `text`; removed by the destructor.
struct IdFile {
  std::string path;
  IdFile(const std::string& text, mode_t mode) {
    char name[] = "/tmp/arfusion-run-id-XXXXXX";
    const int fd = mkstemp(name);
    path = name;
    if (fd >= 0) {
      EXPECT_EQ(write(fd, text.data(), text.size()), static_cast<ssize_t>(text.size()));
      close(fd);
    }
    chmod(path.c_str(), mode);
  }
  ~IdFile() { unlink(path.c_str()); }
};

TEST(ParseArgs, AllOptions) {
  const IdFile id("ABCDEF0123456789ABCDEF0123456789\n", 0600);
  const Parsed p = parse({"--devices", "0,0,1,1", "--timeout", "2.5", "--grace", "0", "--id-file",
                          id.path.c_str(), "--no-prefix", "--", "true"});
  ASSERT_TRUE(p.args);
  EXPECT_EQ(p.args->num_ranks, 4);  // from --devices
  EXPECT_EQ(p.args->devices, (std::vector<int>{0, 0, 1, 1}));
  EXPECT_EQ(p.args->timeout_seconds, 2.5);
  EXPECT_EQ(p.args->grace_seconds, 0);
  EXPECT_EQ(p.args->rendezvous_id, "abcdef0123456789abcdef0123456789");
  EXPECT_FALSE(p.args->prefix);
}

TEST(ParseArgs, AnyRankCount) {
  const Parsed p = parse({"-n", "9", "--", "true"});
  ASSERT_TRUE(p.args);
  EXPECT_EQ(p.args->devices.size(), 9u);
}

TEST(ParseArgs, UsageErrorsExit2) {
  const std::vector<std::vector<const char*>> bad = {
      {"-n", "2", "true"},        // no "--"
      {"-n", "2", "--"},          // no command
      {"--", "true"},             // no -n
      {"-n", "0", "--", "true"},  // N < 1
      {"-n", "x", "--", "true"},
      {"-n", "2", "--devices", "0,,1", "--", "true"},
      {"-n", "2", "--devices", "0,a", "--", "true"},
      {"-n", "2", "--devices", "", "--", "true"},
      {"-n", "3", "--devices", "0,1", "--", "true"},  // count mismatch
      {"-n", "2", "--timeout", "-1", "--", "true"},
      {"-n", "2", "--grace", "soon", "--", "true"},
      {"-n", "2", "--id", "xyz", "--", "true"},
      {"-n", "2", "--id", "abcdef0123456789abcdef0123456789", "--", "true"},  // argv: refused
      {"-n", "2", "--id-file", "/nonexistent/arfusion-id", "--", "true"},
      {"-n", "2", "--bogus", "--", "true"},
  };
  for (const auto& words : bad) {
    const Parsed p = parse(words);
    EXPECT_FALSE(p.args) << words[0] << " " << words[1];
    EXPECT_EQ(p.exit_code, kExitUsage) << words[0] << " " << words[1];
  }
}

// The id never comes from argv (every user can read a process's argv): --id is refused, saying
// where to put the id instead; the launcher's own ARF_RENDEZVOUS_ID or a 0600 file is taken.
TEST(RendezvousIdSource, NeverFromArgv) {
  std::vector<std::string> storage = {"arfusion-run", "-n", "2", "--id",
                                      "abcdef0123456789abcdef0123456789", "--", "true"};
  std::vector<char*> argv;
  for (std::string& w : storage) argv.push_back(w.data());
  int code = -1;
  testing::internal::CaptureStderr();
  EXPECT_FALSE(parse_args(static_cast<int>(argv.size()), argv.data(), &code));
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(code, kExitUsage);
  EXPECT_NE(err.find("argv is visible to every user"), std::string::npos) << err;
  EXPECT_NE(err.find("ARF_RENDEZVOUS_ID"), std::string::npos) << err;
  EXPECT_NE(err.find("--id-file"), std::string::npos) << err;
}

TEST(RendezvousIdSource, FromTheLaunchersEnvironment) {
  setenv("ARF_RENDEZVOUS_ID", "0123456789ABCDEF0123456789ABCDEF", 1);
  const Parsed p = parse({"-n", "2", "--", "true"});
  const Parsed bad_both = [] {
    const IdFile id("0123456789abcdef0123456789abcdef", 0600);
    return parse({"-n", "2", "--id-file", id.path.c_str(), "--", "true"});
  }();
  setenv("ARF_RENDEZVOUS_ID", "not-hex", 1);
  const Parsed bad = parse({"-n", "2", "--", "true"});
  unsetenv("ARF_RENDEZVOUS_ID");
  ASSERT_TRUE(p.args);
  EXPECT_EQ(p.args->rendezvous_id, "0123456789abcdef0123456789abcdef");
  EXPECT_FALSE(bad_both.args);  // given twice
  EXPECT_EQ(bad_both.exit_code, kExitUsage);
  EXPECT_FALSE(bad.args);
  EXPECT_EQ(bad.exit_code, kExitUsage);
}

TEST(RendezvousIdSource, FileMustBeTheUsersAndPrivate) {
  const IdFile good("  fedcba9876543210fedcba9876543210 \n", 0600);
  std::string error;
  EXPECT_EQ(read_rendezvous_id_file(good.path, &error), "fedcba9876543210fedcba9876543210")
      << error;
  for (const mode_t mode : {0644, 0640, 0604, 0660}) {
    const IdFile open_to_others("fedcba9876543210fedcba9876543210", mode);
    error.clear();
    EXPECT_FALSE(read_rendezvous_id_file(open_to_others.path, &error)) << std::oct << mode;
    EXPECT_NE(error.find("other users can read it; make it 0600"), std::string::npos) << error;
  }
  const IdFile malformed("fedcba98", 0600);
  error.clear();
  EXPECT_FALSE(read_rendezvous_id_file(malformed.path, &error));
  EXPECT_NE(error.find("does not hold 32 hex digits"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(read_rendezvous_id_file("/nonexistent/arfusion-id", &error));
  EXPECT_NE(error.find("/nonexistent/arfusion-id"), std::string::npos) << error;
  error.clear();
  EXPECT_FALSE(read_rendezvous_id_file("/tmp", &error));
  EXPECT_FALSE(error.empty());
}

TEST(ParseArgs, HelpExits0) {
  const Parsed p = parse({"--help"});
  EXPECT_FALSE(p.args);
  EXPECT_EQ(p.exit_code, 0);
}

}  // namespace
}  // namespace arf::run
