#!/usr/bin/env bash
# XLA on the GPU, for the planner (issues #16/#18): run beside gpu/run.sh in one device call, it
#   1. compiles gpt_mixed_donate_remat_full_b16 (22% larger in XLA than memfit's plan of its lowered program)
#      with the memory scheduler's VLOG(2) decision log, then with the Speed-of-Light latency estimator off
#      and with the latency-hiding scheduler off, printing XLA's temp for each (step "lhs");
#   1b. dumps every pass of it and of the offload program and prints which pass changed the entry's order
#      (gpu/xla_passes.py), with the memory scheduler's choice among list, DFS and post order (step "order");
#   1c. logs which buffers its estimate of each order shares (step "estimate", not in the default steps;
#       memfit's model of the estimate is checked against step "order"'s figures without a GPU);
#   2. captures programs of the shared families in combinations the shared data does not hold (lowered HLO,
#      StableHLO, optimized HLO, memory_analysis() and the measured memory_stats()), a check the planner
#      was not tuned on.
# Needs .probe/reference_programs.py (a copy of ../shared/data/xla/reference_programs.py, carried).
# Writes the decision logs and $OUT/probe_new.tar (its files compressed) and prints one line per program.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-build/gpu/out}
P=/tmp/probe
mkdir -p "$P/lhs" "$P/new"
ref=.probe/reference_programs.py
cfg() { python3 -c "import json,sys; d=dict(model='gpt',vocab=32000,d_model=1024,heads=16,layers=8,seq=1024,batch=8); d.update(json.loads(sys.argv[1])); print(json.dumps(d))" "$1"; }
lhs() {  # lhs NAME FLAGS VMODULE
  local c; c=$(cfg "{\"name\": \"$1\", \"donate\": true, \"precision\": \"mixed\", \"remat\": \"full\", \"batch\": 16, \"compile_only\": true}")
  XLA_PYTHON_CLIENT_PREALLOCATE=false XLA_FLAGS="--xla_gpu_autotune_level=0 $2" TF_CPP_MIN_LOG_LEVEL=0 \
    TF_CPP_VMODULE="$3" timeout 150 python3 "$ref" one "$c" "$P/lhs" >"$P/lhs/$1.json" 2>"$P/lhs/$1.stderr"
  echo "$1 rc=$? temp=$(python3 -c "import json,sys; r=json.load(open(sys.argv[1])); print((r.get('memory_analysis') or {}).get('temp_size_in_bytes'), (r.get('error') or '')[-300:])" "$P/lhs/$1.json")"
  # The decision log can be large: at most 12 MB of it compressed comes back (zcat reads a cut stream).
  gzip -c "$P/lhs/$1.stderr" | head -c 12000000 >"$P/lhs/$1.stderr.gz"; rm -f "$P/lhs/$1.stderr"
}
# MEMFIT_PROBE_STEPS picks parts for a rerun (default: all). The pass dumps (--xla_dump_hlo_pass_re) came
# to 26 MB, over what the device tool returns; the logs come back as files of their own.
steps=" ${MEMFIT_PROBE_STEPS:-lhs order new} "
want() { [[ $steps == *" $1 "* ]]; }
# hlo_memory_scheduler=2: each "Schedule instruction" of the list scheduler and the memory each schedule
# needs by XLA's estimate; gpu_hlo_schedule=1 marks where the entry module's scheduling starts.
V2="hlo_memory_scheduler=2,gpu_hlo_schedule=1"
if want lhs; then
echo "[$(date +%T)] LHS probe"
lhs mixed_remat_full_vlog "" "$V2"
lhs mixed_remat_full_no_sol "--xla_gpu_enable_analytical_sol_latency_estimator=false" ""
lhs mixed_remat_full_no_lhs_vlog "--xla_gpu_enable_latency_hiding_scheduler=false" "$V2"
cp "$P"/lhs/*vlog.stderr.gz "$OUT"/
fi
if want order; then
echo "[$(date +%T)] which pass orders the entry"
order() {  # order NAME CONFIG-JSON-TAIL
  local d="$P/order/$1"
  mkdir -p "$d/dump"
  XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=0 TF_CPP_VMODULE="$V2" \
    XLA_FLAGS="--xla_gpu_autotune_level=0 --xla_dump_to=$d/dump --xla_dump_hlo_as_text --xla_dump_hlo_pass_re=.*" \
    timeout 200 python3 "$ref" one "$(cfg "{\"name\": \"$1\", \"donate\": true, \"precision\": \"mixed\", \"compile_only\": true, $2}")" \
    "$d" >"$d/rec.json" 2>"$d/err"
  { echo "== $1"
    awk '/Fingerprint before LHS for module jit_step/{f=1} f' "$d/err" | grep -E "Min-memory|Chose" | sed 's/.*\] //'
    python3 gpu/xla_passes.py "$d/dump" | grep -E "scheduled=True|^first" ; } >"$OUT/order_$1.txt" 2>&1
  rm -rf "$d/dump"  # 160 MB a program
}
order remat_full_b16 '"remat": "full", "batch": 16' &
order offload_dots_nb '"remat": "offload_dots_no_batch"' &
wait
cat "$OUT"/order_*.txt
fi
if want estimate; then
# Which buffers XLA's memory scheduler shares when it estimates each order (heap_simulator=1: "Sharing A
# with B" for each operand buffer a value takes over, "Program time" opening each simulation; the module
# text it also prints is dropped on the way, it would be gigabytes). memfit models the estimate
# (BufferModel::scheduler_estimate_bytes, which gives the figures step "order" logged); these lines check its
# sharing one buffer at a time, and give GPT-2's dimensions' figures, which were never logged.
# Run: MEMFIT_PROBE_STEPS=estimate bash gpu/xla_probe.sh
echo "[$(date +%T)] the memory scheduler's estimates"
estimate() {  # estimate NAME CONFIG-JSON-TAIL
  XLA_PYTHON_CLIENT_PREALLOCATE=false TF_CPP_MIN_LOG_LEVEL=0 XLA_FLAGS="--xla_gpu_autotune_level=0" \
    TF_CPP_VMODULE="hlo_memory_scheduler=2,heap_simulator=1,gpu_hlo_schedule=1" timeout 300 python3 "$ref" one \
    "$(cfg "{\"name\": \"$1\", \"donate\": true, \"precision\": \"mixed\", \"remat\": \"full\", \"batch\": 16, \"compile_only\": true, $2}")" \
    "$P/lhs" 2>&1 >"$P/lhs/$1.estimate.json" |
    grep -E "Min-memory|Chose|Sharing |ShareWith|Program time|Fingerprint before LHS" | gzip >"$OUT/estimate_$1.log.gz"
  echo "$1: $(zcat "$OUT/estimate_$1.log.gz" | grep -cE "Sharing ") sharing lines;" \
    "$(zcat "$OUT/estimate_$1.log.gz" | grep -E "Min-memory|Chose" | sed 's/.*\] //' | tr '\n' ' ')"
}
estimate remat_full_b16 '"seq": 1024'
estimate gpt2dims_remat_full_b16 '"vocab": 50257, "d_model": 768, "heads": 12, "layers": 12'
fi
want new || exit 0
echo "[$(date +%T)] new programs"
G='"model":"gpt","vocab":32000,"d_model":1024,"heads":16,"layers":8,"seq":1024,"batch":8'
V='"model":"vit","image":224,"patch":16,"channels":3,"classes":1000,"d_model":768,"heads":12,"layers":12,"batch":64'
M='"model":"mlp","din":1024,"width":4096,"depth":8,"dout":1024,"batch":2048'
python3 - "$ref" "$P/new" <<PY
import json, sys, importlib.util, time
from concurrent.futures import ThreadPoolExecutor
spec = importlib.util.spec_from_file_location("ref", sys.argv[1]); ref = importlib.util.module_from_spec(spec)
spec.loader.exec_module(ref)
cfgs = [
  dict({$G}, name="gpt_bf16_donate_remat_dots", donate=True, precision="bf16", remat="dots"),
  dict({$G}, name="gpt_mixed_donate_scan", donate=True, precision="mixed", scan=True),
  dict({$G}, name="gpt_mixed_infer_b16", step="infer", precision="mixed", batch=16),
  dict({$G}, name="gpt_fp32_decode_b8", step="decode"),
  dict({$G}, name="gpt2dims_fp32_donate", vocab=50257, d_model=768, heads=12, layers=12, donate=True),
  dict({$M}, name="mlp_bf16_donate_remat_full", donate=True, precision="bf16", remat="full"),
  dict(model="mlp", din=256, width=2048, depth=3, dout=256, batch=64, name="mlp_vmap_grads_b64", step="vmap_grads", donate=True),
  dict({$V}, name="vit_b16_mixed_donate_remat_dots", donate=True, precision="mixed", remat="dots"),
  dict(model="flax_cnn", batch=32, image=224, name="flax_cnn_adamw_b32"),
]
t0 = time.time()
with ThreadPoolExecutor(4) as ex, open(sys.argv[2] + "/results.jsonl", "w") as res:
    for r in ex.map(lambda c: ref.run_one(c, sys.argv[2]), cfgs):
        res.write(json.dumps(r, default=str) + "\n"); res.flush()
        ma = r.get("memory_analysis") or {}
        print("%-36s %6.1fs temp=%s err=%s" % (r["cfg"]["name"], r.get("wall_s", -1), ma.get("temp_size_in_bytes"),
              (r.get("error") or "")[-300:].replace("\n", " ")), flush=True)
print("programs total %.1fs" % (time.time() - t0), flush=True)
PY
gzip -f "$P"/new/*.txt "$P"/new/*.mlir 2>/dev/null
echo "[$(date +%T)] probe done"
tar -C "$P" -cf "$OUT/probe_new.tar" new
