"""Table of a variants.sh log: per size, each variant's median (over rounds) of its runs' median
iteration in GB/s, against raw TCP two ways: the median of each round's best figure (1 or 2
streams, 1 MiB or 64 MiB writes) and the median of each round's best 1-stream figure.

    python3 summarize.py LOG
"""
import re
import statistics
import sys

runs, names, best, one = {}, [], [], []
cur = None
for line in open(sys.argv[1]):
    if line.startswith("#### round"):
        best.append(0.0)
        one.append(0.0)
    m = re.match(r"raw TCP (\d) stream\(s\) .*: ([0-9.]+) GB/s", line)
    if m:
        best[-1] = max(best[-1], float(m.group(2)))
        if m.group(1) == "1":
            one[-1] = max(one[-1], float(m.group(2)))
    m = re.match(r"== (\S+) ", line)
    if m:
        cur = m.group(1)
        if cur not in names:
            names.append(cur)
    f = line.split()
    if cur and len(f) >= 11 and f[0].isdigit() and f[1].isdigit():
        runs.setdefault(cur, {}).setdefault(int(f[0]), []).append(int(f[0]) / float(f[9]) / 1e3)
rb, r1 = statistics.median(best), statistics.median(one)
print(f"# {len(best)} rounds; raw best per round {', '.join(f'{x:.2f}' for x in best)} (median {rb:.2f});"
      f" raw 1 stream per round {', '.join(f'{x:.2f}' for x in one)} (median {r1:.2f})")
print("| size | " + " | ".join(names) + " | " + " | ".join(f"{n}/raw best" for n in names) + " | "
      + " | ".join(f"{n}/raw 1 stream" for n in names) + " |")
print("|---" * (1 + 3 * len(names)) + "|")
for size in sorted(runs[names[0]]):
    v = [statistics.median(runs[n].get(size, [float("nan")])) for n in names]
    label = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
    print(f"| {label} | " + " | ".join(f"{x:.2f}" for x in v) + " | "
          + " | ".join(f"{100 * x / rb:.0f}%" for x in v) + " | "
          + " | ".join(f"{100 * x / r1:.0f}%" for x in v) + " |")
