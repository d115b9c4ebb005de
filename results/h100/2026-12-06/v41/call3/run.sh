#!/bin/bash
# v41 call3: the resume's read with its CRC-32 in the same pass (5775e6a) against the trainer without checksums
# (5347f44, .dev/trainer_nocrc.xz; call2: 28.7-30.3 s at xl, 36.9-40.2 with the separate checksum pass of adb97a3).
# One xl bf16 step writes a checkpoint in /tmp (the trainer of 5775e6a: its manifest lists the CRC-32s; the old trainer
# ignores them), then each trainer resumes from it in turn, twice. Carry .dev: trainer.xz, trainer_nocrc.xz.
source launch/device_call.sh "$0"
unpack_bins trainer trainer_nocrc
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.log 2>&1
X="--set device=cuda --set precision=bf16 --set bench.warmup_steps=0"
rm -rf /tmp/ck
step w 200 .dev/bin/trainer configs/xl.json $X --set bench.measure_steps=1 --set output.checkpoint=/tmp/ck \
  --set output.results=$R/w.json
for round in 1 2; do
  for b in trainer_nocrc trainer; do
    step r_${b}_$round 120 .dev/bin/$b configs/xl.json $X --set bench.measure_steps=2 --set init.resume=/tmp/ck \
      --set output.results=$R/r_${b}_$round.json
  done
done
rm -rf /tmp/ck
{
cat $R/gpu.log
for f in $R/w.json $R/r_*.json; do
  python3 -c "
import json, sys
r = json.load(open(sys.argv[1])); t = r.get('timing', {}); c = r.get('checkpoint') or {}
print(sys.argv[1].split('/')[-1], r.get('status'), 'write_s', t.get('checkpoint_write_s'), 'read_s', t.get('resume_read_s'),
      'checksums', (c.get('resumed_from') or {}).get('checksums'))" $f
done
} > $R/summary.log 2>&1
finish
