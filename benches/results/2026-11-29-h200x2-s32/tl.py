# Merge GPUMPI_TL files of 2 ranks: median gap between consecutive events (rank:id -> rank:id),
# over the last half of the records (steady state).
import sys, glob, statistics, collections
files = sorted(glob.glob(sys.argv[1] + ".*"))
evs = []
for k, f in enumerate(files):
    rows = [tuple(map(int, l.split())) for l in open(f)]
    evs += [(t, k, i) for i, t in rows]
evs.sort()
evs = evs[len(evs) // 2:]
gaps = collections.defaultdict(list)
for a, b in zip(evs, evs[1:]):
    gaps[(a[1], a[2], b[1], b[2])].append(b[0] - a[0])
tot = len(evs)
for key, v in sorted(gaps.items(), key=lambda kv: -len(kv[1])):
    if len(v) < tot / 50: continue
    print("%d:%-3d -> %d:%-3d n=%6d med=%7.0f ns p10=%7.0f" % (*key, len(v), statistics.median(v), sorted(v)[len(v)//10]))
# per-id cycle period
for k in range(len(files)):
    for i in (21, 10, 12):
        ts = [t for t, r, e in evs if r == k and e == i]
        if len(ts) > 10:
            d = [b - a for a, b in zip(ts, ts[1:])]
            print("rank-file %d id %d period med %.0f ns" % (k, i, statistics.median(d)))
