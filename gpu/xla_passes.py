"""Which pass of an XLA compile changed the order of a module's entry computation.

    python3 gpu/xla_passes.py DUMP_DIR [MODULE]     (MODULE defaults to jit_step)

DUMP_DIR is an XLA_FLAGS="--xla_dump_to=DUMP_DIR --xla_dump_hlo_as_text --xla_dump_hlo_pass_re=.*" folder.
Prints, pass by pass, each dump whose entry order (get-tuple-elements and bitcasts aside) differs from the
one before it, or whose instruction count does, with the mean distance each instruction moved. An
unscheduled module prints in post order; the first dump with scheduled=True holds the memory scheduler's
order. Used by gpu/xla_probe.sh (step "order").
"""
import os, re, sys
d = sys.argv[1]
module = sys.argv[2] if len(sys.argv) > 2 else 'jit_step'
files = sorted(f for f in os.listdir(d) if f'.{module}.' in f and f.endswith('.txt') and re.search(r'\.' + re.escape(module) + r'\.\d{4}\.', f))
print(module, 'pass dumps:', len(files))
def entry_order(path):
    txt = open(path).read()
    m = re.search(r'^ENTRY .*?\{\n(.*?)^\}', txt, re.S | re.M)
    if not m: return None, txt
    names = []
    for line in m.group(1).splitlines():
        mm = re.match(r'\s*(?:ROOT )?%?([\w.\-#]+) = ', line)
        if mm and ' get-tuple-element(' not in line and ' bitcast(' not in line: names.append(mm.group(1))
    return names, txt
prev = None; prev_f = None
for f in files:
    names, txt = entry_order(os.path.join(d, f))
    if names is None: continue
    sched = 'is_scheduled=true' in txt.split('\n', 1)[0]
    if prev is not None:
        common = set(names) & set(prev)
        a = [n for n in prev if n in common]; b = [n for n in names if n in common]
        pa = {n: i for i, n in enumerate(a)}
        disp = sum(abs(pa[n] - i) for i, n in enumerate(b)) / max(1, len(b))
        tag = 'CHANGED' if disp > 0 else 'same   '
        if disp > 0 or len(names) != len(prev):
            print(f'{tag} {f} scheduled={sched} n={len(names)} (was {len(prev)}) mean_displacement={disp:.1f}')
    else:
        print(f'first {f} scheduled={sched} n={len(names)}')
    prev, prev_f = names, f
