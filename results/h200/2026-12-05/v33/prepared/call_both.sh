#!/bin/bash
# One device call for both prepared v33 calls: the epilogue experiments (call_epi.sh, ~2-4 minutes) into $OUT/epi, then
# the peer comparisons (call_peer.sh) with what is left of ~580 s into $OUT/peer. Carry .dev (dwa.tar.xz, trainer.xz).
d=$(dirname "$0"); t=$(date +%s)
mkdir -p $OUT/epi $OUT/peer
OUT=$OUT/epi bash $d/call_epi.sh
OUT=$OUT/peer LIMIT=$(( 575 - ($(date +%s) - t) )) bash $d/call_peer.sh
