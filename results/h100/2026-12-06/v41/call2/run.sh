#!/bin/bash
# v41 call2: what the checkpoint files' CRC-32 costs at xl (about 3.4 B parameters: fp32 weights 13.6 GB, AdamW m
# and v 27 GB). The trainer of 5347f44 (no checksums; .dev/trainer_nocrc.xz) and of adb97a3 (checksums), in turn:
# one xl bf16 step with output.checkpoint (the write: device to host, CRC-32 on rank 0, write, fsync), then
# init.resume for one more step (the read: weights and the optimizer shard, each checked). The checkpoint lives in
# /tmp (not under $OUT) and is removed after each pair. Carry .dev: trainer.xz, trainer_nocrc.xz. On an H200 it
# stops at once (exit 3), for issue 19's H200 call to run next.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo "H200: not run here (the next call runs issue 19's H200 call, v40/prepared/call_h200.sh)"
  exit 3
fi
source launch/device_call.sh "$0"
unpack_bins trainer trainer_nocrc
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.log 2>&1
{ nproc; df -h /tmp .; free -g; } > $R/host.log 2>&1
X="--set device=cuda --set precision=bf16 --set bench.warmup_steps=0"
for round in 1 2; do
  for b in trainer_nocrc trainer; do
    rm -rf /tmp/ck
    step w_${b}_$round 200 .dev/bin/$b configs/xl.json $X --set bench.measure_steps=1 --set output.checkpoint=/tmp/ck \
      --set output.results=$R/w_${b}_$round.json
    step r_${b}_$round 200 .dev/bin/$b configs/xl.json $X --set bench.measure_steps=2 --set init.resume=/tmp/ck \
      --set output.results=$R/r_${b}_$round.json
    du -sh /tmp/ck >> $R/host.log 2>&1
    [ $(left 560) -gt 150 ] || break 2
  done
done
rm -rf /tmp/ck
{
cat $R/gpu.log
for f in $R/w_*.json $R/r_*.json; do
  python3 -c "
import json, sys
r = json.load(open(sys.argv[1])); t = r.get('timing', {}); c = r.get('checkpoint') or {}
print(sys.argv[1].split('/')[-1], r.get('status'), 'write_s', t.get('checkpoint_write_s'), 'read_s', t.get('resume_read_s'),
      'checksums', (c.get('resumed_from') or {}).get('checksums'))" $f
done
} > $R/summary.log 2>&1
finish
