#!/usr/bin/env bash
# The GPU machine's check, in one command: build, then the named parts in order. Writes logs and
# JSON under $OUT (default ./gpu_out). Usage: tools/gpu_check.sh PART[,PART...] with parts
#   ops          the generated op tests on CUDA (test_ops.py), with pytest-xdist where present
#   tests        the other CUDA test files (models, fuser, sdpa, cudagraphs, seed examples...)
#   xent         tools/gpu_xent_check.py and benchmarks/bench_xent.py
#   profile      benchmarks/profile_step.py for gpt_train (kernels, idle gaps, host time) and
#                benchmarks/memory_step.py (where the peak memory comes from)
#   bench        python -m benchmarks.run on the whole-model and micro workloads
#   graphs       CUDA graphs: tools/gpu_graphs_check.py (checks, us per call), their tests, and
#                the overhead workload with --graphs
#   distributed  (2+ GPUs) thunder.distributed tests over NCCL and benchmarks/bench_distributed.py, at the
#                machine's GPU count (up to 8)
#   suite        the issue-28 models, eager / torch.compile / thunder (SUITE_ONLY, SUITE_MODE)
#   ab           an opt-in knob's A/B: the suite models (SUITE_ONLY, SUITE_MODE), eager and thunder,
#                without and with AB_ENV (e.g. AB_ENV=THUNDER_FUSER_KERNEL_COLUMN_SUMS=1), in turn
# Test parts print each failing test's name even when their time limit stops them, then rerun up to
# 8 failures with their messages ($OUT/<part>_failed.txt, <part>_failures.log).
# The device machine's copy of the tree may carry an older git directory: set THUNDER_COMMIT to the
# local `git rev-parse --short HEAD` in the command, or the benchmarks record that older commit
# (marked "+changes" where the tree differs from it).
#   all          ops,tests,xent,bench
# Each part has its own time limit (seconds, env T_<PART>, default 300).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-gpu_out}
mkdir -p "$OUT"
parts=${1:-all}
[ "$parts" = all ] && parts=ops,tests,xent,bench
t0=$(date +%s)
make build JOBS="$(nproc)" >"$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
echo "build: $(( $(date +%s) - t0 )) s"
export PYTHONPATH=$PWD/python:$PWD/tests/python THUNDER_TEST_DEVICE=cuda
nvidia-smi -L
python -c "import torch; print('torch', torch.__version__)"
xdist=""
oxdist=""
if python -c "import xdist" 2>/dev/null; then
  xdist="-n 8 --dist loadfile"  # seed notebooks run cell by cell in one process
  # test_ops.py is one file of independent tests: spread its tests, not its file (with loadfile
  # one worker ran them all, 80% in 520 s on an H100 machine).
  oxdist="-n $(( $(nproc) > 4 ? $(nproc) - 2 : 2 )) --dist load"
fi
lim() { local v="T_${1^^}"; echo "${!v:-300}"; }
# pytest with each test's outcome printed as it runs (-v), so that the failures are known even when
# the time limit stops the run; then the failures (up to 8) run again with their messages.
# Usage: run_tests NAME LIMIT PYTEST_ARGS...; writes $OUT/NAME.log and $OUT/NAME_failed.txt.
run_tests() {
  local name=$1 limit=$2; shift 2
  timeout "$limit" python -m pytest -v --tb=no -p no:cacheprovider "$@" >"$OUT/$name.log" 2>&1
  local rc=$?
  grep -E "(FAILED|ERROR) " "$OUT/$name.log" | grep -o "tests/[^ ]*::[^ ]*" | sort -u >"$OUT/${name}_failed.txt"
  echo "   $name: $(grep -c ' PASSED' "$OUT/$name.log") passed, $(wc -l <"$OUT/${name}_failed.txt") failed$( [ $rc = 124 ] && echo ', stopped by the time limit')"
  if [ -s "$OUT/${name}_failed.txt" ]; then
    cat "$OUT/${name}_failed.txt" | head -20
    timeout 120 python -m pytest -q --tb=short -p no:cacheprovider $(head -8 "$OUT/${name}_failed.txt") >"$OUT/${name}_failures.log" 2>&1
    grep -E "^E  " "$OUT/${name}_failures.log" | cut -c1-300 | head -30
  fi
}
for part in ${parts//,/ }; do
  t=$(date +%s)
  echo "== $part (limit $(lim "$part") s)"
  case $part in
    ops)
      run_tests ops "$(lim ops)" $oxdist tests/python/test_ops.py
      timeout 60 python tools/gpu_eager_precision_check.py >"$OUT/precision.log" 2>&1; tail -12 "$OUT/precision.log" ;;
    tests)
      # Test by test over all workers (session 27: these files in 105 s with 14 workers, against
      # 66% of them in 260 s with 8 workers file by file); the seed notebooks, whose cells run in
      # order in one process, file by file after them.
      run_tests tests "$(lim tests)" $oxdist tests/python/test_gpu.py \
        tests/python/test_sdpa.py tests/python/test_fuser.py tests/python/test_models.py \
        tests/python/test_cudagraphs.py tests/python/test_complex_grads.py \
        tests/python/test_xent_upcast.py tests/python/test_torch_compile.py tests/python/test_extend.py \
        tests/python/test_pad_sums.py tests/python/test_reinplace.py tests/python/test_index_fusion.py \
        tests/python/test_pad_matmuls.py tests/python/test_channels_last.py tests/python/test_grad_precision.py tests/python/test_cuda_kernels.py tests/python/test_conv_bias.py
      run_tests seeds 120 $xdist tests/python/test_executors_seed000.py tests/python/test_seed_001.py ;;
    suite)
      # The issue-28 models (SUITE_ONLY, SUITE_MODE: train, infer or both), eager, torch.compile and
      # thunder in one process, as a markdown table.
      timeout "$(lim suite)" python -m benchmarks.models --device cuda \
        --only "${SUITE_ONLY:-bert,gpt2,llama,vit_b16,resnet50_timm,convnext_tiny}" --mode "${SUITE_MODE:-both}" \
        --time-limit $(( $(lim suite) - 20 )) --out "$OUT/suite" --markdown >"$OUT/suite.log" 2>&1
      grep -E "^\||load average" "$OUT/suite.log" | head -40 ;;
    ab)
      # Knobs read once per process: one process per side. Eager runs in both, so that the two
      # tables show how much the machine itself moved between them.
      for side in without with; do
        env $( [ $side = with ] && echo "${AB_ENV:?AB_ENV=NAME=VALUE}" ) timeout $(( $(lim ab) / 2 )) \
          python -m benchmarks.models --device cuda --only "${SUITE_ONLY:-bert,gpt2,vit_b16,resnet50_timm}" \
          --mode "${SUITE_MODE:-both}" --contenders eager,thunder --time-limit $(( $(lim ab) / 2 - 20 )) \
          --out "$OUT/ab_$side" --markdown >"$OUT/ab_$side.log" 2>&1
        echo "-- $side ${AB_ENV}"
        grep -E "^\|" "$OUT/ab_$side.log" | grep -v "^|---\|^| model" | head -20
      done ;;
    xent)
      timeout "$(lim xent)" python tools/gpu_xent_check.py >"$OUT/xent.log" 2>&1
      grep -E "^FAIL" "$OUT/xent.log" | head -20; tail -1 "$OUT/xent.log"
      timeout "$(lim xent)" python benchmarks/bench_xent.py >"$OUT/bench_xent.log" 2>&1
      grep -E "^\||^device|^#" "$OUT/bench_xent.log" | head -30 ;;
    profile)
      timeout "$(lim profile)" python -m benchmarks.profile_step --workload gpt_train --top ${TOP:-30} \
        --contenders thunder,torch.compile >"$OUT/profile.log" 2>&1
      grep -E "^==|^   " "$OUT/profile.log"
      timeout "$(lim profile)" python -m benchmarks.memory_step 2>&1 | tail -4 ;;
    bench)
      timeout "$(lim bench)" python -m benchmarks.run --device cuda --repeats 10 --json "$OUT/run.json" ${BENCH_ARGS:-} 2>&1 | tail -16 ;;
    graphs)
      timeout "$(lim graphs)" python tools/gpu_graphs_check.py >"$OUT/graphs.log" 2>&1
      grep -vE "^  File|^    " "$OUT/graphs.log" | head -60
      timeout "$(lim graphs)" python -m pytest -q -p no:cacheprovider tests/python/test_cudagraphs.py \
        tests/python/test_gpu.py -k "graph or kv_cache" >"$OUT/graphs_tests.log" 2>&1
      grep -E "^(FAILED|ERROR)" "$OUT/graphs_tests.log" | head -20; tail -1 "$OUT/graphs_tests.log"
      timeout "$(lim graphs)" python -m benchmarks.run --device cuda --only overhead --graphs 2>&1 | tail -8 ;;
    distributed)
      export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1
      world=$(python -c "import torch; print(min(torch.cuda.device_count(), 8))")
      THUNDER_TEST_WORLD=$world timeout "$(lim distributed)" python -m pytest -q -p no:cacheprovider \
        tests/python/test_distributed.py tests/python/test_tensor_parallel.py >"$OUT/distributed_tests.log" 2>&1
      grep -E "^(FAILED|ERROR)" "$OUT/distributed_tests.log" | head -20; tail -1 "$OUT/distributed_tests.log"
      timeout "$(lim distributed)" python benchmarks/bench_distributed.py --world "$world" --steps 10 --scaling --profile \
        --json "$OUT/distributed.json" 2>&1 | tail -24 ;;
    *) echo "unknown part $part" ;;
  esac
  echo "   ($part: $(( $(date +%s) - t )) s)"
done
