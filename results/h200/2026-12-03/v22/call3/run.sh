#!/bin/bash
# v22 call3: train steps (graphs, bf16) of the previous binary (trainer_old, b1e7a52) and the one with the persistent
# forward (trainer_new) alternating: small ctx 4096 / 512, xl ctx 512 / 2048.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/trainers.tar.xz
cp .dev/call3.sh $R/run.sh
log unpacked
run() {  # name binary config args...
  local n=$1 b=$2 c=$3; shift 3
  timeout 120 .dev/bin/$b $c --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json "$@" > $R/$n.log 2>&1; log "$n rc $?"
}
for k in 1 2; do
  run small4k_old$k trainer_old configs/small.json --set model.context_length=4096 --set bench.warmup_steps=3 --set bench.measure_steps=10
  run small4k_new$k trainer_new configs/small.json --set model.context_length=4096 --set bench.warmup_steps=3 --set bench.measure_steps=10
  run small_old$k trainer_old configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
  run small_new$k trainer_new configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
done
for k in 1 2; do
  run xl_old$k trainer_old configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
  run xl_new$k trainer_new configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
done
run xl2k_old trainer_old configs/xl.json --set model.context_length=2048 --set bench.warmup_steps=2 --set bench.measure_steps=6
run xl2k_new trainer_new configs/xl.json --set model.context_length=2048 --set bench.warmup_steps=2 --set bench.measure_steps=6
tar czf $OUT/r.tgz -C $OUT r
grep -H "done:" $R/*.log
cat $R/progress.log
