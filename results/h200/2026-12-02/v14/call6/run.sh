#!/bin/bash
# v14 call6: the trainer with the new Hopper forward (HEAD) vs the previous build (6611832), side by side, alternating:
# large (d 64, T 512), xl ctx 512 and 2048 (d 80), the 8B proxy (4 blocks of leaderboard_8b, d 128, ctx 32768)
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .dev/bin; unxz .dev/trainer_old.xz .dev/bin/trainer_old; unxz .dev/trainer_new.xz .dev/bin/trainer_new
C="--set device=cuda --set precision=bf16 --set bench.warmup_steps=5"
B8="--set model.preset=leaderboard_8b --set model.num_layers=4 --set model.context_length=32768 --set data.batch_size=1 --set bench.warmup_steps=1 --set bench.measure_steps=3"
run() { local to=$1 v=$2 name=$3; shift 3; timeout $to .dev/bin/trainer_$v "$@" --set name=${name}_$v --set output.results=$R/${name}_$v.json > $R/${name}_$v.log 2>&1; log "$name $v rc $?"; }
for rep in 1 2; do
  for v in old new; do
    run 40 $v large_$rep configs/small.json $C --set model.preset=large --set bench.measure_steps=30
    run 50 $v xl_c512_$rep configs/xl.json $C --set bench.measure_steps=30
    run 70 $v xl_c2048_$rep configs/xl.json $C --set model.context_length=2048 --set bench.measure_steps=15
  done
done
for v in old new; do run 90 $v b8 configs/xl.json --set device=cuda --set precision=bf16 $B8; done
tar czf $OUT/r.tgz -C $OUT r
python3 - <<'PY'
import json, glob, os
for f in sorted(glob.glob(os.environ["OUT"] + "/r/*.json")):
    try:
        d = json.load(open(f)); t = d["timing"]["step"]
        print("%-18s step mean %9.2f median %9.2f ms  peak %.2f GiB  loss %s" % (os.path.basename(f)[:-5], t["mean_ms"], t["median_ms"], d["memory"]["peak_bytes"] / 2**30, d.get("loss", {}).get("final") if isinstance(d.get("loss"), dict) else d.get("loss")))
    except Exception as e:
        print(f, e)
PY
