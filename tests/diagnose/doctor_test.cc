// memfit doctor on the real failing-job logs (tests/data/logs), on logs of other modes written in the exact
// shapes of ../shared/FACTS.md §1, and on fixture /proc and cgroup trees.
#include "memfit/diagnose/doctor.h"
#include "memfit/diagnose/fleet.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <chrono>
#include <sstream>

#include "../cli/cli_runner.h"
#include "memfit/core/file_io.h"
#include "memfit/diagnose/log_classifier.h"

namespace memfit {
namespace {

std::vector<Finding> classify_file(const std::string& name) {
  auto text = read_file(std::string(MEMFIT_TEST_DATA_DIR) + "/logs/" + name);
  EXPECT_TRUE(text.ok()) << name;
  return classify_log(text.ok() ? *text : "", name);
}

std::vector<std::string> codes(const std::vector<Finding>& findings) {
  std::vector<std::string> out;
  for (const Finding& f : findings) out.push_back(f.code);
  return out;
}

const Finding* find(const std::vector<Finding>& findings, std::string_view code, size_t nth = 0) {
  for (const Finding& f : findings) {
    if (f.code == code && nth-- == 0) return &f;
  }
  return nullptr;
}

using Codes = std::vector<std::string>;

TEST(LogClassifier, DefaultBfcOom) {
  const auto f = classify_file("jax_default_oom.log");
  EXPECT_EQ(codes(f), (Codes{"device_oom", "device_oom", "compile_time_oom", "compile_time_oom"}));
  EXPECT_NE(f[0].message.find("GPU_0_bfc could not allocate 125.82GiB (rounded to 135100209664)"),
            std::string::npos);
  EXPECT_NE(f[0].message.find("more than the whole pool limit of 104.85GiB"), std::string::npos);
  EXPECT_NE(f[1].message.find("62.91GiB (rounded to 67550089216) in jit_f"), std::string::npos);
  EXPECT_EQ(f[0].severity, Severity::kError);
  EXPECT_EQ(f[0].step, Step::kAllocation);
  EXPECT_NE(f[2].message.find("(seen 2 times)"), std::string::npos);
}

TEST(LogClassifier, PlatformOom) {
  const auto f = classify_file("jax_platform_oom.log");
  EXPECT_EQ(codes(f), (Codes{"device_oom", "device_oom", "compile_time_oom", "compile_time_oom"}));
  EXPECT_NE(f[0].message.find("SE_0_space_0 could not allocate 168.00GiB"), std::string::npos);
  EXPECT_NE(f[0].message.find("the device itself is full"), std::string::npos);
  EXPECT_EQ(find(f, "shrunken_pool"), nullptr);  // one refused cudaMalloc per OOM, no 0.9x back-off
  EXPECT_EQ(find(f, "host_oom_kill"), nullptr);  // CUDA_ERROR_OUT_OF_MEMORY is not the kernel's OOM killer
}

TEST(LogClassifier, AutotunerWarningsAreNotTheOom) {
  const auto f = classify_file("jax_autotune_warnings_then_oom.log");
  EXPECT_EQ(codes(f), (Codes{"device_oom", "benign_allocator_warning", "compile_time_oom"}));
  EXPECT_NE(f[0].message.find("32.00GiB"), std::string::npos);
  EXPECT_NE(f[1].message.find("8 allocator warnings of up to 6.01GiB"), std::string::npos);
  EXPECT_EQ(f[1].severity, Severity::kInfo);
}

TEST(LogClassifier, RecompilationWithItsShapesAndReason) {
  const auto f = classify_file("jax_log_compiles_cache_miss.log");
  ASSERT_EQ(codes(f), (Codes{"recompilation"}));
  EXPECT_NE(f[0].message.find("jit(<lambda>) was compiled 2 times for 2 input shapes: float32[1024,1024]; "
                              "float32[2048,1024]"),
            std::string::npos);
  EXPECT_NE(f[0].message.find("now f32[2048,1024] and before f32[1024,1024]"), std::string::npos);
  EXPECT_NE(f[0].fix.find("bucket"), std::string::npos);
}

// A second default process on a GPU another JAX process preallocated (FACTS.md §1's observed lines).
TEST(LogClassifier, SecondTenantWithAShrunkenPool) {
  std::string log;
  uint64_t bytes = 112583507968;
  for (int i = 0; i < 11; ++i) {
    bytes = static_cast<uint64_t>(static_cast<float>(bytes) * 0.9f) / 256 * 256;
    log +=
        "E1130 00:05:01.000000    6001 cuda_executor.cc:1365] [0] Failed to allocate device memory of ? (" +
        std::to_string(bytes) + " bytes): RESOURCE_EXHAUSTED: : CUDA_ERROR_OUT_OF_MEMORY: out of memory\n";
  }
  log +=
      "W1130 00:07:00.0 bfc_allocator.cc:598] Allocator (GPU_0_bfc) ran out of memory trying to allocate "
      "40.00GiB "
      "(rounded to 42949672960) from the lower end requested by op \n";
  const auto f = classify_log(log, "tenant2.log");
  EXPECT_EQ(codes(f), (Codes{"device_oom", "shrunken_pool"}));
  EXPECT_NE(find(f, "shrunken_pool")->message.find("refused this process's pool 11 times"),
            std::string::npos);
  EXPECT_NE(find(f, "shrunken_pool")->fix.find("XLA_PYTHON_CLIENT_PREALLOCATE=false"), std::string::npos);
}

TEST(LogClassifier, OtherVersionsAndFrameworks) {
  // jaxlib 0.4.x: bytes, XlaRuntimeError, BufferAssignment debugging.
  auto old = classify_log(
      "jaxlib.xla_extension.XlaRuntimeError: RESOURCE_EXHAUSTED: Out of memory while trying to allocate "
      "34912723376 "
      "bytes.\nBufferAssignment OOM Debugging.\nBufferAssignment stats:\n",
      "old.log");
  EXPECT_EQ(codes(old), (Codes{"device_oom", "compile_time_oom"}));
  EXPECT_NE(old[0].message.find("32.52GiB"), std::string::npos);
  // PyTorch.
  auto torch = classify_log(
      "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 200.00 GiB. GPU 0 has a total capacity "
      "of 139.80 "
      "GiB of which 138.20 GiB is free. Of the allocated memory 1.00 GiB is allocated by PyTorch, and 20.00 "
      "MiB is "
      "reserved by PyTorch but unallocated.",
      "torch.log");
  ASSERT_EQ(codes(torch), (Codes{"device_oom"}));
  EXPECT_NE(
      torch[0].message.find("PyTorch could not allocate 200.00GiB; GPU total 139.80GiB, 138.20GiB free"),
      std::string::npos);
  // The kernel's OOM killer and a bare "Killed".
  auto kernel = classify_log(
      "[12345.678] Out of memory: Killed process 1234 (python) total-vm:123kB, anon-rss:100kB, "
      "file-rss:0kB\n",
      "k.log");
  ASSERT_EQ(codes(kernel), (Codes{"host_oom_kill"}));
  EXPECT_EQ(kernel[0].step, Step::kLocation);
  EXPECT_NE(kernel[0].message.find("process 1234"), std::string::npos);
  EXPECT_EQ(codes(classify_log("epoch 3\nKilled\n", "k2.log")), (Codes{"host_oom_kill"}));
  // An older BFC fatal wording, no space before "requested".
  EXPECT_EQ(
      codes(classify_log("Allocator (GPU_0_bfc) ran out of memory trying to allocate 3.07GiB (rounded to "
                         "3300000000)requested by op _EagerConst",
                         "tf.log")),
      (Codes{"device_oom"}));
}

TEST(LogClassifier, EagerStormAndPmap) {
  std::string log;
  for (int i = 0; i < 12; ++i) {
    log += "Compiling jit(add) with global shapes and types (ShapedArray(float32[" + std::to_string(i + 1) +
           "]),). Argument mapping: (UnspecifiedValue,).\n";
  }
  log +=
      "Compiling pmap(train_step) with global shapes and types (ShapedArray(float32[8,128]),). Argument "
      "mapping: "
      "(UnspecifiedValue,).\n";
  const auto f = classify_log(log, "eager.log");
  EXPECT_EQ(codes(f), (Codes{"eager_op_storm", "replication"}));
  EXPECT_NE(f[0].message.find("12 one-operation programs"), std::string::npos);
  EXPECT_EQ(f[1].step, Step::kSharding);
}

TEST(LogClassifier, CpuFallbackFromAFractionJaxCannotRead) {
  // What jaxlib 0.11.2 printed on the H200 with XLA_CLIENT_MEM_FRACTION=0.75- (../shared/FACTS.md).
  const auto found = classify_log(
      "ValueError: could not convert string to float: '0.75-'\n"
      "WARNING:jax._src.xla_bridge:An NVIDIA GPU may be present on this machine, but a CUDA-enabled jaxlib "
      "is "
      "not installed. Falling back to cpu.\n",
      "fallback.log");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].code, "jax_cpu_fallback");
  EXPECT_EQ(found[0].severity, Severity::kError);
  EXPECT_NE(found[0].message.find("could not convert string to float: '0.75-'"), std::string::npos);
}

TEST(LogClassifier, AnOverflowedShapeStaysHuge) {
  // XLA prints 16.00EiB for a size that overflowed; it must not read as 16 B.
  const auto found = classify_log(
      "E1130 W external/xla/xla/tsl/framework/bfc_allocator.cc:512] Allocator (GPU_0_bfc) ran out of memory "
      "trying to allocate 16.00EiB (rounded to 18446744073709551360)requested by op\n",
      "shape.log");
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].code, "device_oom");
  EXPECT_NE(found[0].message.find("16.00EiB"), std::string::npos) << found[0].message;
}

TEST(LogClassifier, TwoHundredThousandOomLinesStayLinear) {
  std::string text;
  for (int i = 0; i < 200000; ++i)
    text += fmt::format("Out of memory while trying to allocate {} bytes with allocator GPU_0_bfc\n",
                        1000000 + i);
  const auto start = std::chrono::steady_clock::now();
  const auto found = classify_log(text, "storm.log");
  const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
  EXPECT_GT(found.size(), 4000u);  // sizes equal to two printed decimals are one OOM (log line + exception)
  EXPECT_LT(took.count(), 20.0);   // quadratic matching took minutes; linear is well under a second
}

TEST(LogClassifier, UnknownTextIsNothing) {
  EXPECT_TRUE(classify_log("hello\nthe loss went down\n", "x.log").empty());
  EXPECT_TRUE(classify_log("", "empty.log").empty());
}

DoctorReport doctor_on(const std::string& fixture, std::optional<int> pid = std::nullopt) {
  DoctorOptions o;
  o.root = std::string(MEMFIT_FIXTURES) + "/" + fixture;
  o.query_gpu = false;
  o.pid = pid;
  o.capacity_bytes = 150109880320ull;
  auto r = run_doctor(o);
  EXPECT_TRUE(r.ok()) << (r.ok() ? "" : r.error().message());
  return r.ok() ? std::move(r).value() : DoctorReport{};
}

TEST(Doctor, CalmMachineHasNoFindings) { EXPECT_TRUE(doctor_on("calm").findings.empty()); }

TEST(Doctor, CgroupOomKill) {
  const DoctorReport r = doctor_on("killed");
  ASSERT_EQ(codes(r.findings), (Codes{"host_oom_kill"}));
  EXPECT_NE(r.findings[0].message.find("/job has had 1 process killed"), std::string::npos);
}

TEST(Doctor, MemoryPressureAndACgroupLimit) {
  const DoctorReport r = doctor_on("pressure");
  EXPECT_EQ(codes(r.findings), (Codes{"host_memory_pressure", "host_memory_pressure", "cgroup_limit"}));
  EXPECT_EQ(r.findings[0].severity, Severity::kError);  // 12.25% of the time every task stalled
  EXPECT_NE(r.findings[0].message.find("42.5%"), std::string::npos);
  EXPECT_NE(r.findings[1].message.find("1.91GiB available of 125.87GiB"), std::string::npos);
  EXPECT_NE(r.findings[2].message.find("62.00GiB of its 64.00GiB limit"), std::string::npos);
}

TEST(Doctor, OneProcessItsVariablesAndPool) {
  const DoctorReport r = doctor_on("calm", 4242);
  EXPECT_EQ(codes(r.findings),
            (Codes{"xla_variable_trap", "xla_variable_trap", "preallocated_pool", "host_footprint"}));
  const Finding* pool = find(r.findings, "preallocated_pool");
  ASSERT_NE(pool, nullptr);
  // FRACTION=0.9 with PREALLOCATE=FALSE (still on): 0.9 x 150109880320 rounded up to 2 MiB.
  EXPECT_NE(pool->message.find("process 4242 (python3)'s settings preallocate a pool of 125.82GiB (90.0% of "
                               "139.80GiB) at its first allocation"),
            std::string::npos);
  EXPECT_NE(r.findings[0].message.find("leaves preallocation ON"), std::string::npos);
  EXPECT_NE(r.findings[1].message.find("deprecated"), std::string::npos);
  EXPECT_EQ(r.facts["process"]["rss_bytes"], 5000000ull * 1024);
}

// The H200 of ../shared/FACTS.md with two JAX tenants, as NVML showed it: 4242 holds its 105 GiB pool, 4343
// the 33 GiB the driver let it have.
GpuMemory second_tenant_h200() {
  GpuMemory h200;
  h200.name = "NVIDIA H200";
  h200.total_bytes = 150754820096ull;
  h200.reserved_bytes = 644939776ull;
  h200.used_bytes = 113171562496ull + 35433480192ull;
  h200.free_bytes = h200.total_bytes - h200.reserved_bytes - h200.used_bytes;
  h200.processes = {{4242, 113171562496ull}, {4343, 35433480192ull}};
  return h200;
}

// A second JAX tenant on the H200, as NVML showed it (../shared/FACTS.md): NVML's total includes the
// driver's reservation, JAX's total does not, and the process holds the 33 GiB the driver let it have.
TEST(Doctor, SecondTenantPoolFromCudaTotalAndWhatItHolds) {
  GpuMemory h200 = second_tenant_h200();
  DoctorOptions o;
  o.root = std::string(MEMFIT_FIXTURES) + "/calm";
  o.gpus = std::vector<GpuMemory>{h200};
  o.pid = 4343;
  auto r = run_doctor(o);
  ASSERT_TRUE(r.ok()) << r.error().message();
  const Finding* pool = find(r->findings, "preallocated_pool");
  ASSERT_NE(pool, nullptr);
  // 75% of CUDA's total (NVML total - reserved = 150109880320) is JAX's bytes_limit, 104.85GiB.
  EXPECT_NE(pool->message.find("holds 33.00GiB on the GPU"), std::string::npos) << pool->message;
  EXPECT_NE(pool->message.find("a pool of 104.85GiB (75.0% of 139.80GiB)"), std::string::npos)
      << pool->message;
  EXPECT_EQ(pool->message.find("105.30GiB"), std::string::npos) << pool->message;
  const Finding* shrunk = find(r->findings, "shrunken_pool");
  ASSERT_NE(shrunk, nullptr);
  EXPECT_NE(shrunk->message.find("holds 33.00GiB"), std::string::npos) << shrunk->message;
}

// The exporter's look at the same machine: the machine's findings without a pid, each GPU process's with
// its own, and the process's name from /proc.
TEST(Fleet, FindingsPerMachineAndPerGpuProcess) {
  GpuMemory h200 = second_tenant_h200();
  h200.processes = {{4343, 35433480192ull}};  // only the starved tenant is listed
  FleetOptions o;
  o.root = std::string(MEMFIT_FIXTURES) + "/calm";
  o.gpus = std::vector<GpuMemory>{h200};
  const FleetSnapshot s = probe_fleet(o);
  ASSERT_TRUE(s.host.has_value());
  ASSERT_EQ(s.processes.size(), 1u);
  EXPECT_EQ(s.processes[0].pid, 4343u);
  EXPECT_FALSE(s.processes[0].command.empty());
  auto has = [&](const std::string& code, std::optional<int64_t> pid) {
    for (const FleetFinding& f : s.findings)
      if (f.code == code && f.pid == pid) return true;
    return false;
  };
  EXPECT_TRUE(has("shrunken_pool", 4343));
  EXPECT_TRUE(has("preallocated_pool", 4343));
  EXPECT_FALSE(has("shrunken_pool", std::nullopt));
}

TEST(Doctor, RefusesPidsAndRootsThatCannotBe) {
  DoctorOptions o;
  o.query_gpu = false;
  o.root = std::string(MEMFIT_FIXTURES) + "/calm";
  for (int pid : {0, -1}) {
    o.pid = pid;
    auto r = run_doctor(o);
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.error().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(r.error().message().find("not a process id"), std::string::npos);
  }
  o.pid.reset();
  o.root = "/nonexistent-memfit-root";
  auto missing = run_doctor(o);
  ASSERT_FALSE(missing.ok());
  EXPECT_NE(missing.error().message().find("is not a folder"), std::string::npos);
  o.root = std::string(MEMFIT_FIXTURES);  // a folder, but no proc/ in it
  auto bare = run_doctor(o);
  ASSERT_FALSE(bare.ok());
  EXPECT_NE(bare.error().message().find("has no proc/ folder"), std::string::npos);
}

TEST(Doctor, MissingProcessIsNotFound) {
  DoctorOptions o;
  o.root = std::string(MEMFIT_FIXTURES) + "/calm";
  o.query_gpu = false;
  o.pid = 999999;
  auto r = run_doctor(o);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.error().code(), ErrorCode::kNotFound);
}

using testing::CliRun;
using testing::run_cli;

TEST(DoctorCommand, ExitCodesAndJson) {
  const std::string logs = std::string(MEMFIT_TEST_DATA_DIR) + "/logs/";
  CliRun oom = run_cli({"doctor", "--log", logs + "jax_default_oom.log", "--json"});
  EXPECT_EQ(oom.code, 1);  // found a failure
  const Json j = Json::parse(oom.out);
  ASSERT_EQ(j["findings"].size(), 4u);
  for (const Json& f : j["findings"]) {
    EXPECT_TRUE(f.contains("step") && f.contains("code") && f.contains("severity") && f.contains("message") &&
                f.contains("fix"));
  }
  EXPECT_EQ(j["findings"][0]["step"], "allocation");
  CliRun compiles = run_cli({"doctor", "--log", logs + "jax_log_compiles_cache_miss.log"});
  EXPECT_EQ(compiles.code, 0);
  EXPECT_NE(compiles.out.find("[info] recompilation"), std::string::npos);
  const std::string unknown = ::testing::TempDir() + "unknown.log";
  ASSERT_TRUE(write_file_atomic(unknown, "nothing to see\n").ok());
  CliRun nothing = run_cli({"doctor", "--log", unknown});
  EXPECT_EQ(nothing.code, 0);
  EXPECT_NE(nothing.out.find("nothing recognised"), std::string::npos);
  CliRun missing = run_cli({"doctor", "--log", "/nonexistent/job.log", "--json"});
  EXPECT_EQ(missing.code, 2);
  EXPECT_EQ(missing.out, "");
  CliRun no_pid =
      run_cli({"doctor", "--pid", "999999", "--no-gpu", "--root", std::string(MEMFIT_FIXTURES) + "/calm"});
  EXPECT_EQ(no_pid.code, 2);
}

}  // namespace
}  // namespace memfit

namespace memfit {
namespace {

// NVML through dlopen: on a machine without the driver it says so; with one, the v2 figures add up
// (FACTS.md §5: total = reserved + free + used).
TEST(Nvml, UnavailableIsSaidOrFiguresAddUp) {
  auto gpus = query_nvml();
  if (!gpus.ok()) {
    EXPECT_EQ(gpus.error().code(), ErrorCode::kUnavailable);
    EXPECT_FALSE(gpus.error().message().empty());
    return;
  }
  ASSERT_FALSE(gpus->empty());
  for (const GpuMemory& g : *gpus) EXPECT_EQ(g.total_bytes, g.reserved_bytes + g.free_bytes + g.used_bytes);
}

}  // namespace
}  // namespace memfit
