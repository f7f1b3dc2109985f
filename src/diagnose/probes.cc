#include "memfit/diagnose/probes.h"

#include <dlfcn.h>
#include <fmt/format.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace memfit {
namespace {

// "MemAvailable:   123456 kB" -> bytes.
std::optional<uint64_t> kb_field(std::string_view text, std::string_view key) {
  size_t at = 0;
  while ((at = text.find(key, at)) != std::string_view::npos) {
    if ((at == 0 || text[at - 1] == '\n') && text.substr(at + key.size()).starts_with(":")) break;
    at += key.size();
  }
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = text.substr(at + key.size() + 1);
  while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
  uint64_t kb = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), kb);
  if (ec != std::errc() || kb > (~uint64_t{0} >> 10)) return std::nullopt;
  return kb * 1024;
}

std::optional<double> psi_avg10(std::string_view text, std::string_view kind) {
  size_t at = text.find(std::string(kind) + " avg10=");
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = text.substr(at + kind.size() + 7);
  double v = 0;
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), v);
  if (ec != std::errc()) return std::nullopt;
  return v;
}

std::optional<uint64_t> parse_u64(std::string_view s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  uint64_t v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

}  // namespace

std::optional<std::string> HostProbe::read(const std::string& relative) const {
  std::ifstream in(root_ + "/" + relative, std::ios::binary);
  if (!in) return std::nullopt;
  std::ostringstream out;
  out << in.rdbuf();
  return std::move(out).str();
}

std::optional<HostMemory> HostProbe::memory() const {
  auto text = read("proc/meminfo");
  if (!text) return std::nullopt;
  auto total = kb_field(*text, "MemTotal");
  auto available = kb_field(*text, "MemAvailable");
  if (!total || !available) return std::nullopt;
  return HostMemory{*total, *available, kb_field(*text, "SwapTotal").value_or(0),
                    kb_field(*text, "SwapFree").value_or(0)};
}

std::optional<MemoryPressure> HostProbe::pressure() const {
  auto text = read("proc/pressure/memory");
  if (!text) return std::nullopt;
  auto some = psi_avg10(*text, "some");
  if (!some) return std::nullopt;
  return MemoryPressure{*some, psi_avg10(*text, "full").value_or(0)};
}

std::optional<CgroupMemory> HostProbe::cgroup() const {
  auto self = read("proc/self/cgroup");
  if (!self) return std::nullopt;
  // cgroup v2: a single line "0::/path".
  const size_t at = self->find("0::");
  if (at == std::string::npos) return std::nullopt;
  std::string path = self->substr(at + 3);
  path = path.substr(0, path.find('\n'));
  CgroupMemory c;
  c.path = path;
  const std::string dir = "sys/fs/cgroup" + (path == "/" ? std::string() : path);
  auto max = read(dir + "/memory.max");
  auto events = read(dir + "/memory.events");
  if (!max && !events) return std::nullopt;
  if (max) c.max_bytes = parse_u64(*max);
  if (auto current = read(dir + "/memory.current")) c.current_bytes = parse_u64(*current);
  if (events) {
    const size_t k = events->find("oom_kill ");
    if (k != std::string::npos && (k == 0 || (*events)[k - 1] == '\n')) {
      c.oom_kills = parse_u64(events->substr(k + 9, events->find('\n', k) - k - 9)).value_or(0);
    }
  }
  return c;
}

Expected<ProcessMemory> HostProbe::process(int pid) const {
  auto status = read(fmt::format("proc/{}/status", pid));
  if (!status) return not_found(fmt::format("no process {} (cannot read /proc/{}/status)", pid, pid));
  ProcessMemory p;
  p.pid = pid;
  const size_t name_at = status->find("Name:");
  if (name_at != std::string::npos) {
    std::string name = status->substr(name_at + 5, status->find('\n', name_at) - name_at - 5);
    name.erase(0, name.find_first_not_of(" \t"));
    p.name = name;
  }
  p.rss_bytes = kb_field(*status, "VmRSS").value_or(0);
  p.peak_rss_bytes = kb_field(*status, "VmHWM").value_or(0);
  if (auto environ_block = read(fmt::format("proc/{}/environ", pid))) {
    p.environment = Environment::from_environ_block(*environ_block);
    p.environment_readable = true;
  }
  return p;
}

namespace {

// NVML, declared by hand (FACTS.md §5); only what memfit calls.
struct NvmlMemoryV2 {
  unsigned int version;
  unsigned long long total, reserved, free, used;
};
static_assert(sizeof(NvmlMemoryV2) == 40);
struct NvmlProcessInfo {  // nvmlProcessInfo_t (v2 layout), used by _v3
  unsigned int pid;
  unsigned long long usedGpuMemory;
  unsigned int gpuInstanceId, computeInstanceId;
};
static_assert(sizeof(NvmlProcessInfo) == 24);
constexpr unsigned int kNvmlMemoryV2Version = sizeof(NvmlMemoryV2) | (2u << 24);  // 0x02000028
constexpr int kNvmlSuccess = 0;
constexpr int kNvmlInsufficientSize = 7;
using NvmlDevice = void*;

class Nvml {
 public:
  ~Nvml() {
    if (shutdown_) shutdown_();
    if (lib_) dlclose(lib_);
  }
  Status load() {
    lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (!lib_) return unavailable("NVML is not installed (libnvidia-ml.so.1 not found)");
    init_ = sym<int (*)()>("nvmlInit_v2");
    shutdown_ = nullptr;
    count_ = sym<int (*)(unsigned*)>("nvmlDeviceGetCount_v2");
    handle_ = sym<int (*)(unsigned, NvmlDevice*)>("nvmlDeviceGetHandleByIndex_v2");
    memory_ = sym<int (*)(NvmlDevice, NvmlMemoryV2*)>("nvmlDeviceGetMemoryInfo_v2");
    name_ = sym<int (*)(NvmlDevice, char*, unsigned)>("nvmlDeviceGetName");
    procs_ = sym<int (*)(NvmlDevice, unsigned*, NvmlProcessInfo*)>("nvmlDeviceGetComputeRunningProcesses_v3");
    if (!init_ || !count_ || !handle_ || !memory_)
      return unavailable("NVML lacks the functions memfit needs");
    if (int rc = init_(); rc != kNvmlSuccess)
      return unavailable(fmt::format("nvmlInit failed (error {})", rc));
    shutdown_ = sym<int (*)()>("nvmlShutdown");
    return ok_status();
  }
  Expected<std::vector<GpuMemory>> query() {
    unsigned count = 0;
    if (int rc = count_(&count); rc != kNvmlSuccess || count == 0) return unavailable("NVML sees no GPU");
    std::vector<GpuMemory> gpus;
    for (unsigned i = 0; i < count; ++i) {
      NvmlDevice dev = nullptr;
      if (handle_(i, &dev) != kNvmlSuccess) continue;
      GpuMemory g;
      g.index = static_cast<int>(i);
      NvmlMemoryV2 m{};
      m.version = kNvmlMemoryV2Version;
      if (int rc = memory_(dev, &m); rc != kNvmlSuccess) {
        return unavailable(fmt::format("nvmlDeviceGetMemoryInfo_v2 failed (error {})", rc));
      }
      g.total_bytes = m.total;
      g.reserved_bytes = m.reserved;
      g.free_bytes = m.free;
      g.used_bytes = m.used;
      char name[96] = {};
      if (name_ && name_(dev, name, sizeof name) == kNvmlSuccess) g.name = name;
      if (procs_) {
        unsigned n = 0;
        int rc = procs_(dev, &n, nullptr);  // returns 7 and the count when processes run
        if (rc == kNvmlInsufficientSize && n > 0) {
          std::vector<NvmlProcessInfo> infos(2 * n + 5);
          n = static_cast<unsigned>(infos.size());
          if (procs_(dev, &n, infos.data()) == kNvmlSuccess) {
            for (unsigned k = 0; k < n; ++k) {
              if (infos[k].usedGpuMemory == ~0ull) continue;  // NVML_VALUE_NOT_AVAILABLE
              g.processes.push_back({infos[k].pid, infos[k].usedGpuMemory});
            }
          }
        }
      }
      gpus.push_back(std::move(g));
    }
    return gpus;
  }

 private:
  template <typename F>
  F sym(const char* name) {
    return reinterpret_cast<F>(dlsym(lib_, name));
  }
  void* lib_ = nullptr;
  int (*init_)() = nullptr;
  int (*shutdown_)() = nullptr;
  int (*count_)(unsigned*) = nullptr;
  int (*handle_)(unsigned, NvmlDevice*) = nullptr;
  int (*memory_)(NvmlDevice, NvmlMemoryV2*) = nullptr;
  int (*name_)(NvmlDevice, char*, unsigned) = nullptr;
  int (*procs_)(NvmlDevice, unsigned*, NvmlProcessInfo*) = nullptr;
};

}  // namespace

Expected<std::vector<GpuMemory>> query_nvml() {
  Nvml nvml;
  MEMFIT_RETURN_IF_ERROR(nvml.load());
  return nvml.query();
}

}  // namespace memfit
