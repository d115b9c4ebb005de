#!/bin/bash
# v39, production with O's rescale skipped at d 64 / 128 (ffe586c): the bench's default checks (production variants
# 9 / 18 / 24 / 34 in float64 and bit for bit against 6 / 16, which keep every rescale; the production backward),
# synccheck / racecheck / memcheck of the smoke run (its persistent forwards now take the skip), issue 19's attention
# rows (--short) beside SDPA, and a small bf16 step. Carry .dev: trainer.xz, flash.tar.xz.
source launch/device_call.sh "$0"
unpack_bins trainer
unpack_tar .dev/flash.tar.xz
C=flash/libflashbench.so
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
step check 200 python3 launch/flash_bench/sm90_check.py --lib $C --prod $C --fwd 9,6,18,16,24,34 --no-time \
  --out $R/check
for t in synccheck racecheck memcheck; do step $t 150 compute-sanitizer --tool $t flash/smoke; done
step attention 60 python3 launch/flash_bench/bench.py --lib $C --short --no-check --out $R/short
train_step small configs/small.json
{
cat $R/gpu.log
grep -E "checks|fail|FAIL|bit for bit" $R/check.log | head -12
for t in synccheck racecheck memcheck; do echo "$t: $(tail -1 $R/$t.log)"; done
echo "attention --short:"; tail -8 $R/attention.log
record_lines small
} > $R/summary.log 2>&1
finish
