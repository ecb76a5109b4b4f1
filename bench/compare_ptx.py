# Compares the kernels' PTX of two builds of a harness (nvcc ... -ptx -o x.ptx):
# every kernel of the old build must be in the new one with the same body. Kernels
# are matched by demangled name (FusedTensorCoreArgs -> FusedTensorCoreKernelArgs,
# the gated pack dropped); the entry's own name, basic-block labels, comments and
# the first_chunk shared variable's name are not compared. Used to check that the
# gated change left level 1's kernels as they were:
#   python3 bench/compare_ptx.py before.ptx after.ptx
import re, sys, subprocess
def entries(path):
    text = open(path).read()
    idx = [m.start() for m in re.finditer(r'(?m)^\.visible \.entry |^\.entry |^\.weak \.entry ', text)]
    out = {}
    for i, s in enumerate(idx):
        e = idx[i + 1] if i + 1 < len(idx) else len(text)
        chunk = text[s:e]
        name = re.search(r'\.entry (\w+)', chunk).group(1)
        chunk = '\n'.join(l for l in chunk.splitlines() if not l.lstrip().startswith('//'))
        chunk = re.sub(r'\$L__BB\d+_', r'$L__BB_', chunk)
        chunk = re.sub(r'_ZZ\w+?E11first_chunk', 'FIRST_CHUNK', chunk)  # the static shared int, named after its kernel
        out[name] = chunk.replace(name, 'NAME')
    return out
def demangle(names):
    r = subprocess.run(['c++filt'], input='\n'.join(names), capture_output=True, text=True).stdout.splitlines()
    return dict(zip(names, r))
def norm(d):
    d = d.replace('FusedTensorCoreKernelArgs', 'FusedTensorCoreArgs')
    d = re.sub(r', linattn::cuda::detail::GatePointers\)', ')', d)
    return d
old, new = entries(sys.argv[1]), entries(sys.argv[2])
dn_old, dn_new = demangle(list(old)), demangle(list(new))
by_new = {}
for n, d in dn_new.items(): by_new.setdefault(norm(d), []).append(n)
same = diff = missing = 0
for n, body in old.items():
    d = norm(dn_old[n])
    cands = [c for c in by_new.get(d, []) if 'GatePointers' not in dn_new[c]]
    if len(cands) != 1:
        print('missing', d, cands); missing += 1; continue
    if new[cands[0]] == body: same += 1
    else:
        diff += 1; print('DIFFERS', d)
gated = sum(1 for d in dn_new.values() if 'GatePointers' in d)
print(f'{same} identical, {diff} differ, {missing} missing, of {len(old)} old entries; new has {len(new)} ({gated} gated)')
