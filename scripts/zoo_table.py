#!/usr/bin/env python3
"""memfit plan against the H200 on every program of ../shared/data/xla/programs.json.

    scripts/zoo_table.py   (needs build/release)

Plans each program's `config` with `memfit plan SPEC --json` and prints the step's measured peak (programs.json's
definition: peak_bytes_in_use_after_step - (bytes_in_use_before_step - argument_size_in_bytes)), memfit's
peak and the error; configs the zoo does not build print memfit's reason. The XLA:CPU compiles (cpu8_*) print
per-device argument and temp bytes against XLA's memory_analysis(). `at most` is the step's peak in the
program's own order (the most XLA's memory scheduler keeps); `in range` whether the measured peak lies between
the prediction - 5% and that + 5%.
"""
import json, os, statistics, subprocess, tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, '..', 'shared', 'data', 'xla', 'programs.json')
M = os.path.join(ROOT, 'build', 'release', 'tools', 'memfit', 'memfit')
errs = []
covered = 0
print(f"{'program':40} {'measured':>13} {'ours':>13} {'err':>8} {'at most':>13} {'in range':>8}")
with tempfile.TemporaryDirectory() as tmp:
    for p in json.load(open(DATA))['programs']:
        spec = os.path.join(tmp, p['name'] + '.json')
        config = dict(p['config'], backend=p.get('backend', 'gpu'))  # the cpu8_* programs were XLA:CPU compiles
        with open(spec, 'w') as f:
            json.dump(config, f)
        r = subprocess.run([M, 'plan', spec, '--json'], capture_output=True, text=True)
        if r.returncode not in (0, 1):  # 1: does not fit a given device; none is given here
            print(f"{p['name']:40} refused: {r.stderr.strip()[:100]}")
            continue
        ours = json.loads(r.stdout)['peak_bytes']
        upper = json.loads(r.stdout)['peak_upper_bytes']
        ma, meas = p['xla_memory_analysis'], p.get('measured')
        if not meas:  # compiled for XLA:CPU, not run: per-device arguments and temp against XLA's
            ours_arg, ours_temp = json.loads(r.stdout)['argument_bytes'], json.loads(r.stdout)['temp_bytes']
            t = (ours_temp - ma['temp_size_in_bytes']) / ma['temp_size_in_bytes'] * 100
            print(f"{p['name']:40} (XLA:CPU) argument {ours_arg} vs {ma['argument_size_in_bytes']}, "
                  f"temp {ours_temp} vs {ma['temp_size_in_bytes']} ({t:+.1f}%)")
            continue
        peak = meas['peak_bytes_in_use_after_step'] - (meas['bytes_in_use_before_step'] - ma['argument_size_in_bytes'])
        e = (ours - peak) / peak * 100
        errs.append(abs(e))
        inside = ours * 0.95 <= peak <= upper * 1.05
        covered += inside
        print(f"{p['name']:40} {peak:>13} {ours:>13} {e:+7.1f}% {upper:>13} {'yes' if inside else 'NO':>8}")
if errs:
    print("median |error| %.1f%%, within 5%%: %d of %d" % (statistics.median(errs), sum(e <= 5 for e in errs), len(errs)))
    print("measured peak within [prediction - 5%%, at most + 5%%]: %d of %d" % (covered, len(errs)))
