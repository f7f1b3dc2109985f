"""memfit_jax: memfit where a JAX user already is.

    import memfit_jax
    report = memfit_jax.check(step, params, batch, capacity="h100", donate_argnums=(0,))
    memfit_jax.capture("run1", step, params, batch)     # then: memfit hlo run1; memfit doctor --bundle run1

check() lowers the function (arguments may be jax.ShapeDtypeStruct: no GPU and no memory needed), plans the
lowered program with memfit's model of XLA:GPU, and where a GPU backend is present also compiles it and puts
XLA's memory_analysis() beside the prediction. capture() writes what memfit reads into one folder. JAX is
imported only inside the functions that need it; the rest (write_capture, memory_analysis_dict) is plain
Python.
"""
import json
import os

import memfit

# compiled.memory_analysis() attributes, as JAX 0.11 names them (host_* are 0 without host offload).
MEMORY_ANALYSIS_FIELDS = (
    "argument_size_in_bytes", "output_size_in_bytes", "alias_size_in_bytes", "temp_size_in_bytes",
    "generated_code_size_in_bytes", "host_argument_size_in_bytes", "host_output_size_in_bytes",
    "host_alias_size_in_bytes", "host_temp_size_in_bytes")

# The files of a capture folder (memfit hlo DIR and memfit doctor --bundle DIR read them by these names).
LOWERED_STABLEHLO = "lowered.stablehlo.mlir"
LOWERED_HLO = "lowered.hlo.txt"
OPTIMIZED_HLO = "module_0000.{name}.after_optimizations.txt"
MEMORY_ANALYSIS = "memory_analysis.json"
MEMORY_STATS = "memory_stats.json"
XLA_ENV = "xla_env.json"
DEVICE_PROFILE = "device_memory.prof"


def memory_analysis_dict(analysis):
    """compiled.memory_analysis() as a dict (None when the backend gives none), with XLA's peak as users compute
    it: argument + output - alias + temp."""
    if analysis is None:
        return None
    d = {f: int(getattr(analysis, f, 0) or 0) for f in MEMORY_ANALYSIS_FIELDS}
    d["peak_bytes"] = (d["argument_size_in_bytes"] + d["output_size_in_bytes"] - d["alias_size_in_bytes"]
                       + d["temp_size_in_bytes"])
    return d


def _lower(fn, args, donate_argnums):
    import jax
    return jax.jit(fn, donate_argnums=donate_argnums).lower(*args)


def _has_gpu():
    import jax
    return jax.default_backend() == "gpu"


def pool_limit_bytes(capacity, environ=None):
    """The pool JAX's allocator allows on a device of `capacity` (bytes, "80GiB", "h100") under the XLA variables
    of `environ` - by default this process's, which the JAX in it reads (XLA_CLIENT_MEM_FRACTION and the rest);
    the device's memory where the allocator has no limit (XLA_PYTHON_CLIENT_ALLOCATOR=platform)."""
    env = memfit.env(dict(os.environ) if environ is None else environ, capacity=capacity)
    return env["capacity_bytes"] if env["limit_bytes"] is None else env["limit_bytes"]


def check(fn, *args, capacity=None, donate_argnums=()):
    """Plan `fn(*args)` before it runs. Returns {"prediction": memfit.hlo(lowered StableHLO), and where a GPU is
    present "xla": memory_analysis(), "compiled": memfit.hlo(optimized HLO), "error": prediction vs XLA's peak;
    with `capacity` (bytes, "80GiB", "h100") "fits": the prediction against the pool there, as this process's XLA
    variables size it (pool_limit_bytes)}. The prediction's "peak_upper_bytes" is the step's peak in the
    program's own order, the most XLA's memory scheduler keeps: under the pool too, the step fits whatever order
    XLA picks."""
    lowered = _lower(fn, args, donate_argnums)
    out = {"prediction": memfit.hlo(lowered.as_text())}
    if _has_gpu():
        compiled = lowered.compile()
        xla = memory_analysis_dict(compiled.memory_analysis())
        out["xla"] = xla
        out["compiled"] = memfit.hlo(compiled.as_text())
        if xla and xla["peak_bytes"]:
            out["error"] = out["prediction"]["peak_bytes"] / xla["peak_bytes"] - 1.0
    if capacity is not None:
        # The pool this process's JAX will have: XLA_CLIENT_MEM_FRACTION=.95 in the environment moves it (it was
        # judged against the default 75% whatever was set).
        limit = pool_limit_bytes(capacity)
        out["limit_bytes"] = limit
        out["fits"] = out["prediction"]["peak_bytes"] <= limit
    return out


def xla_variables(environ=None):
    """The variables that decide JAX's allocator (XLA_*, TF_*), from `environ` (default: this process's)."""
    environ = os.environ if environ is None else environ
    return {k: v for k, v in environ.items() if k.startswith(("XLA_", "TF_"))}


def write_capture(directory, name="step", stablehlo=None, lowered_hlo=None, optimized_hlo=None,
                  memory_analysis=None, memory_stats=None, device_profile=None, xla_env=None):
    """Writes the pieces given into `directory` under the names memfit reads; returns the paths written."""
    os.makedirs(directory, exist_ok=True)
    written = []

    def put(filename, data, binary=False):
        path = os.path.join(directory, filename)
        tmp = path + ".tmp"
        with open(tmp, "wb" if binary else "w") as f:
            f.write(data)
        os.replace(tmp, path)  # all or nothing
        written.append(path)

    if stablehlo is not None:
        put(LOWERED_STABLEHLO, stablehlo)
    if lowered_hlo is not None:
        put(LOWERED_HLO, lowered_hlo)
    if optimized_hlo is not None:
        put(OPTIMIZED_HLO.format(name=name), optimized_hlo)
    if memory_analysis is not None:
        put(MEMORY_ANALYSIS, json.dumps(memory_analysis, indent=1, sort_keys=True))
    if memory_stats is not None:
        put(MEMORY_STATS, json.dumps({k: int(v) for k, v in memory_stats.items()}, indent=1, sort_keys=True))
    if device_profile is not None:
        put(DEVICE_PROFILE, device_profile, binary=True)
    if xla_env is not None:
        put(XLA_ENV, json.dumps(xla_env, indent=1, sort_keys=True))
    return written


def capture(directory, fn=None, *args, donate_argnums=()):
    """Everything memfit reads about a step and this process, in one folder: the lowered program (StableHLO and
    HLO), and on a GPU the optimized module, memory_analysis(), the first device's memory_stats() and the
    device memory profile (jax.profiler.device_memory_profile), and the XLA variables in force."""
    import jax
    pieces = {"xla_env": xla_variables()}
    name = "step"
    if fn is not None:
        lowered = _lower(fn, args, donate_argnums)
        name = getattr(fn, "__name__", "step") or "step"
        pieces["stablehlo"] = lowered.as_text()
        pieces["lowered_hlo"] = lowered.as_text(dialect="hlo")
        if _has_gpu():
            compiled = lowered.compile()
            pieces["optimized_hlo"] = compiled.as_text()
            pieces["memory_analysis"] = memory_analysis_dict(compiled.memory_analysis())
    device = jax.devices()[0]
    stats = device.memory_stats()
    if stats:
        pieces["memory_stats"] = stats
    if _has_gpu():
        pieces["device_profile"] = jax.profiler.device_memory_profile()
    return write_capture(directory, name=name, **pieces)
