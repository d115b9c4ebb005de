#!/bin/bash
# v20 call5: the previous binary (5a7e8d6) and the new one (d 64 backward on 128-query tiles) alternating: small at
# context 512 (no change expected: the same kernel time at T 512) and 4096 (attention's share grows), medium at 512.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .dev/bin
unxz .dev/trainer.xz .dev/bin/trainer
unxz .dev/trainer_old.xz .dev/bin/trainer_old
cp .dev/call5.sh $R/run.sh
run() {  # name binary config args...
  local n=$1 b=$2 c=$3; shift 3
  timeout 120 .dev/bin/$b $c --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json "$@" > $R/$n.log 2>&1; log "$n rc $? $(grep -h 'done:' $R/$n.log | cut -c1-160)"
}
for k in 1 2; do
  run small_old$k trainer_old configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
  run small_new$k trainer configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
  run small4k_old$k trainer_old configs/small.json --set model.context_length=4096 --set bench.warmup_steps=3 --set bench.measure_steps=10
  run small4k_new$k trainer configs/small.json --set model.context_length=4096 --set bench.warmup_steps=3 --set bench.measure_steps=10
done
run medium_old trainer_old configs/medium.json --set bench.warmup_steps=3 --set bench.measure_steps=15
run medium_new trainer configs/medium.json --set bench.warmup_steps=3 --set bench.measure_steps=15
tar czf $OUT/r.tgz -C $OUT r
cat $R/progress.log
