// A libFuzzer-compatible driver for compilers without -fsanitize=fuzzer: runs the target on every seed in
// the corpus folders given, then on random mutations of them (flips, truncations, insertions, splices) for
// the given number of seconds. Deterministic seed, so a failure reproduces. Usage:
//   mutation_driver SECONDS CORPUS_DIR...
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s SECONDS CORPUS_DIR...\n", argv[0]);
    return 2;
  }
  const double seconds = std::stod(argv[1]);
  std::vector<std::string> seeds;
  for (int i = 2; i < argc; ++i) {
    for (const auto& entry : std::filesystem::directory_iterator(argv[i])) {
      std::ifstream in(entry.path(), std::ios::binary);
      seeds.emplace_back(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
  }
  if (seeds.empty()) {
    std::fprintf(stderr, "no seeds found\n");
    return 2;
  }
  for (const std::string& s : seeds)
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  std::mt19937_64 rng(12345);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
  uint64_t runs = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    std::string s = seeds[rng() % seeds.size()];
    const int mutations = 1 + static_cast<int>(rng() % 8);
    for (int m = 0; m < mutations && !s.empty(); ++m) {
      const size_t at = rng() % s.size();
      switch (rng() % 6) {
        case 0:
          s[at] = static_cast<char>(s[at] ^ (1 << (rng() % 8)));
          break;
        case 1:
          s.resize(at);
          break;
        case 2:
          s.insert(at, 1, static_cast<char>(rng()));
          break;
        case 3:
          s.erase(at, 1 + rng() % 16);
          break;
        case 4: {
          const std::string& other = seeds[rng() % seeds.size()];
          const size_t from = rng() % (other.size() + 1);
          s.insert(at, other.substr(from, rng() % 64));
          break;
        }
        default:
          s[at] = "0123456789,\n-x"[rng() % 14];
          break;
      }
    }
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(s.data()), s.size());
    ++runs;
  }
  std::printf("mutation_driver: %llu runs over %zu seeds, no crash\n", static_cast<unsigned long long>(runs),
              seeds.size());
  return 0;
}
