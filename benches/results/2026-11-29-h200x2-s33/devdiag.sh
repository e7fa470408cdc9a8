#!/bin/bash
# The gpu_resident_mid failure report, checked by corrupting rank 0's first read of one
# exchange's result (100 bytes of the block from rank 1): expect the failure line, the wrong-range
# line (100 wrong bytes), then "right 200 ms later" after the second read.
W=$(mktemp -d)
sed 's|^    from_dev(hrecv, drecv, rb);\n    if (exchange_wrong|&|' tests/gpu/gpu_resident_mid.c > $W/t.c
python3 - "$W/t.c" <<'PY'
import sys
p=sys.argv[1]; s=open(p).read()
old="    from_dev(hrecv, drecv, rb);\n    if (exchange_wrong"
new="    from_dev(hrecv, drecv, rb);\n    { static int once; if (!once && blk > 1000 && rank == 0 && size > 1) { once = 1; memset(hrecv + blk + 10, 1, 100); } }\n    if (exchange_wrong"
assert old in s; open(p,'w').write(s.replace(old,new))
PY
build/s33/new/bin/mpicc -O2 -Itests/gpu -o $W/t $W/t.c -ldl -lm -lpthread || exit 1
build/s33/new/bin/mpirun -n 2 $W/t $((1 << 20)) 2>&1 | tail -8
