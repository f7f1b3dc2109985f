#!/usr/bin/env python3
"""memfit plan against the H200 on every program of ../shared/data/xla/programs.json.

    scripts/zoo_table.py   (needs build/release)

Plans each program's `config` with `memfit plan SPEC --json` and prints the step's measured peak (programs.json's
definition: peak_bytes_in_use_after_step - (bytes_in_use_before_step - argument_size_in_bytes)), memfit's
peak and the error; configs the zoo does not build print memfit's reason.
"""
import json, os, statistics, subprocess, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, '..', 'shared', 'data', 'xla', 'programs.json')
M = os.path.join(ROOT, 'build', 'release', 'tools', 'memfit', 'memfit')
errs = []
print(f"{'program':40} {'measured':>13} {'ours':>13} {'err':>8}")
with tempfile.TemporaryDirectory() as tmp:
    for p in json.load(open(DATA))['programs']:
        spec = os.path.join(tmp, p['name'] + '.json')
        with open(spec, 'w') as f:
            json.dump(p['config'], f)
        r = subprocess.run([M, 'plan', spec, '--json'], capture_output=True, text=True)
        if r.returncode not in (0, 1):  # 1: does not fit a given device; none is given here
            print(f"{p['name']:40} refused: {r.stderr.strip()[:100]}")
            continue
        ours = json.loads(r.stdout)['peak_bytes']
        ma, meas = p['xla_memory_analysis'], p.get('measured')
        if not meas:
            print(f"{p['name']:40} {'(XLA:CPU)':>13} {ours:>13}")
            continue
        peak = meas['peak_bytes_in_use_after_step'] - (meas['bytes_in_use_before_step'] - ma['argument_size_in_bytes'])
        e = (ours - peak) / peak * 100
        errs.append(abs(e))
        print(f"{p['name']:40} {peak:>13} {ours:>13} {e:+7.1f}%")
if errs:
    print("median |error| %.1f%%, within 5%%: %d of %d" % (statistics.median(errs), sum(e <= 5 for e in errs), len(errs)))
