#!/usr/bin/env bash
# Issue #19 on the GPU: two PyTorch GPT-2 training loops (gpu/pytorch_gpt2.py at batch 24, about 50 GiB at
# their peak each) on one H200 through libmemfit_alloc.so (CUDAPluggableAllocator), with XLA's default pool
# (75% preallocated):
#   1. PyTorch's own allocator, one loop alone: the reference losses;
#   2. two loops at once, each with its own default pool (no group): the second is refused its 105 GiB,
#      backs off to what is left (~33 GiB) and runs out of memory - the seed's starved second tenant;
#   3. the same two loops in one lease group (MEMFIT_SHARE): the first gives back free regions down to its
#      fair share, both finish, with the reference losses; `memfit share` is sampled while they run.
# Run by gpu/run.sh (step "share") after it has built build/gpu; writes share.txt into $OUT.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu/out}
lib=build/gpu/src/libmemfit_alloc.so
cli=build/gpu/tools/memfit/memfit
R="$OUT/share.txt"
: >"$R"
export MEMFIT_GPT2_BATCH=${MEMFIT_GPT2_BATCH:-24}
two() {  # two LABEL ENV...: both loops at once; each one's JSON line (or its last error lines) into share.txt
  local label=$1; shift
  echo "=== $label" >>"$R"
  env "$@" timeout 200 python3 gpu/pytorch_gpt2.py memfit "$lib" >/tmp/a.json 2>/tmp/a.err & local a=$!
  sleep 3  # the first has its pool before the second asks
  env "$@" timeout 200 python3 gpu/pytorch_gpt2.py memfit "$lib" >/tmp/b.json 2>/tmp/b.err & local b=$!
  if [[ " $* " == *" MEMFIT_SHARE="* ]]; then
    for _ in 1 2 3; do sleep 5; "$cli" share gpt2 >>"$R" 2>&1; done
  fi
  wait $a; echo "first rc=$?" >>"$R"; cat /tmp/a.json >>"$R"; tail -3 /tmp/a.err >>"$R"
  wait $b; echo "second rc=$?" >>"$R"; cat /tmp/b.json >>"$R"; tail -3 /tmp/b.err >>"$R"
}
echo "=== torch alone" >>"$R"
timeout 200 python3 gpu/pytorch_gpt2.py torch >>"$R" 2>/tmp/t.err || tail -3 /tmp/t.err >>"$R"
two "two default pools, no group"
two "two default pools in lease group gpt2" MEMFIT_SHARE=gpt2
python3 - "$R" <<'PY'
import json, sys
runs, label = {}, None
for line in open(sys.argv[1]):
    if line.startswith("=== "):
        label = line[4:].strip(); runs[label] = []
    elif line.startswith("{"):
        runs[label].append(json.loads(line))
ref = (runs.get("torch alone") or [{}])[0].get("losses")
for label, rs in runs.items():
    done = [r for r in rs if "losses" in r]
    same = all(r["losses"] == ref for r in done) if ref else None
    print(f"{label}: {len(done)} finished, same losses as PyTorch's allocator: {same}")
PY
