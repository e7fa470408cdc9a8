import statistics as st, sys
d={}
for l in open(sys.argv[1]):
    f=l.split(); d.setdefault(f[0],[]).append([float(x) for x in f[1:]])
for k,v in d.items():
    allv=[x for r in v for x in r]
    print(f"{k:6} runs {len(v)} median {st.median(allv):.3f} min {min(allv):.3f}  per-run medians: {' '.join(f'{st.median(r):.3f}' for r in v)}")
