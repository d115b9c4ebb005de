#!/bin/bash
# v24 call5: the backward preprocess, old (HEAD fb4e5e0: a thread a row) against new (a group of lanes a row), by
# ncu in one call, alternating, at 16 x 128 T 16384, xl's and small's shapes; memcheck of the ragged every-head-dim
# flash case with the new kernel.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R .dev/bin
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
xz -dc .dev/trainer.xz > .dev/bin/trainer; xz -dc .dev/trainer_old.xz > .dev/bin/trainer_old; xz -dc .dev/unit_tests.xz > .dev/bin/unit_tests; chmod +x .dev/bin/*
cp .dev/call5.sh $R/run.sh
log unpacked
M="--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum"
prof() { local bin=$1 n=$2; shift 2; timeout 100 ncu --clock-control none --kernel-name regex:"flash_bwd_pre" --launch-skip 1 --launch-count 2 $M \
  .dev/bin/$bin "$@" --set device=cuda --set precision=bf16 --set cuda_graph=false --set bench.warmup_steps=1 --set bench.measure_steps=2 --set name=$n --set output.results=$R/$n.json > $R/$n.txt 2>&1; log "$n rc $?"; }
D128="configs/small.json --set model.d_model=2048 --set model.num_heads=16 --set model.num_layers=1 --set model.context_length=16384 --set data.batch_size=1"
for k in 1 2; do
  for b in trainer_old trainer; do
    prof $b ${b}_d128_$k $D128
    prof $b ${b}_xl_$k configs/xl.json --set model.num_layers=1
    prof $b ${b}_small_$k configs/small.json --set model.num_layers=1
  done
done
tar czf $OUT/r.tgz -C $OUT r
timeout 200 compute-sanitizer --tool memcheck .dev/bin/unit_tests "flash2 matches naive attention: small and ragged*" > $R/memcheck.log 2>&1; log "memcheck rc $?"
tar czf $OUT/r.tgz -C $OUT r
python3 - <<'PY'
import os, glob, re
R = os.environ["OUT"] + "/r"
for f in sorted(glob.glob(R + "/trainer*_*.txt")):
    t = open(f).read()
    us = [float(x) * (1000 if u == "ms" else 1) for u, x in re.findall(r"gpu__time_duration.sum\s+(us|ms)\s+([\d.]+)", t)]
    rd = re.findall(r"dram__bytes_read.sum\s+(\S+)\s+([\d.]+)", t)
    print("%-28s %s us   read %s" % (os.path.basename(f)[:-4], " / ".join("%.2f" % u for u in us), " / ".join(a + " " + b for b, a in rd)))
PY
grep -E "ERROR SUMMARY|All tests|test cases" $R/memcheck.log
cat $R/progress.log
