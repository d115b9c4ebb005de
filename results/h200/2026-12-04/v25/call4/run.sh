#!/bin/bash
# v25 call4: ncu of the backward's launches in the first-store library: production (first store) against the
# variant of the same configuration (7 / 10 / 20: dq_accum zeroed by the preprocess), in turn (ncu's locked clocks), at 16 x 128 T 16384 and xl's / small's shapes; the [flash] unit tests of the first-store build;
# an xl step (peak against --plan); then every [cuda] test with the time left.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R .dev/bin
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
tar xJf .dev/flash_fs.tar.xz
xz -dc .dev/trainer.xz > .dev/bin/trainer; xz -dc .dev/unit_tests.xz > .dev/bin/unit_tests; chmod +x .dev/bin/*
cp .dev/call4.sh $R/run.sh; cp .dev/bwd_calls.py $R/
log unpacked
M="--metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum"
for rep in 1 2; do
  for sv in "1 16384 16 128:10" "4 512 32 80:20" "4 2048 32 80:20" "4 512 12 64:7"; do
    sh=${sv%:*}; v=${sv#*:}
    for var in 0 $v; do
      n="ncu_v${var}_$(echo $sh | tr ' ' x)_$rep"
      timeout 60 ncu --kernel-name regex:"flash_bwd" --launch-skip 3 --launch-count 6 $M python3 .dev/bwd_calls.py $PWD/flash_fs/libflashbench.so $sh 3 $var > $R/$n.txt 2>&1; log "$n rc $?"
    done
  done
done
tar czf $OUT/r.tgz -C $OUT r
timeout 150 .dev/bin/unit_tests "[flash]" > $R/flash_tests.log 2>&1; log "flash tests rc $?"
timeout 120 .dev/bin/trainer configs/xl.json --set device=cuda --set precision=bf16 --set name=xl1 --set output.results=$R/xl1.json --set bench.warmup_steps=3 --set bench.measure_steps=10 > $R/xl1.log 2>&1; log "xl1 rc $?"
timeout 30 .dev/bin/trainer configs/xl.json --set device=cuda --set precision=bf16 --plan > $R/xl_plan.txt 2>&1; log "xl plan rc $?"
tar czf $OUT/r.tgz -C $OUT r
left=$(( 540 - ($(date +%s) - t0) ))
if [ $left -gt 60 ]; then timeout $left .dev/bin/unit_tests "[cuda]" > $R/cuda_tests.log 2>&1; log "cuda tests rc $? (limit $left s)"; fi
tar czf $OUT/r.tgz -C $OUT r
python3 - <<'PY'
import os, glob, re, json
R = os.environ["OUT"] + "/r"
for f in sorted(glob.glob(R + "/ncu_*.txt")):
    ks = {}
    cur = None
    for line in open(f):
        if "flash_bwd" in line:
            cur = next((k for k in ("preprocess", "convert", "sm90_kernel", "dkdv", "dq_kernel") if k in line), "?")
        m = re.search(r"gpu__time_duration.sum\s+(\S+)\s+([\d.,]+)", line)
        if m and cur:
            v = float(m.group(2).replace(",", "")) * (1e-3 if m.group(1) == "ns" else 1e3 if m.group(1) == "ms" else 1)
            ks.setdefault(cur, []).append(v)
    print(os.path.basename(f)[:-4], {k: [round(x, 1) for x in v] for k, v in ks.items()})
try:
    d = json.load(open(R + "/xl1.json")); print("xl1 step", d["timing"]["step"]["median_ms"], "peak GiB", d["memory"]["peak_bytes"] / 2**30)
except Exception as e: print("xl1 ?", e)
PY
grep -iE "peak|total" $R/xl_plan.txt | head -5
tail -2 $R/flash_tests.log; tail -2 $R/cuda_tests.log 2>/dev/null
cat $R/progress.log
