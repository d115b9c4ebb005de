#!/bin/bash
# v19 call2: the PyTorch peer's third mode, torch.compile max-autotune-no-cudagraphs, for small (never measured before:
# it had not compiled within one call), beside reduce-overhead and the trainer (HEAD 05efc4a) in the same call;
# inductor / triton caches written under $OUT and returned as a tarball, so that a cut-off compile can continue
# in a later call. First the [cuda][flash] tests three times (the logsumexp check mended after call1).
set -u
export NCCL_NVLS_ENABLE=0
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .dev/bin
unxz .dev/trainer.xz .dev/bin/trainer
unxz .dev/unit_tests.xz .dev/bin/unit_tests
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv > $R/gpu.txt
log unpacked
for i in 1 2 3; do
  timeout 60 .dev/bin/unit_tests "[cuda][flash]" > $R/unit_flash$i.log 2>&1; log "unit [cuda][flash] $i rc $? $(tail -2 $R/unit_flash$i.log | head -1)"
done
run() {  # name config args...
  local n=$1 c=$2; shift 2
  timeout 120 .dev/bin/trainer $c --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json "$@" > $R/$n.log 2>&1; log "$n rc $?"
}
for i in 1 2; do run small$i configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30; done
timeout 150 python3 launch/torch_bench.py --mode compiled --preset small --compile-mode reduce-overhead --warmup 5 --steps 30 --json $R/torch_small_ro.json > $R/torch_small_ro.log 2>&1; log "torch_small_ro rc $?"
tar czf $OUT/r.tgz -C $OUT r
export TORCHINDUCTOR_CACHE_DIR=$OUT/cache/inductor TRITON_CACHE_DIR=$OUT/cache/triton
mkdir -p $OUT/cache
if [ -f .dev/cache_small.tgz ]; then tar xzf .dev/cache_small.tgz -C $OUT; log "cache restored"; fi
timeout 330 python3 launch/torch_bench.py --mode compiled --preset small --compile-mode max-autotune-no-cudagraphs --warmup 5 --steps 30 --json $R/torch_small_mat.json > $R/torch_small_mat.log 2>&1; log "torch_small_mat rc $?"
tar czf $OUT/cache_small.tgz -C $OUT cache && rm -rf $OUT/cache; log "cache $(du -h $OUT/cache_small.tgz | cut -f1)"
run small3 configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30
tar czf $OUT/r.tgz -C $OUT r
python3 - <<'PY'
import os, glob, json
R = os.environ["OUT"] + "/r"
for f in sorted(glob.glob(R + "/*.json")):
    n = os.path.basename(f)[:-5]
    try:
        d = json.load(open(f))
        if "timing" in d:
            print("%-16s step %8.3f ms peak %.3f GiB" % (n, d["timing"]["step"]["mean_ms"], d["memory"]["peak_bytes"] / 2**30))
        else:
            print("%-16s %s" % (n, json.dumps({k: d.get(k) for k in ("status", "mean_ms", "peak_bytes", "error")})[:300]))
    except Exception as e: print(n, "?", e)
PY
cat $R/progress.log
