import cupy as cp, numpy as np, time, sys, os
mode = sys.argv[1]
if mode == "copier":
    h = np.zeros(2, np.float32); d = cp.zeros(2, cp.float32); s = cp.cuda.Stream(non_blocking=True)
    for _ in range(200): d.set(h, stream=s); s.synchronize()
    t = []
    for _ in range(2000):
        t0 = time.perf_counter(); d.set(h, stream=s); s.synchronize(); t.append(time.perf_counter() - t0)
    print(sys.argv[2], "htod 8B + sync median us %.1f p10 %.1f" % (np.median(t)*1e6, np.percentile(t,10)*1e6), flush=True)
elif mode == "idle":
    d = cp.zeros(2); cp.cuda.Device().synchronize(); time.sleep(float(sys.argv[2]))
elif mode == "spin":
    k = cp.RawKernel(r'''extern "C" __global__ void spin(volatile int* f, long long n){ long long t0=clock64(); while(clock64()-t0<n && *f==0){} }''', 'spin')
    f = cp.zeros(1, cp.int32); k((1,), (1,), (f, np.int64(int(float(sys.argv[2])*1.8e9)))); cp.cuda.Device().synchronize()
if mode == "cpuspin":
    t = time.time() + float(sys.argv[2])
    while time.time() < t: pass
elif mode == "queryspin":
    s = cp.cuda.Stream(non_blocking=True); d = cp.zeros(2); cp.cuda.Device().synchronize()
    t = time.time() + float(sys.argv[2])
    while time.time() < t: s.done
elif mode == "evspin":
    s = cp.cuda.Stream(non_blocking=True); d = cp.zeros(2); e = s.record(); cp.cuda.Device().synchronize()
    t = time.time() + float(sys.argv[2])
    while time.time() < t: e.done
