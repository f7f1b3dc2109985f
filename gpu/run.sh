#!/usr/bin/env bash
# The GPU checks of issue #4, as one script for the device tool (an H200: one call, ~5 minutes; what it
# measured there is in gpu/RESULTS.md). First,
# here: `gpu/fetch_debs.sh` (the Debian packages the device image lacks), then:
#   run(command="bash gpu/run.sh", carry=["gpu/debs"], timeout_s=540)
# Builds against the CUDA toolkit (no kernels: the host code calls the runtime and driver), runs the GPU
# tests (the conformance suite on the real device, the CUDA VMM page mapper), the GPU benchmarks (BFC hit vs
# warm cudaMallocAsync, VMM growth vs cudaMalloc), the CPU allocator benchmarks, and the GPT-2 loop with
# PyTorch's allocator and memfit's BFC (preallocated and growing) and VMM through CUDAPluggableAllocator, and
# CuPy on memfit's allocator. Everything lands in $OUT (or build/gpu/out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu/out}
mkdir -p "$OUT"
# The device tool returns at most 8 files: env.txt, build.log, gpu_tests.txt, gpu_bench.txt, alloc_bench.txt,
# frameworks.txt (GPT-2 and CuPy, every run's JSON and stderr) and summary.txt.
S="$OUT/summary.txt"
{ nvidia-smi; uname -a; g++ --version; cmake --version; nvcc --version; } > "$OUT/env.txt" 2>&1
# The carried Debian packages, unpacked beside the system (not over it) and searched first by CMake.
prefix=()
if compgen -G "gpu/debs/*.deb" >/dev/null; then
  deps=/tmp/memfit-deps
  for f in gpu/debs/*.deb; do dpkg -x "$f" "$deps"; done
  # zlib1g-dev's libz.so points at Debian's exact libz; point it at the one this system has.
  libz=$(ls /lib/x86_64-linux-gnu/libz.so.1* /usr/lib/x86_64-linux-gnu/libz.so.1* 2>/dev/null | head -1)
  [ -n "$libz" ] && ln -sf "$libz" "$deps/usr/lib/x86_64-linux-gnu/libz.so"
  prefix=(-DCMAKE_PREFIX_PATH="$deps/usr" -DProtobuf_PROTOC_EXECUTABLE="$deps/usr/bin/protoc"
    -DMEMFIT_PPROF_PROTO="$deps/usr/share/gocode/src/github.com/google/pprof/proto/profile.proto")
  export PKG_CONFIG_PATH="$deps/usr/lib/x86_64-linux-gnu/pkgconfig${PKG_CONFIG_PATH:+:$PKG_CONFIG_PATH}"
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
step() { echo "[$(date +%T)] $*" | tee -a "$S"; }
# MEMFIT_GPU_STEPS picks parts for a rerun inside the lease (default: all of them).
steps=" ${MEMFIT_GPU_STEPS:-tests gpubench gpt2_torch gpt2_bfc gpt2_growth gpt2_vmm cupy share jax cpubench} "
want() { [[ $steps == *" $1 "* ]]; }
step "configure"
# Another compiler's new warnings must not stop the GPU run (-Werror stays on in CI).
cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DMEMFIT_WERROR=OFF "${prefix[@]}" >"$OUT/build.log" 2>&1 ||
  { tail -30 "$OUT/build.log"; exit 1; }
step "build"
# Only what runs here; -k: a target that fails to build must not stop the others from running.
cmake --build build/gpu -j "$(nproc)" --target device_cuda_test capi_memfit_alloc_test memfit_alloc_c memfit_bench \
  memfit_gpu_bench memfit memfit_python -- -k >>"$OUT/build.log" 2>&1 || { step "build failed (see build.log)"; grep -m20 -B2 -A8 'error' "$OUT/build.log" | tee -a "$S"; }
if want tests; then
step "GPU tests"
(cd build/gpu && timeout 150 ctest -R 'CudaDevice|CudaPageMapper|GpuConformance|AsyncAllocator|CApi' --output-on-failure) \
  >"$OUT/gpu_tests.txt" 2>&1
grep -E 'tests passed|tests failed|Failed|SKIPPED|Not Run' "$OUT/gpu_tests.txt" | head -20 >>"$S"
fi
if want gpubench; then
step "GPU benchmarks"
timeout 120 build/gpu/bench/memfit_gpu_bench --benchmark_color=false >"$OUT/gpu_bench.txt" 2>&1
tail -12 "$OUT/gpu_bench.txt" >>"$S"
fi
lib=build/gpu/src/libmemfit_alloc.so
F="$OUT/frameworks.txt"
: >"$F"
fw() {  # fw NAME ENV... -- COMMAND...: one framework run, its JSON line and stderr into frameworks.txt
  local name=$1; shift
  step "$name"
  { echo "=== $name"; env "$@" 2>/tmp/fw.err; echo "rc=$?"; echo "--- stderr (last 40 lines)"; tail -40 /tmp/fw.err; } >>"$F"
}
want gpt2_torch && fw gpt2_torch timeout 120 python3 gpu/pytorch_gpt2.py torch
want gpt2_bfc && fw gpt2_memfit_bfc XLA_PYTHON_CLIENT_MEM_FRACTION=.9 timeout 120 python3 gpu/pytorch_gpt2.py memfit "$lib"
want gpt2_growth && fw gpt2_memfit_bfc_growth XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 120 python3 gpu/pytorch_gpt2.py memfit "$lib"
want gpt2_vmm && fw gpt2_memfit_vmm XLA_PYTHON_CLIENT_ALLOCATOR=vmm timeout 120 python3 gpu/pytorch_gpt2.py memfit "$lib"
want cupy && fw cupy_memfit_bfc_growth XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 60 python3 gpu/cupy_check.py "$lib"
python3 - "$F" <<'PY' | tee -a "$S"
import json, statistics, sys
name = None
runs = {}
for line in open(sys.argv[1]):
    if line.startswith("=== "):
        name = line[4:].strip()
    elif line.startswith("{"):
        r = json.loads(line)
        runs[name] = r
        if "losses" in r:
            peak = r.get("max_memory_reserved") or (r.get("memfit_stats") or {}).get("peak_pool_bytes")
            print(name, "losses", r["losses"], "step_s", [round(t, 3) for t in r["step_s"]], "peak_reserved", peak)
        else:
            print(name, r)
# The page-mapped pool's targets: step time within 3% of the BFC pool's (steps after the first, which
# compiles and warms), peak reserved <= 1.02x peak live, the same losses.
vmm, bfc = runs.get("gpt2_memfit_vmm"), runs.get("gpt2_memfit_bfc")
if vmm and bfc and "step_s" in vmm and "step_s" in bfc:
    v, b = statistics.median(vmm["step_s"][1:]), statistics.median(bfc["step_s"][1:])
    st = vmm.get("memfit_stats") or {}
    live = st.get("peak_bytes_in_use") or 0
    pool = st.get("peak_pool_bytes") or 0
    print(f"vmm vs bfc: step {v:.4f} s vs {b:.4f} s = {v / b:.3f}x (target <= 1.03); "
          f"peak pool {pool} / peak live {live} = {pool / live if live else 0:.4f}x (target <= 1.02); "
          f"same losses: {vmm.get('losses') == bfc.get('losses')}")
PY
if want share; then
step "two GPT-2 loops sharing the GPU (gpu/share_gpt2.sh)"
OUT="$OUT" timeout 600 bash gpu/share_gpt2.sh | tee -a "$S"
fi
if want jax; then
step "memfit_jax on the GPU (gpu/jax_check.py)"
PYTHONPATH=build/gpu/python timeout 300 python3 gpu/jax_check.py build/gpu/tools/memfit/memfit /tmp/memfit-jax \
  >"$OUT/jax.txt" 2>&1
tail -5 "$OUT/jax.txt" >>"$S"
fi
if want cpubench; then
step "CPU allocator benchmarks"
timeout 240 build/gpu/bench/memfit_bench --benchmark_color=false ${MEMFIT_CPU_BENCH_ARGS:-} >"$OUT/alloc_bench.txt" 2>&1
tail -25 "$OUT/alloc_bench.txt" >>"$S"
fi
step "done"
