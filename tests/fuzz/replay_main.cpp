// Runs a fuzz target without libFuzzer (any compiler): over every file of the
// directories or files given (the committed seed corpus), then over N
// pseudo-random inputs (--random N, --max-len L, --seed S; the seed is printed,
// so a failure can be run again). Exit status 0 when every input ran; a failing
// input aborts, as under libFuzzer; a corpus path that does not exist, or a
// corpus directory without inputs, fails (exit 2): a replay that silently ran
// nothing would pass.
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size);
extern "C" __attribute__((weak)) int LLVMFuzzerInitialize(int* argc, char*** argv);

namespace fs = std::filesystem;

// The input being run, named when it fails (abort).
static std::string current;
static void on_abort(int) {
  std::string text = "fuzz replay: failed on input " + current + "\n";
  (void)!write(2, text.data(), text.size());
  signal(SIGABRT, SIG_DFL);
  raise(SIGABRT);
}

static void run_one(const std::string& bytes, const std::string& name) {
  current = name;
  // A copy of exactly the input's size, so a read past its end is caught by ASan.
  std::vector<std::uint8_t> copy(bytes.begin(), bytes.end());
  LLVMFuzzerTestOneInput(copy.empty() ? nullptr : copy.data(), copy.size());
}

int main(int argc, char** argv) {
  signal(SIGABRT, on_abort);
  if (LLVMFuzzerInitialize) LLVMFuzzerInitialize(&argc, &argv);
  long random_runs = 0, max_len = 512;
  unsigned long seed = 1;
  std::vector<std::string> paths;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--random" && i + 1 < argc)
      random_runs = std::atol(argv[++i]);
    else if (a == "--max-len" && i + 1 < argc)
      max_len = std::atol(argv[++i]);
    else if (a == "--seed" && i + 1 < argc)
      seed = std::strtoul(argv[++i], nullptr, 10);
    else
      paths.push_back(a);
  }
  std::printf("%s: --seed %lu\n", argv[0], seed);
  std::fflush(stdout);
  long files = 0;
  for (const auto& p : paths) {
    std::vector<fs::path> inputs;
    std::error_code ec;
    if (fs::is_directory(p, ec)) {
      for (const auto& e : fs::recursive_directory_iterator(p))
        if (e.is_regular_file()) inputs.push_back(e.path());
      if (inputs.empty()) {
        std::fprintf(stderr, "fuzz replay: the corpus directory %s holds no inputs\n", p.c_str());
        return 2;
      }
    } else if (fs::is_regular_file(p, ec)) {
      inputs.push_back(p);
    } else {
      std::fprintf(stderr, "fuzz replay: %s: no such corpus file or directory\n", p.c_str());
      return 2;
    }
    std::sort(inputs.begin(), inputs.end());
    for (const auto& f : inputs) {
      std::ifstream in(f, std::ios::binary);
      std::string bytes{std::istreambuf_iterator<char>(in), {}};
      run_one(bytes, f.string());
      ++files;
    }
  }
  std::mt19937_64 rng(seed);
  for (long r = 0; r < random_runs; ++r) {
    std::string bytes(rng() % (max_len + 1), '\0');
    for (auto& c : bytes) c = static_cast<char>(rng());
    run_one(bytes, "random #" + std::to_string(r) + " (--seed " + std::to_string(seed) + ")");
  }
  std::printf("%s: %ld corpus inputs, %ld random inputs: ok\n", argv[0], files, random_runs);
  return 0;
}
