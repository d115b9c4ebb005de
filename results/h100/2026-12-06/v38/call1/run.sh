#!/bin/bash
# v38: which check makes racecheck fail ("failed to handle a hardware exception" at the first launch of the bench's
# quick checks with --kernel-name kns=dw_adamw, v36 call 2 and v37 call 4), while the timing mode at K 128 passes
# with 0 hazards (v37 call 5). The first check launch is the gradient-only kernel on 128 x 128 x 64: one CTA, one
# k-block. Racecheck each quick check shape alone (check.py --check-shapes I), then the timing mode at K 64 (one
# k-block on the small block's shapes). Carry .dev: dwa.tar.xz.
source launch/device_call.sh "$0"
unpack_tar .dev/dwa.tar.xz
nvidia-smi --query-gpu=name,clocks.max.sm,power.limit --format=csv,noheader > $R/gpu.log 2>&1
compute-sanitizer --version > $R/cs_version.log 2>&1
C="python3 launch/dw_adamw_bench/check.py --lib dwa/libdwa.so"
RC="compute-sanitizer --tool racecheck --kernel-name kns=dw_adamw --print-limit 20"
for i in 0 1 2 3 4 5 6; do
  step race_shape$i 60 $RC $C --check-shapes $i --no-time --out $R/s$i
done
step race_time_k64 60 $RC $C --no-check --variants fused,fused_grad_in,gemm_ours --rounds 1 --shapes small --k 64 \
  --out $R/tk64
step race_time_k128 60 $RC $C --no-check --variants fused,fused_grad_in,gemm_ours --rounds 1 --shapes small \
  --k 128 --out $R/tk128
step plain_shape0 60 $C --check-shapes 0 --no-time --out $R/p0
{
cat $R/gpu.log; tail -1 $R/cs_version.log
for n in race_shape0 race_shape1 race_shape2 race_shape3 race_shape4 race_shape5 race_shape6 race_time_k64 \
         race_time_k128 plain_shape0; do
  echo "$n:"; grep -E "RACECHECK SUMMARY|Internal Sanitizer|^check M|failures" $R/$n.log | sort | uniq -c | head -6
done
} > $R/summary.log 2>&1
finish
