#!/bin/bash
# v35 call 2 (inline command, on the warm H100 of call 1): every [cuda] test, then racecheck and memcheck of the
# [dw_adamw] unit tests (the trainer's fused dW + AdamW kernel). Carry .dev (unit_tests.xz, trainer.xz).
source launch/device_call.sh; unpack_bins unit_tests trainer; step cuda_tests 260 .dev/bin/unit_tests "[cuda]"; tail -3 $R/cuda_tests.log; step race_dwa 200 compute-sanitizer --tool racecheck --racecheck-report hazard .dev/bin/unit_tests "[dw_adamw]"; tail -5 $R/race_dwa.log; step mem_dwa 100 compute-sanitizer --tool memcheck .dev/bin/unit_tests "[dw_adamw]"; tail -4 $R/mem_dwa.log; save
