#!/bin/bash
# v42 call1. On an H200: issue 19's prepared H200 call (results/h200/2026-12-06/v40/prepared/call_h200.sh, ~7.5 min).
# On any other card: the final checkpoint checksums (c0d37e2: a file's pieces checked at once over the threads, 64 MiB
# block CRCs; neither timed on a GPU machine, v41) at xl. One xl bf16 step writes a checkpoint in /tmp; a second step
# directory holds links to its files and its manifest without "files" (a checkpoint written before checksums: the
# same trainer resumes it unchecked, the baseline); the trainer resumes from each in turn, twice. v41 call3 on an
# H100: 29.97-30.85 s without checksums, 35.89-37.02 with them (one pass, pieces checked one at a time).
# Carry .dev: trainer.xz, flash.tar.xz.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  exec bash results/h200/2026-12-06/v40/prepared/call_h200.sh
fi
source launch/device_call.sh "$0"
unpack_bins trainer
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.log 2>&1
nproc >> $R/gpu.log
X="--set device=cuda --set precision=bf16 --set bench.warmup_steps=0"
rm -rf /tmp/ck /tmp/ck2
step w 200 .dev/bin/trainer configs/xl.json $X --set bench.measure_steps=1 --set output.checkpoint=/tmp/ck \
  --set output.results=$R/w.json
S=$(cat /tmp/ck/latest)
mkdir -p /tmp/ck2/$S
for f in /tmp/ck/$S/*.safetensors; do ln -s "$f" /tmp/ck2/$S/; done
python3 -c "
import json, sys
m = json.load(open(sys.argv[1])); m.pop('files')
json.dump(m, open(sys.argv[2], 'w'))" /tmp/ck/$S/manifest.json /tmp/ck2/$S/manifest.json
ls -la /tmp/ck/$S /tmp/ck2/$S > $R/dirs.log 2>&1
for round in 1 2; do
  step r_absent_$round 120 .dev/bin/trainer configs/xl.json $X --set bench.measure_steps=2 \
    --set init.resume=/tmp/ck2/$S --set output.results=$R/r_absent_$round.json
  step r_crc_$round 120 .dev/bin/trainer configs/xl.json $X --set bench.measure_steps=2 --set init.resume=/tmp/ck \
    --set output.results=$R/r_crc_$round.json
done
rm -rf /tmp/ck /tmp/ck2
{
cat $R/gpu.log
for f in $R/w.json $R/r_*.json; do
  python3 -c "
import json, sys
r = json.load(open(sys.argv[1])); t = r.get('timing', {}); c = r.get('checkpoint') or {}
print(sys.argv[1].split('/')[-1], r.get('status'), 'write_s', t.get('checkpoint_write_s'), 'read_s', t.get('resume_read_s'),
      'checksums', (c.get('resumed_from') or {}).get('checksums'))" $f
done
grep -h -E "init.resume: reading|resumed from|checkpoint after" $R/w.log $R/r_*.log | cut -c1-200
} > $R/summary.log 2>&1
finish
