#!/bin/bash
# v18 call3: the final RMSNorm backward (one row at a time, the partial dw row in float4 stores, the dw sum's loads
# unrolled 4; block_sum = block_sum_k<1> in common.cuh): every [cuda] unit test, racecheck / memcheck of the RMSNorm
# tests; small and xl (bs 4, ctx 512, bf16) steps alternating with the previous build ef295e5 ("old"); the PyTorch
# peer beside them (torch.compile reduce-overhead for small, default for xl; ctx 2048 last).
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .dev/bin
unxz .dev/trainer.xz .dev/bin/trainer
unxz .dev/trainer_old.xz .dev/bin/trainer_old
unxz .dev/unit_tests.xz .dev/bin/unit_tests
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
log unpacked
timeout 150 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit [cuda] rc $? $(tail -2 $R/unit_cuda.log | head -1)"
timeout 60 compute-sanitizer --tool racecheck .dev/bin/unit_tests "[cuda][rmsnorm]" > $R/racecheck_rmsnorm.log 2>&1; log "racecheck rmsnorm rc $? $(tail -1 $R/racecheck_rmsnorm.log)"
timeout 90 compute-sanitizer --tool memcheck .dev/bin/unit_tests "[cuda][rmsnorm]" > $R/memcheck_rmsnorm.log 2>&1; log "memcheck rmsnorm rc $? $(tail -1 $R/memcheck_rmsnorm.log)"
tar czf $OUT/r.tgz -C $OUT r
run() {  # name binary config args...
  local n=$1 b=$2 c=$3; shift 3
  timeout 120 .dev/bin/$b $c --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json "$@" > $R/$n.log 2>&1; log "$n rc $?"
}
peer() {  # name args...
  local n=$1; shift
  timeout 200 python3 launch/torch_bench.py --mode compiled "$@" --json $R/$n.json > $R/$n.log 2>&1; log "$n rc $?"
}
for i in 1 2 3; do
  run small_old$i trainer_old configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
  run small_new$i trainer configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
done
peer torch_small_ro --preset small --compile-mode reduce-overhead --warmup 5 --steps 30
tar czf $OUT/r.tgz -C $OUT r
for i in 1 2; do
  run xl_old$i trainer_old configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
  run xl_new$i trainer configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
done
tar czf $OUT/r.tgz -C $OUT r
peer torch_xl_default --preset xl --compile-mode default --warmup 3 --steps 10
tar czf $OUT/r.tgz -C $OUT r
run xl2048_new trainer configs/xl.json --set bench.warmup_steps=2 --set bench.measure_steps=5 --set model.context_length=2048
peer torch_xl2048_default --preset xl --ctx 2048 --compile-mode default --warmup 2 --steps 5
tar czf $OUT/r.tgz -C $OUT r
python3 - <<'PY'
import os, glob, json
R = os.environ["OUT"] + "/r"
for f in sorted(glob.glob(R + "/*.json")):
    n = os.path.basename(f)[:-5]
    try:
        d = json.load(open(f))
        if "timing" in d:
            t = d["timing"]["step"]; m = d["memory"]; pred = m.get("predicted", {}).get("peak_bytes")
            print("%-22s step %8.3f ms peak %.3f GiB %s final loss %s" % (n, t["mean_ms"], m["peak_bytes"] / 2**30,
                  "pred %.3f" % (pred / 2**30) if pred else "", d.get("loss", {}).get("final")))
        else:
            print("%-22s %s" % (n, json.dumps({k: d.get(k) for k in ("status", "mean_ms", "step_ms", "peak_bytes")})[:200]))
    except Exception as e: print(n, "?", e)
PY
cat $R/progress.log
