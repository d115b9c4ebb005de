#!/bin/bash
# v15 call7: call6's racecheck of the smoke run timed out at 60 s (call3's took 4 s); the one new case is d 96, T 300,
# one head (the Hopper backward's split with one-tile chunks). Line-buffered, longer limit, and the case alone first.
set -u
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .carry/flash
unxz .dev/lib.xz .carry/flash/libflashbench.so; unxz .dev/smoke.xz .carry/flash/smoke
log unpacked
timeout 20 stdbuf -oL .carry/flash/smoke > $R/plain.log 2>&1; log "plain rc $?"
timeout 200 stdbuf -oL compute-sanitizer --tool racecheck .carry/flash/smoke > $R/racecheck_smoke.log 2>&1; log "racecheck rc $?"
tail -8 $R/racecheck_smoke.log
cat $R/progress.log
