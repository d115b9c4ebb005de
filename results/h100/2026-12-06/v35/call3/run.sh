#!/bin/bash
# v35 call 3 (inline command, the same warm H100): racecheck of the bench library's quick float64 checks (all its
# kernels: the fused one, cuBLASLt's, AdamW), racecheck of the [dw_adamw] unit tests with Catch2's -s, and the same
# tests without a sanitizer. Carry .dev (dwa.tar.xz, unit_tests.xz).
source launch/device_call.sh; unpack_tar .dev/dwa.tar.xz; unpack_bins unit_tests; C=launch/dw_adamw_bench/check.py; step race_check 200 compute-sanitizer --tool racecheck --racecheck-report hazard python3 $C --lib dwa/libdwa.so --quick --no-time --out $R/rc; tail -6 $R/race_check.log; step race_ut 150 compute-sanitizer --tool racecheck --show-backtrace no .dev/bin/unit_tests "[dw_adamw]" -s; grep -v "^\[20" $R/race_ut.log | tail -30; step ut_plain 60 .dev/bin/unit_tests "[dw_adamw]"; tail -2 $R/ut_plain.log; save
