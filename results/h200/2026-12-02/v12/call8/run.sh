#!/bin/bash
# v12 call 8: after the last refactors (every strategy uploads AdamW's values in begin_step; none's working-copy
# helper): the graph tests, the model tests and the AdamW op tests on the GPU.
set -u
R=$OUT/r; mkdir -p $R
mkdir -p .dev/bin; gunzip -c .dev/unit_tests.gz > .dev/bin/unit_tests; chmod +x .dev/bin/unit_tests
timeout 100 .dev/bin/unit_tests "[graph],[cuda][model],[cuda][adamw]" > $R/unit.log 2>&1; echo "rc $?" >> $R/unit.log
tail -3 $R/unit.log
