#!/usr/bin/env bash
# The GPU checks of issue #4, as one script for the device tool (an H200: one call, about 15 minutes). First,
# here: `gpu/fetch_debs.sh` (the Debian packages the device image lacks), then:
#   run(command="bash gpu/run.sh", carry=["gpu/debs"], timeout_s=540)
# Builds with the CUDA toolkit for sm_90, runs the GPU tests (the conformance suite on the real device, the
# CUDA VMM page mapper), the GPU benchmarks (BFC hit vs warm cudaMallocAsync, VMM growth vs cudaMalloc), the
# CPU allocator benchmarks, and the GPT-2 loop with PyTorch's allocator and memfit's BFC (preallocated and
# growing) and VMM through CUDAPluggableAllocator. Everything lands in $OUT (or build/gpu/out).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu/out}
mkdir -p "$OUT"
nvidia-smi > "$OUT/nvidia-smi.txt" 2>&1
{ uname -a; g++ --version; cmake --version; nvcc --version; } > "$OUT/toolchain.txt" 2>&1
# The carried Debian packages, unpacked beside the system (not over it) and searched first by CMake.
prefix=()
if compgen -G "gpu/debs/*.deb" >/dev/null; then
  deps=/tmp/memfit-deps
  for f in gpu/debs/*.deb; do dpkg -x "$f" "$deps"; done
  # zlib1g-dev's libz.so points at Debian's exact libz; point it at the one this system has.
  libz=$(ls /lib/x86_64-linux-gnu/libz.so.1* /usr/lib/x86_64-linux-gnu/libz.so.1* 2>/dev/null | head -1)
  [ -n "$libz" ] && ln -sf "$libz" "$deps/usr/lib/x86_64-linux-gnu/libz.so"
  prefix=(-DCMAKE_PREFIX_PATH="$deps/usr")
  export LD_LIBRARY_PATH="$deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
fi
# Another compiler's new warnings must not stop the GPU run (-Werror stays on in CI).
cmake -S . -B build/gpu -DCMAKE_BUILD_TYPE=Release -DMEMFIT_WERROR=OFF "${prefix[@]}" >"$OUT/cmake.log" 2>&1 ||
  { tail -30 "$OUT/cmake.log"; exit 1; }
# Only what runs here: the GPU tests, the C library, both benchmark suites.
cmake --build build/gpu -j "$(nproc)" --target device_cuda_test capi_memfit_alloc_test memfit_alloc_c memfit_bench \
  memfit_gpu_bench >"$OUT/build.log" 2>&1 || { tail -50 "$OUT/build.log"; exit 1; }
(cd build/gpu && ctest -R 'CudaDevice|CudaPageMapper|GpuConformance|AsyncAllocator|CApi' --output-on-failure) \
  >"$OUT/gpu_tests.txt" 2>&1
build/gpu/bench/memfit_gpu_bench >"$OUT/gpu_bench.txt" 2>&1
build/gpu/bench/memfit_bench --benchmark_repetitions=3 >"$OUT/alloc_bench.txt" 2>&1
lib=$(ls build/gpu/src/libmemfit_alloc.so)
timeout 120 python3 gpu/pytorch_gpt2.py torch >"$OUT/gpt2_torch.json" 2>"$OUT/gpt2_torch.err"
XLA_PYTHON_CLIENT_MEM_FRACTION=.9 timeout 120 python3 gpu/pytorch_gpt2.py memfit "$lib" \
  >"$OUT/gpt2_memfit_bfc.json" 2>"$OUT/gpt2_memfit_bfc.err"
XLA_PYTHON_CLIENT_PREALLOCATE=false timeout 120 python3 gpu/pytorch_gpt2.py memfit "$lib" \
  >"$OUT/gpt2_memfit_bfc_growth.json" 2>"$OUT/gpt2_memfit_bfc_growth.err"
XLA_PYTHON_CLIENT_ALLOCATOR=vmm timeout 120 python3 gpu/pytorch_gpt2.py memfit "$lib" \
  >"$OUT/gpt2_memfit_vmm.json" 2>"$OUT/gpt2_memfit_vmm.err"
python3 - "$OUT" <<'PY'
import json, os, sys
out = sys.argv[1]
for name in ("gpt2_torch", "gpt2_memfit_bfc", "gpt2_memfit_bfc_growth", "gpt2_memfit_vmm"):
    try:
        r = json.loads(open(os.path.join(out, name + ".json")).read().splitlines()[-1])
        print(name, "losses", r["losses"], "step_s", [round(t, 3) for t in r["step_s"]],
              r.get("max_memory_reserved") or (r.get("memfit_stats") or {}).get("peak_pool_bytes"))
    except Exception as e:
        print(name, "failed:", e)
PY
