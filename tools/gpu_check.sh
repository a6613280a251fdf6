#!/usr/bin/env bash
# The GPU machine's check, in one command: build, the CUDA test suites, the benchmarks. Writes
# logs and JSON under $OUT (default ./gpu_out). Usage: tools/gpu_check.sh [tests|bench|all|distributed]
# (distributed: on a machine with 2 GPUs, the thunder.distributed tests over NCCL and
# benchmarks/bench_distributed.py; not part of all)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
what=${1:-all}
make build JOBS="$(nproc)" >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
export PYTHONPATH=$PWD/python:$PWD/tests/python THUNDER_TEST_DEVICE=cuda
nvidia-smi -L
python -c "import torch; print('torch', torch.__version__)"
if [ "$what" = tests ] || [ "$what" = all ]; then
  timeout 900 python -m pytest -q -p no:cacheprovider tests/python/test_ops.py tests/python/test_gpu.py \
    tests/python/test_sdpa.py tests/python/test_fuser.py tests/python/test_models.py \
    tests/python/test_cudagraphs.py tests/python/test_complex_grads.py tests/python/test_executors_seed000.py \
    tests/python/test_xent_upcast.py tests/python/test_torch_compile.py >"$OUT/tests.log" 2>&1
  grep -E "^(FAILED|ERROR)" "$OUT/tests.log" | head -40
  tail -1 "$OUT/tests.log"
  timeout 900 python tools/gpu_xent_check.py >"$OUT/xent.log" 2>&1
  grep -E "^FAIL" "$OUT/xent.log" | head -20
  tail -1 "$OUT/xent.log"
fi
if [ "$what" = bench ] || [ "$what" = all ]; then
  timeout 600 python -m benchmarks.run --device cuda --repeats 10 --json "$OUT/run.json" 2>&1 | tail -14
fi
if [ "$what" = distributed ]; then
  export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
  timeout 900 python -m pytest -q -p no:cacheprovider tests/python/test_distributed.py >"$OUT/distributed_tests.log" 2>&1
  grep -E "^(FAILED|ERROR)" "$OUT/distributed_tests.log" | head -20
  tail -1 "$OUT/distributed_tests.log"
  timeout 900 python benchmarks/bench_distributed.py --world 2 --steps 10 --json "$OUT/distributed.json" 2>&1 | tail -24
fi
