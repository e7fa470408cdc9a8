#!/bin/bash
# s14b.sh: Horovod-style training example (gpumpi via the mpi4py binary wheel) beside DDP/NCCL; Python-level overhead of small device allreduces.
export NCCL_NVLS_ENABLE=0
bash build/dev/fixprefix.sh build/new >/dev/null
N=$PWD/build/new
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:$LD_LIBRARY_PATH
nvidia-smi -L; date -u
SP=$(python3 -c "import torch, os; print(os.path.dirname(os.path.dirname(torch.__file__)))" 2>/dev/null)
PY=$(python3 -c "import sys; print(sys.executable)")
python3 -c "import torch, cupy; print('torch', torch.__version__, 'cupy', cupy.__version__)"
$PY -m venv /tmp/wv && /tmp/wv/bin/pip install -q --no-index build/dev/whl/*.whl 2>&1 | tail -2
R() { PYTHONPATH=$SP LD_LIBRARY_PATH=$N/lib:$LD_LIBRARY_PATH timeout 90 $N/bin/mpirun -n ${NP:-2} -x PYTHONPATH -x LD_LIBRARY_PATH -x NCCL_NVLS_ENABLE ${XENV:-} /tmp/wv/bin/python "$@"; }
echo "== py overhead (mpi4py wheel, libmpi.so.12; mpi4py's default MPI_THREAD_MULTIPLE)"; R benches/py_overhead.py 2000 2>&1 | tail -12
echo "== py overhead, MPI4PY_RC_THREAD_LEVEL=serialized"; MPI4PY_RC_THREAD_LEVEL=serialized XENV="-x MPI4PY_RC_THREAD_LEVEL" R benches/py_overhead.py 2000 2>&1 | tail -12
echo "== train: mpi"; R examples/python/train_data_parallel.py --mode mpi --out /tmp/mpi.json 2>&1 | tail -4
echo "== train: mpi --overlap"; R examples/python/train_data_parallel.py --mode mpi --overlap --out /tmp/mpio.json 2>&1 | tail -4
echo "== train: ddp"; R examples/python/train_data_parallel.py --mode ddp --out /tmp/ddp.json 2>&1 | tail -4
/tmp/wv/bin/python examples/python/train_data_parallel.py --compare /tmp/mpi.json /tmp/ddp.json
/tmp/wv/bin/python examples/python/train_data_parallel.py --compare /tmp/mpio.json /tmp/ddp.json
cp /tmp/*.json $OUT/ 2>/dev/null; date -u
