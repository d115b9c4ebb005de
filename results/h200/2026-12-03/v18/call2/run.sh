#!/bin/bash
# v18 call2: RMSNorm backward variants (TRAINER_RMSNORM_BWD; kernels/rmsnorm.cu): 0 = production (2 rows a batch,
# dx loaded before the block sum, 88 registers, partial row in 4-byte stores), 1 = + float4 partial stores,
# 2 = + dy / x read again and dx read after the block sum (71 registers), 5 = 2 with launch bounds (384, 3): 56
# registers, 6 = 2 with (320, 4): 48 + 40 B spill, 3 = one row a batch + float4 (63), 7 = 3 with (384, 3): 56.
# Each variant: the [cuda][rmsnorm] tests, ncu of the backward and dw-sum kernels at xl (4 layers, same shapes) and
# small shapes. The dw sum's variants (TRAINER_RMSNORM_SUM: 0 production, 1 loads unrolled 4, 2 + 16 columns a block,
# 3 + 8 columns; the same sum order in each) ride along: bwd 0/6 with sum 0, 1/3 with 1, 2/7 with 2, 5 with 3.
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .dev/bin
unxz .dev/trainer.xz .dev/bin/trainer
unxz .dev/unit_tests.xz .dev/bin/unit_tests
log unpacked
declare -A SUM=([0]=0 [1]=1 [2]=2 [5]=3 [6]=0 [3]=1 [7]=2)
for v in 0 1 2 5 6 3 7; do
  export TRAINER_RMSNORM_SUM=${SUM[$v]}
  TRAINER_RMSNORM_BWD=$v timeout 60 .dev/bin/unit_tests "[rmsnorm]" > $R/unit_v$v.log 2>&1; log "v$v unit rc $? $(tail -2 $R/unit_v$v.log | head -1)"
  for m in small xl; do
    TRAINER_RMSNORM_BWD=$v timeout 90 ncu --clock-control none --cache-control none --kernel-name regex:rmsnorm_bwd_vec\|rmsnorm_dw_sum --launch-skip 4 --launch-count 8 \
      --metrics gpu__time_duration.sum,launch__registers_per_thread,sm__warps_active.avg.pct_of_peak_sustained_active --csv --print-units base \
      .dev/bin/trainer configs/$m.json --set model.num_layers=4 --set device=cuda --set precision=bf16 --set cuda_graph=false \
      --set bench.warmup_steps=1 --set bench.measure_steps=1 --set output.results=$R/ncu_${m}_v$v.json > $R/ncu_${m}_v$v.csv 2> $R/ncu_${m}_v$v.err
    log "v$v ncu $m rc $?"
  done
  tar czf $OUT/r.tgz -C $OUT r
done
python3 - <<'PY'
import os, csv, glob, statistics
R = os.environ["OUT"] + "/r"
SUM = {0: 0, 1: 1, 2: 2, 5: 3, 6: 0, 3: 1, 7: 2}
for m in ["small", "xl"]:
    for v in [0, 1, 2, 5, 6, 3, 7]:
        f = f"{R}/ncu_{m}_v{v}.csv"
        try:
            rows = [r for r in csv.reader(open(f)) if len(r) > 14 and r[0] != "ID"]
        except Exception as e:
            print(m, v, "?", e); continue
        t = {"bwd": [], "sum": []}; regs = set(); occ = []
        for r in rows:
            k = "bwd" if "bwd_vec" in r[4] else "sum"
            if r[12] == "gpu__time_duration.sum": t[k].append(float(r[14].replace(",", "")) / 1e3)
            if r[12] == "launch__registers_per_thread" and k == "bwd": regs.add(r[14])
            if r[12] == "sm__warps_active.avg.pct_of_peak_sustained_active" and k == "bwd": occ.append(float(r[14].replace(",", "")))
        md = lambda x: statistics.median(x) if x else float("nan")
        print(f"{m:5s} v{v} (sum {SUM[v]}): bwd {md(t['bwd']):6.2f} us  dw_sum {md(t['sum']):5.2f} us  regs {','.join(sorted(regs))}  occupancy {md(occ):.1f}%  (n {len(t['bwd'])})")
PY
cat $R/progress.log
