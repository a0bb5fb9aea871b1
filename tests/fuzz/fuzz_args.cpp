// The command line (cli::run, with every command of the q binary): no argument
// list crashes q, throws an exception past cli::run, or exits with a code that
// is not documented. Arguments are the input split at NUL bytes. The queue
// file is a temporary file (Q_FILE); commands that run programs, wait, loop,
// or write files elsewhere are left out (work, top, backup, --wait, --watch,
// --output, -f/--file).
#include <fcntl.h>
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <set>
#include <string>
#include <vector>

#include "cli/commands.hpp"

namespace {

std::string dir;
long runs = 0;

bool refused(const std::string& a) {
  static const std::set<std::string> commands{"work", "top", "backup"};
  if (commands.count(a)) return true;
  for (const char* bad : {"wait", "watch", "output", "file", "interval", "lock-timeout"})
    if (a.find(bad) != std::string::npos) return true;
  // -f, or short flags bundled with f (-qf).
  if (a.size() >= 2 && a[0] == '-' && a[1] != '-' && a.find('f') != std::string::npos) return true;
  return false;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  std::string tmpl = (std::filesystem::temp_directory_path() / "q-fuzz-args-XXXXXX").string();
  if (!mkdtemp(tmpl.data())) std::abort();
  dir = tmpl;
  std::atexit([] {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  });
  setenv("Q_FILE", (dir + "/fuzz.q").c_str(), 1);
  setenv("HOME", dir.c_str(), 1);
  setenv("Q_NO_SYNC", "1", 1);
  unsetenv("XDG_DATA_HOME");
  unsetenv("Q_LOCK_TIMEOUT");
  int null = open("/dev/null", O_RDWR);
  dup2(null, STDIN_FILENO);
  dup2(null, STDOUT_FILENO);
  close(null);
  // q's error messages go to std::cerr: discard them (fd 2 stays for sanitizers).
  std::cerr.rdbuf(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (dir.empty()) LLVMFuzzerInitialize(nullptr, nullptr);
  std::vector<std::string> args{"q"};
  std::string cur;
  for (std::size_t i = 0; i < size && args.size() < 16; ++i) {
    if (data[i] == 0) {
      args.push_back(cur);
      cur.clear();
    } else if (cur.size() < 300) {
      cur.push_back(static_cast<char>(data[i]));
    }
  }
  if (!cur.empty() && args.size() < 16) args.push_back(cur);
  for (const auto& a : args)
    if (refused(a)) return 0;
  // A fresh file now and then, so it never grows large.
  if (++runs % 500 == 0) {
    std::error_code ec;
    std::filesystem::remove(dir + "/fuzz.q", ec);
    std::filesystem::remove(dir + "/fuzz.q-lock", ec);
  }
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  int rc = cli::run(static_cast<int>(args.size()), argv.data());
  static const std::set<int> documented{0, 1, 2, 3, 4, 64, 65, 66, 69, 73, 74, 75, 77};
  if (!documented.count(rc)) {
    std::fprintf(stderr, "fuzz_args: exit %d is not documented; arguments:", rc);
    for (const auto& a : args) std::fprintf(stderr, " [%s]", a.c_str());
    std::fprintf(stderr, "\n");
    std::abort();
  }
  return 0;
}
