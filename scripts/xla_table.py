#!/usr/bin/env python3
"""memfit hlo against XLA and the H200 on every program of ../shared/data/xla/programs.json.

    scripts/xla_table.py [hlo_file|lowered_hlo_file]   (default lowered_hlo_file; needs build/release)

Prints, per program, XLA's temp and memfit's, the step's measured peak (programs.json's definition) and
memfit's, and their errors; then the peak in the program's own order (memfit's "at most", the most XLA's
memory scheduler keeps) and whether the measured peak lies between the prediction and it.
"""
import os
import json,subprocess,sys
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, '..', 'shared', 'data')
d=json.load(open(os.path.join(DATA, 'xla', 'programs.json')))
M=os.path.join(ROOT, 'build', 'release', 'tools', 'memfit', 'memfit')
key=sys.argv[1] if len(sys.argv)>1 else 'lowered_hlo_file'
print(f"{'program':40} {'xla temp':>12} {'ours':>12} {'err%':>7} {'meas peak':>12} {'ours':>12} {'err%':>7} {'at most':>12} {'in range':>8}")
errs=[]
covered=0
for p in d['programs']:
    ma=p['xla_memory_analysis']
    r=subprocess.run([M,'hlo',os.path.join(DATA, p[key]),'--json'],capture_output=True,text=True)
    if r.returncode!=0:
        print(f"{p['name']:40} ERROR {r.stderr.strip()[:120]}"); continue
    j=json.loads(r.stdout)
    err=(j['temp_bytes']-ma['temp_size_in_bytes'])/max(ma['temp_size_in_bytes'],1)*100
    meas=p.get('measured'); ms=''
    if meas:
        peak=meas['peak_bytes_in_use_after_step']-(meas['bytes_in_use_before_step']-ma['argument_size_in_bytes'])
        ours=j['argument_bytes']+j['output_bytes']-j['alias_bytes']+j['temp_bytes']
        e2=(ours-peak)/peak*100; errs.append(abs(e2))
        upper=j['peak_upper_bytes']
        # Within 5% of the prediction below, or under the program's own order above.
        inside=ours*0.95<=peak<=upper*1.05
        covered+=inside
        ms=f"{peak:>12} {ours:>12} {e2:>7.1f} {upper:>12} {'yes' if inside else 'NO':>8}"
    # A sharded program before partitioning: its entry as each device holds it (memfit's per_device).
    e=j.get('per_device', j)
    xla=(ma['argument_size_in_bytes'],ma['output_size_in_bytes'],ma['alias_size_in_bytes'])
    ours_entry=(e['argument_bytes'],e['output_bytes'],e['alias_bytes'])
    ok = '' if ours_entry==xla else 'ARG/OUT/ALIAS DIFF ' + ' '.join(f"{o-x:+d}" for o,x in zip(ours_entry,xla))
    print(f"{p['name']:40} {ma['temp_size_in_bytes']:>12} {j['temp_bytes']:>12} {err:>7.1f} {ms} {ok}")
import statistics
if errs:
    print("median |peak err| %.1f%%, within 5%%: %d of %d" % (statistics.median(errs), sum(e<=5 for e in errs), len(errs)))
    print("measured peak within [prediction - 5%%, at most + 5%%]: %d of %d" % (covered, len(errs)))
