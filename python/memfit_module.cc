// The `memfit` Python module (pybind11): the library's planners and readers, returning the same dicts as
// the CLI's --json (built by the same functions, tools/memfit/commands.h). Errors raise ValueError with the
// CLI's one-line message.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <optional>
#include <string>
#include <vector>

#include "commands.h"
#include "memfit/core/device_catalog.h"
#include "memfit/core/file_io.h"
#include "memfit/plan/hlo_plan.h"
#include "memfit/plan/step_plan.h"
#include "memfit/program/buffer_assignment.h"
#include "memfit/program/hlo_source.h"
#include "memfit/program/stablehlo_module.h"
#include "memfit/trace/readers.h"
#include "plan_options.h"

namespace py = pybind11;
using memfit::Json;

namespace {

[[noreturn]] void raise(const memfit::Error& e) { throw py::value_error(memfit::cli::error_line(e)); }

template <typename T>
T value_or_raise(memfit::Expected<T> e) {
  if (!e.ok()) raise(e.error());
  return std::move(e).value();
}

// Through Python's own json module: the dict is exactly the CLI's JSON text, read back.
py::object to_python(const Json& j) {
  return py::module_::import("json").attr("loads")(memfit::json_text(j));
}

Json from_python(const py::object& o) {
  const std::string text = py::module_::import("json").attr("dumps")(o).cast<std::string>();
  return value_or_raise(memfit::parse_json(text, "the dict"));
}

// Python's int has no bound, and bool is an int: both are told apart here, so that no capacity is read as
// another (True as 1 byte) or escapes as pybind11's RuntimeError.
std::optional<uint64_t> capacity_of(const py::object& capacity) {
  if (capacity.is_none()) return std::nullopt;
  if (py::isinstance<py::bool_>(capacity))
    throw py::value_error("capacity must be bytes (an int) or a size such as '80GiB' or 'h200', not a bool");
  if (py::isinstance<py::int_>(capacity)) {
    if (capacity.attr("__le__")(0).cast<bool>()) throw py::value_error("capacity must be positive");
    try {
      return capacity.cast<unsigned long long>();
    } catch (const py::cast_error&) {
      throw py::value_error("capacity " + py::str(capacity).cast<std::string>() +
                            " is more than 2^64 - 1 bytes");
    }
  }
  return value_or_raise(memfit::parse_capacity(py::str(capacity).cast<std::string>()));
}

// An int argument (a pid, a device): not a bool, not a str, and within int - pybind11's own conversion
// raises RuntimeError past it.
int int_argument(const py::object& value, const std::string& name) {
  if (py::isinstance<py::bool_>(value) || !py::isinstance<py::int_>(value))
    throw py::type_error(name + " must be an int");
  try {
    return value.cast<int>();
  } catch (const py::cast_error&) {
    throw py::value_error(name + " " + py::str(value).cast<std::string>() + " is out of range");
  }
}

py::object hlo(const std::string& path_or_text, const std::string& module, size_t top, bool buffers) {
  memfit::HloSource source;
  // Text has lines; a path has none.
  if (path_or_text.find('\n') != std::string::npos) {
    source.path = "<text>";
    source.text = path_or_text;
  } else {
    source = value_or_raise(memfit::read_hlo_source(path_or_text, module));
  }
  const Json j =
      memfit::cli::hlo_run_to_json(value_or_raise(memfit::cli::run_hlo(std::move(source), top)), buffers);
  return to_python(j);
}

py::object plan(const py::object& spec, const py::object& capacity, double mem_fraction) {
  const memfit::ModelSpec s = value_or_raise(memfit::cli::spec_from_config(from_python(spec)));
  return to_python(memfit::cli::step_plan_to_json(
      value_or_raise(memfit::plan_step(s, capacity_of(capacity), mem_fraction))));
}

py::object fit(const py::object& spec, const py::object& capacity, double mem_fraction,
               const std::string& largest) {
  const memfit::ModelSpec s = value_or_raise(memfit::cli::spec_from_config(from_python(spec)));
  const auto c = capacity_of(capacity);
  if (!c) throw py::value_error("memfit fit needs --capacity or --device");
  if (!largest.empty())
    return to_python(memfit::cli::largest_fit_to_json(
        value_or_raise(memfit::largest_fitting(s, largest, *c, mem_fraction))));
  return to_python(memfit::cli::fit_to_json(value_or_raise(memfit::fit_step(s, *c, mem_fraction))));
}

py::object env(const py::object& environ, const py::object& capacity) {
  memfit::Environment e;
  if (environ.is_none()) {
    e = memfit::Environment::from_process();
  } else {
    for (const auto& [k, v] : environ.cast<py::dict>()) e.set(py::str(k), py::str(v));
  }
  const auto c = capacity_of(capacity);
  if (!c) throw py::value_error("the device capacity is needed: pass capacity=BYTES or a device name (h200)");
  const auto config = value_or_raise(memfit::parse_xla_allocator_env(e));
  return to_python(memfit::cli::env_to_json(memfit::plan_xla_allocator(config, *c), e, "--capacity"));
}

py::object doctor(const std::vector<std::string>& logs, const py::object& pid, bool gpu) {
  memfit::DoctorOptions d;
  d.environment = memfit::Environment::from_process();
  d.query_gpu = gpu;
  d.probe_machine = logs.empty() || !pid.is_none();
  if (!pid.is_none()) d.pid = int_argument(pid, "pid");
  for (const std::string& path : logs)
    d.logs.push_back({path, value_or_raise(memfit::read_file(path, 1ull << 30))});
  memfit::DoctorReport report = value_or_raise(memfit::run_doctor(d));
  if (d.probe_machine) memfit::cli::add_share_groups(report);
  return to_python(memfit::cli::doctor_to_json(report));
}

py::object replay(const std::string& path, const std::string& policy, const py::object& capacity,
                  const py::object& device) {
  memfit::ReplayOptions ro;
  if (policy != "all") ro.policies = {policy};
  ro.capacity_bytes = capacity_of(capacity);
  std::optional<uint32_t> which;
  if (!device.is_none()) {
    const int d = int_argument(device, "device");
    if (d < 0) throw py::value_error("device must be 0 or more");
    which = static_cast<uint32_t>(d);
  }
  const memfit::Timeline timeline = value_or_raise(memfit::read_trace_file(path, which));
  const memfit::ReplayResult result = value_or_raise(memfit::replay(timeline, ro));
  return to_python(memfit::cli::replay_to_json(timeline, result, ro.capacity_bytes.has_value()));
}

}  // namespace

PYBIND11_MODULE(memfit, m) {
  m.doc() =
      "memfit: see, plan and fix accelerator memory the way JAX/XLA allocates it. Every function returns "
      "the dict `memfit <command> --json` prints; bad input raises ValueError with the CLI's message.";
  m.def("hlo", &hlo, py::arg("path_or_text"), py::arg("module") = "", py::arg("top") = 10,
        py::arg("buffers") = false,
        "Plan an XLA program: a file or dump folder, or the text itself (optimized HLO, lowered HLO, "
        "StableHLO).");
  m.def("plan", &plan, py::arg("spec"), py::arg("capacity") = py::none(), py::arg("mem_fraction") = 0.75,
        "Plan a model-zoo step from a dict of programs.json config keys; capacity: bytes or '80GiB' or "
        "'h200'.");
  m.def("fit", &fit, py::arg("spec"), py::arg("capacity"), py::arg("mem_fraction") = 0.75,
        py::arg("largest") = "",
        "The seed's fixes, ranked, for a step that should fit `capacity`; largest='batch' or 'seq': the "
        "largest "
        "that fits instead.");
  m.def(
      "env", &env, py::arg("environ") = py::none(), py::arg("capacity") = py::none(),
      "What the XLA variables of `environ` (default: this process's) make JAX do on a device of `capacity`.");
  m.def("doctor", &doctor, py::arg("logs") = std::vector<std::string>{}, py::arg("pid") = py::none(),
        py::arg("gpu") = false, "Diagnose logs (paths), a process, or this machine.");
  m.def("replay", &replay, py::arg("path"), py::arg("policy") = "all", py::arg("capacity") = py::none(),
        py::arg("device") = py::none(),
        "Replay a recorded allocation trace through the allocator policies (device: a PyTorch snapshot's).");
}
