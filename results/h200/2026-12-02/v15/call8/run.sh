#!/bin/bash
# v15 call8: racecheck of the smoke run six times in a row (call6's timed out once at 60 s, call7's took 6 s)
set -u
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .carry/flash
unxz .dev/lib.xz .carry/flash/libflashbench.so; unxz .dev/smoke.xz .carry/flash/smoke
log unpacked
for i in 1 2 3 4 5 6; do
  timeout 45 stdbuf -oL compute-sanitizer --tool racecheck .carry/flash/smoke > $R/racecheck_$i.log 2>&1
  log "racecheck $i rc $? lines $(wc -l < $R/racecheck_$i.log): $(tail -1 $R/racecheck_$i.log)"
done
cat $R/progress.log
