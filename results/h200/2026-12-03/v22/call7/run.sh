#!/bin/bash
# v22 call7: the final build (HEAD with the planner's attention factor and the end-of-run agreement's mends) on the
# GPU: the default job, small bf16 (graphs), and two ranks on the one GPU (comm mpi) with fsdp and ddp (the
# agreement's ok path; the persistent forward of two processes).
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/tr.tar.xz
cp .dev/call7.sh $R/run.sh
T=.dev/bin/trainer
log unpacked
timeout 120 $T --set output.results=$R/default.json > $R/default.log 2>&1; log "default rc $?"
timeout 120 $T configs/small.json --set device=cuda --set precision=bf16 --set name=small --set output.results=$R/small.json > $R/small.log 2>&1; log "small rc $?"
for s in fsdp ddp; do
  timeout 180 mpirun --allow-run-as-root -np 2 $T configs/small.json --set device=cuda --set precision=bf16 --set parallel.strategy=$s --set parallel.comm=mpi --set bench.warmup_steps=2 --set bench.measure_steps=5 --set name=small_$s --set output.results=$R/small_$s.json > $R/small_$s.log 2>&1; log "small_$s rc $?"
done
tar czf $OUT/r.tgz -C $OUT r
grep -H -E "done:|error" $R/*.log | sed -e 's/\[[0-9:.]*\] //' | head -20
python3 -c "import json,glob; [print(f.split('/')[-1], json.load(open(f)).get('status')) for f in sorted(glob.glob('$R/*.json'))]"
cat $R/progress.log
# then, in a second command (the ddp strategy's name above was wrong: bad input, exit 2):
# timeout 120 mpirun --allow-run-as-root -np 2 .dev/bin/trainer configs/small.json --set device=cuda --set precision=bf16 --set parallel.strategy=ddp_overlap --set parallel.comm=mpi --set bench.warmup_steps=2 --set bench.measure_steps=5 --set name=small_ddp_overlap --set output.results=$OUT/r/small_ddp_overlap.json
