"""Two processes on one GPU take turns (a flag in shared memory), each turn one small GPU
operation + synchronize, timed. Modes: both (both processes' turns use the GPU), one (only
process 0's; process 1 holds an idle context), noctx (process 1 never creates a context).
Ops: h2d (8 B pinned host -> device), kern (a one-element kernel)."""
import multiprocessing as mp, sys, time, statistics as st

def worker(me, flag, n, mode, op, q):
    import cupy as cp, numpy as np
    use = mode == "both" or me == 0
    if mode != "noctx" or me == 0:
        cp.cuda.Device(0).use()
        d = cp.zeros(2, dtype=cp.float32)
        h = cp.cuda.alloc_pinned_memory(8)
        s = cp.cuda.Stream(non_blocking=True)
        inc = cp.ElementwiseKernel("", "float32 x", "x += 1", "inc1")
        def run():
            if op == "h2d":
                d.data.copy_from_host_async(h.ptr, 8, s)
            else:
                with s:
                    inc(d[:1])
            s.synchronize()
        run(); run()
    times = []
    for i in range(n):
        while flag.value != me:
            pass
        t0 = time.perf_counter()
        if use:
            run()
        times.append(time.perf_counter() - t0)
        flag.value = 1 - me
    q.put((me, st.median(times[n // 10:]) * 1e6))

if __name__ == "__main__":
    ctx = mp.get_context("spawn")
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    for op in ("h2d", "kern"):
        for mode in ("noctx", "one", "both"):
            flag = ctx.Value("i", 0, lock=False)
            q = ctx.Queue()
            ps = [ctx.Process(target=worker, args=(me, flag, n, mode, op, q)) for me in (0, 1)]
            t0 = time.perf_counter()
            for p in ps: p.start()
            res = dict(q.get() for _ in ps)
            for p in ps: p.join()
            print(f"{op:5} {mode:6} per-turn median us: p0 {res[0]:8.1f}  p1 {res[1]:8.1f}", flush=True)
