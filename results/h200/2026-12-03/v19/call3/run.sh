#!/bin/bash
# v19 call3: every [cuda] unit test of HEAD (05efc4a: the flash2 test's logsumexp check mended), then the mended case
# ("flash2 matches naive attention: small and ragged lengths", fresh random seeds each run) four more times.
set -u
R=$OUT/r; mkdir -p $R
t0=$(date +%s)
log() { echo "[$(( $(date +%s) - t0 ))s] $*" | tee -a $R/progress.log; }
unxz() { python3 -c "import lzma,shutil,sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2],'wb'))" $1 $2; chmod +x $2; }
mkdir -p .dev/bin
unxz .dev/unit_tests.xz .dev/bin/unit_tests
log unpacked
timeout 200 .dev/bin/unit_tests "[cuda]" > $R/unit_cuda.log 2>&1; log "unit [cuda] rc $? $(tail -2 $R/unit_cuda.log | head -1)"
for i in 1 2 3 4; do
  timeout 60 .dev/bin/unit_tests "flash2 matches naive attention: small and ragged lengths, every head dim" > $R/unit_ragged$i.log 2>&1; log "ragged $i rc $? $(tail -2 $R/unit_ragged$i.log | head -1)"
done
cat $R/progress.log
