#!/bin/bash
# v19 call4: the final build (f1d20cd: the robustness changes in main.cpp, io/, config/ touch every run) on the GPU:
# every [cuda] unit test, small and xl steps (graphs, bf16), and late bad input on cuda (init.weights of another shape)
# putting an earlier record back.
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
run() {  # name config args...
  local n=$1 c=$2; shift 2
  timeout 120 .dev/bin/trainer $c --set device=cuda --set precision=bf16 --set name=$n --set output.results=$R/$n.json "$@" > $R/$n.log 2>&1; log "$n rc $?"
}
run small1 configs/small.json --set bench.warmup_steps=5 --set bench.measure_steps=30 --set output.checkpoint=$R/ck_small
run xl1 configs/xl.json --set bench.warmup_steps=3 --set bench.measure_steps=10
echo '{"earlier": "record"}' > $R/prev.json
timeout 60 .dev/bin/trainer configs/small.json --set device=cuda --set precision=bf16 --set model.d_model=1024 --set init.weights=$R/ck_small/model.safetensors --set output.results=$R/prev.json > $R/late_bad.log 2>&1; log "late bad input rc $? ($(tail -1 $R/late_bad.log | cut -c1-120)); prev.json: $(cat $R/prev.json)"
rm -rf $R/ck_small
timeout 200 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit [cuda] rc $? $(tail -2 $R/unit_cuda.log | head -1)"
grep -h "done:" $R/*.log
cat $R/progress.log
