"""The `memfit` Python module (python/memfit_module.cc) against the CLI: the same dicts as `--json`, the same
one-line errors (as ValueError), and memfit_jax's non-JAX parts (capture folders memfit reads). Run by ctest
with Debian's pytest: PYTHONPATH = the module's build folder, MEMFIT_CLI = the binary, MEMFIT_TEST_DATA_DIR =
tests/data."""
import glob
import json
import os
import pickle
import subprocess

import pytest

import memfit
import memfit_jax

CLI = os.environ["MEMFIT_CLI"]
DATA = os.environ["MEMFIT_TEST_DATA_DIR"]
PROGRAMS = sorted(glob.glob(os.path.join(DATA, "xla", "*.hlo.txt.gz")) +
                  glob.glob(os.path.join(DATA, "xla", "*.stablehlo.mlir.gz")))
PROFILE = os.path.join(os.path.dirname(__file__), "..", "fuzz", "corpus", "profile", "ten_gib_array.prof")


def cli(*args, code=0):
    r = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == code, r.stderr
    return r


def cli_json(*args, code=0):
    return json.loads(cli(*args, "--json", code=code).stdout)


def cli_error(*args):
    r = subprocess.run([CLI, *args], capture_output=True, text=True, timeout=300)
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr.startswith("memfit: ")
    return r.stderr[len("memfit: "):].rstrip("\n")


@pytest.mark.parametrize("path", PROGRAMS, ids=os.path.basename)
def test_hlo_agrees_with_the_cli_on_every_program(path):
    assert len(PROGRAMS) >= 20
    assert memfit.hlo(path) == cli_json("hlo", path)


def test_hlo_takes_the_text_itself():
    path = os.path.join(DATA, "xla", "mlp_fp32_donate.stablehlo.mlir.gz")
    import gzip
    text = gzip.open(path, "rt").read()
    from_text = memfit.hlo(text)
    from_file = memfit.hlo(path)
    assert from_text["file"] == "<text>"
    from_text.pop("file"), from_file.pop("file")
    assert from_text == from_file
    assert from_file["source"] == "stablehlo"


def test_plan_fit_and_env_agree_with_the_cli():
    spec = {"model": "gpt", "vocab": 32000, "d_model": 1024, "heads": 16, "layers": 8, "seq": 1024, "batch": 8,
            "donate": True}
    spec_file = os.path.join(os.environ.get("TMPDIR", "/tmp"), f"memfit-spec-{os.getpid()}.json")
    with open(spec_file, "w") as f:
        json.dump(spec, f)
    try:
        assert memfit.plan(spec, capacity="h200") == cli_json("plan", spec_file, "--device", "h200")
        assert memfit.plan(spec) == cli_json("plan", spec_file)
        assert memfit.fit(spec, "24GiB") == cli_json("fit", spec_file, "--capacity", "24GiB", code=0)
        assert memfit.fit(spec, "24GiB", largest="batch") == cli_json("fit", spec_file, "--capacity", "24GiB",
                                                                      "--largest", "batch", code=0)
    finally:
        os.remove(spec_file)
    environ = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false", "XLA_CLIENT_MEM_FRACTION": "0.5"}
    r = subprocess.run([CLI, "env", "--capacity", "h200", "--json"], capture_output=True, text=True,
                       env={**{k: v for k, v in os.environ.items() if not k.startswith(("XLA_", "TF_"))},
                            **environ}, timeout=60)
    assert memfit.env(environ, capacity="h200") == json.loads(r.stdout)


def test_doctor_and_replay_agree_with_the_cli():
    logs = sorted(glob.glob(os.path.join(DATA, "logs", "*")))[:3]
    assert logs
    args = []
    for log in logs:
        args += ["--log", log]
    ours = memfit.doctor(logs=logs)
    theirs = cli_json("doctor", *args, code=1 if any(f["severity"] == "error" for f in memfit.doctor(logs=logs)["findings"]) else 0)
    assert ours == theirs
    trace = os.path.join(DATA, "gpt2_train_fp32.trace.csv.gz")
    ours = memfit.replay(trace, capacity="80GiB")
    theirs = cli_json("replay", trace, "--capacity", "80GiB")
    for r in (ours, theirs):  # timings differ run to run; everything else is the same
        for p in r["policies"]:
            p.pop("events_per_second")
    assert ours == theirs


@pytest.mark.parametrize("call, args", [
    (lambda: memfit.hlo("/no/such/file.hlo"), ("hlo", "/no/such/file.hlo")),
    (lambda: memfit.hlo("HloModule broken\n\nENTRY {\n"), None),
    (lambda: memfit.plan({"model": "gpt", "layers": -3}), ("plan", "--model", "gpt", "--layers", "-3")),
    (lambda: memfit.plan({"model": "nonsense"}), ("plan", "--model", "nonsense")),
    (lambda: memfit.replay("/no/such/trace.csv"), ("replay", "/no/such/trace.csv")),
    (lambda: memfit.env({"XLA_PYTHON_CLIENT_MEM_FRACTION": "nan"}, capacity="h200"), None),
    (lambda: memfit.hlo("\xff\xfe not utf-8 \x00\n"), None),
])
def test_bad_input_raises_the_clis_message(call, args):
    with pytest.raises(ValueError) as e:
        call()
    message = str(e.value)
    assert message and "\n" not in message
    if args:
        assert message == cli_error(*args)


@pytest.mark.parametrize("call", [
    # A pool fraction outside (0, 1] was planned as given: NaN and -1 as a limit of 0 bytes, 7.0 as a 600 GB
    # pool on an 80 GiB device that "fits".
    lambda: memfit.plan({"model": "mlp"}, capacity="80GiB", mem_fraction=float("nan")),
    lambda: memfit.plan({"model": "mlp"}, capacity="80GiB", mem_fraction=-1.0),
    lambda: memfit.plan({"model": "mlp"}, capacity="80GiB", mem_fraction=7.0),
    lambda: memfit.fit({"model": "mlp"}, "80GiB", mem_fraction=float("inf")),
    lambda: memfit.fit({"model": "mlp"}, "80GiB", mem_fraction=0.0, largest="batch"),
    # Python's unbounded int and its bool, which is an int: not a capacity of 1 byte, not RuntimeError.
    lambda: memfit.plan({"model": "mlp"}, capacity=2**70),
    lambda: memfit.plan({"model": "mlp"}, capacity=True),
    lambda: memfit.env({}, capacity=-5),
    lambda: memfit.doctor(pid=2**40),
])
def test_a_value_no_device_has_raises_valueerror(call):
    with pytest.raises(ValueError) as e:
        call()
    assert str(e.value) and "\n" not in str(e.value)


def test_a_pid_that_is_not_an_int_raises_typeerror():
    with pytest.raises(TypeError):
        memfit.doctor(pid="12")


def _snapshot(path, device_traces):
    """A PyTorch memory snapshot as torch.cuda.memory._dump_snapshot writes it (a pickled dict)."""
    with open(path, "wb") as f:
        pickle.dump({"segments": [], "device_traces": device_traces}, f, protocol=2)
    return str(path)


def test_a_snapshot_replays_the_device_whose_trace_has_events(tmp_path):
    """device_traces holds a list per visible device: a process on cuda:1 (DDP's rank 1) leaves device 0's
    empty. memfit had replayed device 0's, printing 0 B of everything; it takes the device with events, asks
    for --device when several have them, and says so when none has."""
    events = [{"action": a, "addr": 4096, "size": size, "stream": 0, "time_us": t, "frames": []}
              for a, size, t in (("segment_alloc", 2 << 20, 1), ("alloc", 1 << 20, 2),
                                 ("free_completed", 1 << 20, 3))]
    rank1 = _snapshot(tmp_path / "rank1.pickle", [[], events])
    for r in (memfit.replay(rank1, policy="platform"), cli_json("replay", rank1, "--policy", "platform")):
        assert r["device"] == 1 and r["peak_live_bytes"] == 1 << 20
        assert r["recorded_peak_reserved_bytes"] == 2 << 20 and r["recorded_peak_reserved_complete"]
    both = _snapshot(tmp_path / "both.pickle", [events, events])
    with pytest.raises(ValueError) as e:
        memfit.replay(both)
    assert str(e.value) == cli_error("replay", both) and "--device N" in str(e.value)
    assert memfit.replay(both, device=0)["device"] == 0
    assert cli_json("replay", both, "--device", "1")["device"] == 1
    empty = _snapshot(tmp_path / "empty.pickle", [[], []])
    assert "no events" in cli_error("replay", empty)
    assert "no events for it" in cli_error("replay", rank1, "--device", "0")


def test_memory_analysis_dict():
    class Analysis:
        argument_size_in_bytes = 100
        output_size_in_bytes = 40
        alias_size_in_bytes = 30
        temp_size_in_bytes = 7
    d = memfit_jax.memory_analysis_dict(Analysis())
    assert d["peak_bytes"] == 117
    assert d["host_temp_size_in_bytes"] == 0
    assert memfit_jax.memory_analysis_dict(None) is None


def test_check_judges_against_the_pool_this_process_sizes(monkeypatch):
    # check()'s "fits" compares with pool_limit_bytes: the pool the process's XLA variables give, which the
    # JAX in it will have - not the default 75% whatever was set.
    for var in ("XLA_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_MEM_FRACTION", "XLA_PYTHON_CLIENT_ALLOCATOR"):
        monkeypatch.delenv(var, raising=False)
    default = memfit_jax.pool_limit_bytes("h200")
    assert default == memfit.env({}, capacity="h200")["limit_bytes"] == 112583507968  # FACTS.md's bytes_limit
    monkeypatch.setenv("XLA_CLIENT_MEM_FRACTION", "0.3")
    assert memfit_jax.pool_limit_bytes("h200") == 45034242048  # FACTS.md: 0.30 -> bytes_limit 45034242048
    assert memfit_jax.pool_limit_bytes("h200", environ={}) == default
    # The platform allocator has no pool: the device's memory is the limit.
    assert memfit_jax.pool_limit_bytes("h200", environ={"XLA_PYTHON_CLIENT_ALLOCATOR": "platform"}) == 150109880320


def test_capture_folder_is_what_memfit_reads(tmp_path):
    import gzip
    stablehlo = gzip.open(os.path.join(DATA, "xla", "gpt_fp32_donate.stablehlo.mlir.gz"), "rt").read()
    programs = json.load(open(os.path.join(DATA, "xla", "programs.json")))["programs"]
    xla = next(p for p in programs if p["name"] == "gpt_fp32_donate")["xla_memory_analysis"]
    # A second tenant's process (FACTS.md): a 33 GiB pool under a 104.85 GiB bytes_limit.
    stats = {"bytes_limit": 112583507968, "pool_bytes": 35433480192, "bytes_in_use": 12 * 2**30,
             "peak_bytes_in_use": 20 * 2**30}
    written = memfit_jax.write_capture(str(tmp_path), stablehlo=stablehlo, memory_analysis=xla,
                                       memory_stats=stats, device_profile=open(PROFILE, "rb").read(),
                                       xla_env=memfit_jax.xla_variables({"HOME": "/root"}))  # XLA's defaults
    assert len(written) == 5 and not glob.glob(str(tmp_path / "*.tmp"))
    planned = cli_json("hlo", str(tmp_path))
    assert planned["source"] == "stablehlo"
    assert planned == memfit.hlo(str(tmp_path))
    doctor = cli_json("doctor", "--bundle", str(tmp_path))  # warnings and information: exit 0
    codes = {f["code"] for f in doctor["findings"]}
    assert "shrunken_pool" in codes and "largest_live_arrays" in codes
    assert doctor["facts"]["bundle"]["device_profile"]["buffer_bytes"] == 10 * 2**30
    # 10 GiB live + the step's 17.7 GB less its arguments fits the 104.85 GiB limit.
    assert doctor["facts"]["bundle"]["next_step"]["fits"] is True
    # The same figures from a process whose pool grows: below its limit by design, not shrunken.
    memfit_jax.write_capture(str(tmp_path), xla_env={"XLA_PYTHON_CLIENT_PREALLOCATE": "false"})
    growing = cli_json("doctor", "--bundle", str(tmp_path))
    assert "shrunken_pool" not in {f["code"] for f in growing["findings"]}
    memfit_jax.write_capture(str(tmp_path), xla_env={})
    # In a 20 GiB pool the same step does not fit on top of the 10 GiB live: an error, exit 1.
    memfit_jax.write_capture(str(tmp_path), memory_stats={**stats, "bytes_limit": 20 * 2**30})
    tight = cli_json("doctor", "--bundle", str(tmp_path), code=1)
    assert "next_step_does_not_fit" in {f["code"] for f in tight["findings"]}
    bad = cli_error("doctor", "--bundle", str(tmp_path / "nothing"))
    assert "not a folder" in bad
