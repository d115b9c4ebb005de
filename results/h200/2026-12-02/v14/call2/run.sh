#!/bin/bash
# v14 call2: interleaved-round timing of the forward variants; ncu of the d 128 forward (old production vs new)
export NCCL_NVLS_ENABLE=0
mkdir -p $OUT/r
tar xzf .dev/flash.tgz
cd launch/flash_bench
L=../../.carry/flash/libflashbench.so; P=../../.carry/flash_old/libflashbench.so
timeout 200 python3 sm90_check.py --lib $L --prod $P --fwd 10,12,13,0,3,4,20,23 --bwd "" --no-time --out $OUT/r > $OUT/r/sm90_check.log 2>&1
echo "rc=$?" >> $OUT/r/sm90_check.log
timeout 150 python3 sm90_check.py --lib $L --prod $P --fwd 10,12,13,0,3,4,20,23 --bwd "" --rounds 7 --xl --out $OUT/r > $OUT/r/rounds.log 2>&1
echo "rc=$?" >> $OUT/r/rounds.log
M=sm__pipe_tensor_op_gmma_cycles_active.avg.pct_of_peak_sustained_active,sm__inst_executed_pipe_xu.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_alu_cycles_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active,gpc__cycles_elapsed.max,sm__cycles_active.avg
for lib in old new; do
  if [ $lib = old ]; then LL=$P; V=10; else LL=$L; V=10,12,13; fi
  timeout 120 ncu --clock-control none -k regex:flash_fwd_sm90 --section SpeedOfLight --section WarpStateStats --section SchedulerStats --metrics $M \
    python3 sm90_check.py --lib $LL --prod /nonexistent --fwd $V --bwd "" --profile --profile-d 128 > $OUT/r/ncu_$lib.log 2>&1
  echo "rc=$?" >> $OUT/r/ncu_$lib.log
done
cd $OUT && tar czf r.tgz r
tail -5 r/sm90_check.log | head -12; grep "bit for bit" r/sm90_check.log; cat r/rounds.log | tail -40
grep -E "flash_fwd|gmma|pipe_xu|pipe_fma|issue_active|Duration|Stall|Warp Cycles Per Issued" r/ncu_*.log | cut -c1-160 | head -60
