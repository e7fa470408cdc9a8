"""Tests of compare.py's CSV/merge/ratio/table code and gloo_bench.py's pure
helpers.  Run: python3 -m unittest discover -s benches -p 'test_*.py'
(or pytest benches/test_compare.py)."""
import os
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare  # noqa: E402
import gloo_bench  # noqa: E402

HEADER = ("backend,op,nranks,mem,mode,size,count,type,redop,root,time_us,algbw_gbps,busbw_gbps,wrong,"
          "med_us,min_us,algbw_med_gbps,busbw_med_gbps")


def row(backend, op, size, med, busbw, wrong=0):
    return (f"{backend},{op},2,host,blocking,{size},{size // 4},float,sum,-1,{med:.3f},0,0,{wrong},"
            f"{med:.3f},{med:.3f},0,{busbw}")


class CompareLogic(unittest.TestCase):
    def setUp(self):
        # two CSV files appended into one text, as compare.py concatenates raw runs
        self.text = "\n".join([
            HEADER,
            row("gpumpi", "allreduce", 8, 2.0, 0.004),
            row("gpumpi", "allreduce", 1024, 4.0, 0.256),
            HEADER,
            row("mpich", "allreduce", 8, 3.0, 0.003),
            row("mpich", "allreduce", 1024, 2.0, 0.512),
            row("mpich", "pingpong", 8, 1.5, 0.005, wrong=3),
            "# a comment line",
            "backend,op,nranks,mem,event,time_us",
            "mpich,firstcall,2,host,first_allreduce_8B,12.0",
        ])

    def test_parse_types_and_skips(self):
        rows = compare.parse_csv(self.text)
        self.assertEqual(len(rows), 5)          # header repeats, comment, firstcall skipped
        self.assertEqual(rows[0]["size"], 8)
        self.assertIsInstance(rows[0]["med_us"], float)
        self.assertEqual(rows[4]["wrong"], 3)

    def test_merge_and_ratio(self):
        m = compare.merge(compare.parse_csv(self.text))
        self.assertEqual(sorted(m), ["allreduce", "pingpong"])
        self.assertEqual(sorted(m["allreduce"]), [8, 1024])
        cell = m["allreduce"][8]
        self.assertAlmostEqual(compare.ratio(cell["gpumpi"], cell["mpich"]), 1.5)   # gpumpi faster
        cell = m["allreduce"][1024]
        self.assertAlmostEqual(compare.ratio(cell["gpumpi"], cell["mpich"]), 0.5)   # gpumpi slower
        self.assertIsNone(compare.ratio(None, cell["mpich"]))
        self.assertIsNone(compare.ratio({"med_us": 0.0}, cell["mpich"]))

    def test_table(self):
        m = compare.merge(compare.parse_csv(self.text))
        t = compare.format_table("allreduce", m["allreduce"], ["gpumpi", "mpich"])
        lines = t.splitlines()
        self.assertIn("gpumpi/mpich", lines[1])
        self.assertEqual(len(lines), 4)             # title, header, two sizes
        cells8 = lines[2].split()
        self.assertEqual(cells8[0], "8")
        self.assertEqual(cells8[1], "2.00")         # gpumpi med us
        self.assertEqual(cells8[3], "3.00")         # mpich med us
        self.assertEqual(cells8[-1], "1.500")       # ratio
        self.assertEqual(lines[3].split()[-1], "0.500")
        # a backend missing at a size prints '-'; no gpumpi -> no ratio columns
        t2 = compare.format_table("pingpong", m["pingpong"], ["gpumpi", "mpich"])
        self.assertEqual(t2.splitlines()[2].split()[1], "-")
        self.assertEqual(t2.splitlines()[2].split()[-1], "-")
        t3 = compare.format_table("allreduce", m["allreduce"], ["mpich"])
        self.assertNotIn("gpumpi/", t3.splitlines()[1])
        self.assertEqual(len(t3.splitlines()[1].split()), 3)

    def test_wrong_rows_and_ratio_records(self):
        rows = compare.parse_csv(self.text)
        bad = compare.wrong_rows(rows)
        self.assertEqual([(r["backend"], r["op"]) for r in bad], [("mpich", "pingpong")])
        recs = compare.ratio_records(compare.merge(rows), ["gpumpi", "mpich"])
        self.assertEqual(len(recs), 2)
        self.assertEqual({r["size"]: round(r["ratio"], 3) for r in recs}, {8: 1.5, 1024: 0.5})

    def test_skip_reason(self):
        self.assertEqual(compare.skip_reason("# x\n# nccl: not available (libnccl.so.2 not found)\n"),
                         "nccl: not available (libnccl.so.2 not found)")
        self.assertIsNone(compare.skip_reason("# header\n  8 2 float\n"))
        self.assertEqual(compare.describe("gloo", "gloo: skip (no torch)"), "skip (no torch)")
        self.assertEqual(compare.describe("nccl", "nccl: not available (x)"), "not available (x)")
        self.assertEqual(compare.describe("mpich", "ok"), "ok")

    def test_plot_writes_png_when_matplotlib_present(self):
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            self.skipTest("matplotlib not installed")
        with tempfile.TemporaryDirectory() as d:
            files = compare.plot(compare.merge(compare.parse_csv(self.text)), ["gpumpi", "mpich"], d)
            self.assertEqual(sorted(os.path.basename(f) for f in files), ["allreduce.png", "pingpong.png"])
            with open(files[0], "rb") as f:
                self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")


class FirstCall(unittest.TestCase):
    TEXT = "\n".join([
        "backend,op,nranks,mem,event,time_us",
        "gpumpi,firstcall,2,host,init_main_to_mpi_init_done,1000.0",
        "gpumpi,firstcall,2,host,first_allreduce_8B,10.0",
        "backend,op,nranks,mem,event,time_us",
        "mpich,firstcall,2,host,init_main_to_mpi_init_done,4000.0",
        "mpich,firstcall,2,host,first_allreduce_8B,5.0",
        "mpich,firstcall,2,host,nccl_comm_init,7.0",
    ])

    def test_parse_and_table(self):
        ev = compare.parse_events(self.TEXT)
        self.assertEqual(ev["gpumpi"]["first_allreduce_8B"], 10.0)
        self.assertEqual(len(ev["mpich"]), 3)
        self.assertEqual(compare.parse_csv(self.TEXT), [])     # not sweep rows
        lines = compare.format_events(ev, ["gpumpi", "mpich", "gloo"]).splitlines()
        self.assertIn("gpumpi/mpich", lines[1])
        self.assertNotIn("gloo", lines[1])                     # absent backend: no column
        init = lines[2].split()
        self.assertEqual(init[0], "init_main_to_mpi_init_done")
        self.assertEqual(init[1:], ["1000.0", "4000.0", "4.000"])
        self.assertEqual(lines[3].split()[1:], ["10.0", "5.0", "0.500"])
        self.assertEqual(lines[4].split()[1:], ["-", "7.0", "-"])  # event only one backend has


class Launcher(unittest.TestCase):
    def test_launcher_by_prefix_contents(self):
        with tempfile.TemporaryDirectory() as d:
            os.makedirs(os.path.join(d, "bin"))
            self.assertEqual(compare.launcher("gpumpi", d, 4),
                             [os.path.join(d, "bin", "mpirun"), "-n", "4", "--oversubscribe"])
            open(os.path.join(d, "bin", "mpichversion"), "w").close()   # an MPICH prefix as "gpumpi"
            self.assertEqual(compare.launcher("gpumpi", d, 2), [os.path.join(d, "bin", "mpiexec"), "-n", "2"])


class GlooHelpers(unittest.TestCase):
    def test_sizes(self):
        self.assertEqual(gloo_bench.parse_size("128M"), 128 << 20)
        self.assertEqual(gloo_bench.parse_size("4MiB"), 4 << 20)
        self.assertEqual(gloo_bench.parse_size("16KB"), 16384)
        for bad in ("", "M", "1.5M", "-8", "8iB"):
            with self.assertRaises(ValueError):
                gloo_bench.parse_size(bad)
        self.assertEqual(gloo_bench.sweep(8, 100, 4), [8, 32])
        self.assertEqual(len(gloo_bench.sweep(8, 128 << 20, 2)), 25)
        with self.assertRaises(ValueError):
            gloo_bench.sweep(8, 4, 2)

    def test_busbw_and_counts(self):
        self.assertAlmostEqual(gloo_bench.busbw_factor("allreduce", 8), 1.75)
        self.assertAlmostEqual(gloo_bench.busbw_factor("allgather", 4), 0.75)
        self.assertAlmostEqual(gloo_bench.busbw_factor("bcast", 4), 1.0)
        self.assertEqual(gloo_bench.counts("alltoall", 1000, 1, 3), (999, 333))
        self.assertEqual(gloo_bench.counts("allreduce", 1024, 4, 3), (256, 256))
        self.assertEqual(gloo_bench.median([10, 1, 7, 2]), 4.5)

    def test_skip_without_torch(self):
        try:
            import torch  # noqa: F401
            self.skipTest("torch installed")
        except ImportError:
            pass
        import contextlib
        import io
        buf = io.StringIO()
        with contextlib.redirect_stdout(buf):
            rc = gloo_bench.main(["-o", "allreduce"])
        self.assertEqual(rc, 0)
        self.assertTrue(buf.getvalue().startswith("# gloo: skip"))


class GlooStaging(unittest.TestCase):
    """gloo_bench.P2P with stand-ins for torch.distributed and tensors."""

    class T:
        def __init__(self, vals, where):
            self.vals, self.where = list(vals), where
            self.shape = (len(vals),)

        def copy_(self, other):
            self.vals = list(other.vals)

    class Dist:
        """Records every call; a receive delivers the last tensor sent to it (loopback)."""

        def __init__(self):
            self.calls, self.wire = [], []

        def _work(self, fn):
            class W:
                def wait(self_inner):
                    fn()
                    return True
            return W()

        def isend(self, t, peer):
            self.calls.append(("isend", t.where, peer))
            self.wire.append(list(t.vals))
            return self._work(lambda: None)

        def irecv(self, t, peer):
            self.calls.append(("irecv", t.where, peer))

            def deliver():
                t.vals = self.wire.pop(0)
            return self._work(deliver)

    def host_like(self, t):
        return self.T([0] * t.shape[0], "host")

    def test_staged_goes_through_host_tensors(self):
        d = self.Dist()
        p = gloo_bench.P2P(d, True, self.host_like)
        sb, rb = self.T([1, 2, 3], "cuda"), self.T([0, 0, 0], "cuda")
        p.send(sb, 1)
        p.recv(rb, 1)
        self.assertEqual(d.calls, [("isend", "host", 1), ("irecv", "host", 1)])
        self.assertEqual(rb.vals, [1, 2, 3])
        # nonblocking: the device tensor is written only at wait(), host buffers are reused
        sb.vals = [7, 8, 9]
        ws = [p.isend(sb, 0), p.irecv(rb, 0), p.irecv(rb, 0)]
        self.assertEqual(rb.vals, [1, 2, 3])
        d.wire.append([4, 5, 6])
        for w in ws:
            w.wait()
        self.assertEqual(rb.vals, [4, 5, 6])
        self.assertEqual(len(p.bufs), 2)
        self.assertTrue(all(c[1] == "host" for c in d.calls))

    def test_host_tensors_are_sent_directly(self):
        d = self.Dist()
        p = gloo_bench.P2P(d, False, self.host_like)
        sb, rb = self.T([5], "host"), self.T([0], "host")
        p.send(sb, 1)
        p.recv(rb, 1)
        self.assertEqual(rb.vals, [5])
        self.assertEqual(p.bufs, {})

    def test_labels(self):
        self.assertEqual(gloo_bench.mem_label("cuda", "pingpong"), "cuda-staged")
        self.assertEqual(gloo_bench.mem_label("cuda", "sendrecv"), "cuda-staged")
        self.assertEqual(gloo_bench.mem_label("cuda", "allreduce"), "cuda")
        self.assertEqual(gloo_bench.mem_label("host", "bw"), "host")
        r = {"med_us": 5.0, "busbw_med_gbps": 1.0, "mem": "cuda-staged"}
        g = {"med_us": 2.0, "busbw_med_gbps": 2.0, "mem": "cuda"}
        t = compare.format_table("sendrecv", {8: {"gloo": r, "gpumpi": g}}, ["gpumpi", "gloo"])
        self.assertIn("gloo(staged):us", t)
        self.assertNotIn("gpumpi(staged)", t)
        self.assertIn("2.500", t)  # ratio gloo/gpumpi time


if __name__ == "__main__":
    unittest.main()
