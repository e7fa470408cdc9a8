#!/bin/bash
# s17e.sh: issue 22 on main: mpi4py 4.1.2 binary wheel on libmpi.so.12 with CuPy device arrays
# (1, 2, 4 ranks), the training example beside DDP/NCCL, Python-level overhead.
exec > >(tee $OUT/s17e.log) 2>&1
export NCCL_NVLS_ENABLE=0
N=$PWD/build/new
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
nvidia-smi -L; date -u
SP=$(python3 -c "import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))" 2>/dev/null)
PY=$(python3 -c "import sys; print(sys.executable)")
python3 -c "import torch, cupy; print('torch', torch.__version__, 'cupy', cupy.__version__)"
$PY -m venv /tmp/wv && /tmp/wv/bin/pip install -q --no-index build/dev/whl/*.whl 2>&1 | tail -2
/tmp/wv/bin/python -c "import mpi4py; print('mpi4py', mpi4py.__version__, mpi4py.__file__)"
R() { PYTHONPATH=$SP LD_LIBRARY_PATH=$N/lib:$LD_LIBRARY_PATH timeout 120 $N/bin/mpirun -n ${NP:-2} -x PYTHONPATH -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE ${XENV:-} /tmp/wv/bin/python "$@"; }
echo "== mpi4py wheel + CuPy via libmpi.so.12"
for n in 1 2 4; do NP=$n R tests/gpu/mpi4py_wheel_cupy.py 2>&1 | tail -3; done
echo "== py overhead, MPI4PY_RC_THREAD_LEVEL=serialized"; MPI4PY_RC_THREAD_LEVEL=serialized XENV="-x MPI4PY_RC_THREAD_LEVEL" R benches/py_overhead.py 2000 2>&1 | tail -12
echo "== train: mpi --overlap"; R examples/python/train_data_parallel.py --mode mpi --overlap --out /tmp/mpio.json 2>&1 | tail -4
echo "== train: ddp"; R examples/python/train_data_parallel.py --mode ddp --out /tmp/ddp.json 2>&1 | tail -4
echo "== train: mpi --overlap (again)"; R examples/python/train_data_parallel.py --mode mpi --overlap --out /tmp/mpio2.json 2>&1 | tail -4
echo "== train: ddp (again)"; R examples/python/train_data_parallel.py --mode ddp --out /tmp/ddp2.json 2>&1 | tail -4
/tmp/wv/bin/python examples/python/train_data_parallel.py --compare /tmp/mpio.json /tmp/ddp.json
cp /tmp/*.json $OUT/ 2>/dev/null; date -u
