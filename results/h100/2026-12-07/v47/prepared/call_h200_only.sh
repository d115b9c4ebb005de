#!/bin/bash
# v47: issue 19's rows on an H200 (results/h200/2026-12-06/v40/prepared/call_h200.sh, LIMIT 420 s); on any other
# GPU, nothing (the name of the card, then exit). Carry .dev: trainer.xz, flash.tar.xz.
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  LIMIT=${LIMIT:-420} exec bash results/h200/2026-12-06/v40/prepared/call_h200.sh
fi
nvidia-smi --query-gpu=name --format=csv,noheader
