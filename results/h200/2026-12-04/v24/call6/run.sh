#!/bin/bash
# v24 call6 (experiment build: TRAINER_PREPROCESS_G overrides the lanes a row, not committed): the backward preprocess
# at xl's shapes (d 80: 10 octets a row) with G = 2, 4, 8, 16 lanes a row against the old kernel, alternating; d 128 and
# small (d 64) at G 8 / 16 and 4 / 8.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R .dev/bin
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
xz -dc .dev/trainer_g.xz > .dev/bin/trainer; xz -dc .dev/trainer_old.xz > .dev/bin/trainer_old; chmod +x .dev/bin/*
cp .dev/call6.sh $R/run.sh
log unpacked
M="--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum"
prof() { local bin=$1 n=$2 g=$3; shift 3; TRAINER_PREPROCESS_G=$g timeout 100 ncu --clock-control none --kernel-name regex:"flash_bwd_pre" --launch-skip 1 --launch-count 2 $M \
  .dev/bin/$bin "$@" --set device=cuda --set precision=bf16 --set cuda_graph=false --set bench.warmup_steps=1 --set bench.measure_steps=2 --set name=$n --set output.results=$R/$n.json > $R/$n.txt 2>&1; log "$n rc $?"; }
D128="configs/small.json --set model.d_model=2048 --set model.num_heads=16 --set model.num_layers=1 --set model.context_length=16384 --set data.batch_size=1"
XL="configs/xl.json --set model.num_layers=1"
SM="configs/small.json --set model.num_layers=1"
for k in 1 2; do
  prof trainer_old xl_old_$k "" $XL
  for g in 2 4 8 16; do prof trainer xl_g${g}_$k $g $XL; done
done
for g in 8 16; do prof trainer d128_g${g} $g $D128; done
for g in 4 8; do prof trainer small_g${g} $g $SM; done
tar czf $OUT/r.tgz -C $OUT r
python3 - <<'PY'
import os, glob, re
R = os.environ["OUT"] + "/r"
for f in sorted(glob.glob(R + "/*.txt")):
    t = open(f).read()
    us = [float(x) * (1000 if u == "ms" else 1) for u, x in re.findall(r"gpu__time_duration.sum\s+(us|ms)\s+([\d.]+)", t)]
    g = re.findall(r"preprocess_kernel<[^,]+, [^,]+, (\d+),", t)
    print("%-16s G %-6s %s us" % (os.path.basename(f)[:-4], ",".join(sorted(set(g))) or "old", " / ".join("%.2f" % u for u in us)))
PY
cat $R/progress.log
