R=/work/wt-live/benchmarks/results/devbox-2026-11-28f-live-latency
for r in 1 2 3; do
  for v in base branch branch-rt10; do
    case $v in base) tree=/tmp/live-base; rt="";; branch) tree=/work/wt-live; rt="";; branch-rt10) tree=/work/wt-live; rt=10;; esac
    plot=""; [ $r = 1 ] && plot="--plot $R/live_latency_$v.png"
    s=$(date -u +%T); l=$(cut -d' ' -f1-3 /proc/loadavg)
    res=$(cd $tree && ENGINE_RT_PRIORITY=$rt PYTHONPATH=$tree python benchmarks/live_latency.py --only latency --rounds 1 --json $R/live_latency_${v}_$r.json $plot 2>&1 | grep 'round 1')
    echo "$s load[$l] $v r$r $res"
  done
done
