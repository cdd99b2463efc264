#!/usr/bin/env bash
# One device call: the real-GPU tests and the GPU benchmarks, logs and JSON into $OUT.
# Usage on the GPU machine (after the wheel install line of ../shared/tools/device-wheels.sh):
#   bash benchmarks/gpu_suite.sh [tests] [indicators] [options] [gp] [experiment] [gp_eval]
#                                [ising] [timeseries] [subset] [islands]   (islands: on two GPUs)
#                                [gp_round_trip] [placement] [two_gpus]  (two_gpus: on two GPUs)
#                                [between_ticks] [fd_solvers]
# benchmarks/README.md names the claim each step measures; REPEAT=N interleaves N rounds of
# the between_ticks steps (pool them afterwards: between_ticks.py --pool FILE...).
set -u
export PYTHONUNBUFFERED=1
OUT=${OUT:-benchmarks/out}
mkdir -p "$OUT"
steps=("$@")
[ ${#steps[@]} -eq 0 ] && steps=(tests indicators options gp)
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
python3 -c "import numba, numpy; from numba import cuda; print('numba', numba.__version__, 'numpy', numpy.__version__, 'cuda', cuda.is_available())"
for s in "${steps[@]}"; do
  echo "=== $s $(date -u +%H:%M:%S)"
  case $s in
    tests) timeout 300 python3 -m pytest -m gpu -q -p no:cacheprovider -x 2>&1 | tail -25 ;;
    indicators) timeout 200 python3 benchmarks/indicators.py --json "$OUT/indicators.json" 2>&1 | tail -25 ;;
    options) timeout 300 python3 benchmarks/options.py --json "$OUT/options.json" 2>&1 | tail -40 ;;
    gp) timeout 300 python3 benchmarks/gp_evaluator.py --json "$OUT/gp_evaluator.json" 2>&1 | tail -25 ;;
    gp_eval) timeout 400 python3 benchmarks/gp_eval.py --json "$OUT/gp_eval.json" 2>&1 | grep -v repaired | tail -40 ;;
    ising) timeout 300 python3 benchmarks/ising.py --json "$OUT/ising.json" 2>&1 | tail -40 ;;
    timeseries) timeout 200 python3 benchmarks/timeseries.py --json "$OUT/timeseries.json" 2>&1 | tail -25 ;;
    subset) timeout 200 python3 benchmarks/subset.py --json "$OUT/subset.json" 2>&1 | tail -25 ;;
    islands) timeout 300 python3 benchmarks/gp_islands.py --json "$OUT/gp_islands_scaling.json" 2>&1 | grep -v "repaired\|distributed\." | tail -20 ;;
    gp_round_trip) timeout 300 python3 benchmarks/gp_round_trip.py --json "$OUT/gp_round_trip.json" 2>&1 | tail -12 ;;
    placement)  # the SPY replay with the default worker, scheduler-placed and pinned
      lscpu | grep -iE "^(CPU\(s\)|Thread|Core|Socket|Model name|NUMA)" ;
      timeout 560 python3 benchmarks/between_ticks.py --exact --only "cuda process, default worker" \
        --placement both --repeat "${REPEAT:-3}" --no-gp --no-capacity --json "$OUT/placement.json" 2>&1 | grep -v "^\.\.\. " | tail -30 ;;
    two_gpus)  # the 10 x 1,000 groups on one GPU worker and split over two (OPTION_WORKER_GPUS=2)
      nvidia-smi -L ;
      timeout 120 python3 -m pytest -q -p no:cacheprovider tests/engine/test_option_worker.py -k two_gpus 2>&1 | tail -3 ;
      timeout 420 python3 benchmarks/between_ticks.py --part ten --exact --no-gp --no-capacity --repeat "${REPEAT:-3}" \
        --only "10x1,000: no group;10x1,000: cuda process, default worker (2 in flight per group, no batching);10x1,000: cuda process, default worker, 2 GPUs" \
        --json "$OUT/ten_two_gpus.json" 2>&1 | grep "^|" ;;
    between_ticks)  # the whole table: option groups (SPY, 10 x 1,000, paced), capacity, GP bar close
      timeout 590 python3 benchmarks/between_ticks.py --repeat "${REPEAT:-1}" --json "$OUT/between_ticks.json" 2>&1 | grep -v "^\.\.\. \|^    " | tail -50 ;;
    fd_solvers) timeout 300 python3 benchmarks/fd_solvers.py --json "$OUT/fd_solvers.json" 2>&1 | tail -25 ;;
    experiment) timeout 560 python3 benchmarks/gp_experiment.py --json "$OUT/gp_experiment.json" 2>&1 | tail -40 ;;
  esac
done
echo "=== done $(date -u +%H:%M:%S)"
