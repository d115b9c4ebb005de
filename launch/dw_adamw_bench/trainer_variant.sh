#!/bin/bash
# A trainer built with an experiment's defines in kernels/dw_adamw/dw_adamw_sm90.cu (e.g. -DDWA_HANG_CHECK), for a
# device call that times the variant in the training step beside production: recompiles that one file with the
# build directory's own nvcc command plus the defines, swaps it into a copy of libtrainer_lib.a and links with the
# build's own link command. Writes .dev/trainer_NAME.xz (the device call unpacks it with unpack_bins trainer_NAME).
#   launch/dw_adamw_bench/trainer_variant.sh NAME "-DDEFINE ..." [BUILD_DIR (build-cuda)]
# Run from the repository root after the build directory has built `trainer` (ninja).
set -euo pipefail
name=$1 defs=$2 build=${3:-build-cuda}
root=$PWD
work=$(mktemp -d /tmp/trainer_variant.XXXXXX)
trap 'rm -rf "$work"' EXIT
cd "$build"
compile=$(ninja -t commands trainer | grep -F "dw_adamw_sm90.cu.o " | grep nvcc | head -1 | sed 's/^ccache //')
link=$(ninja -t commands trainer | tail -1)
obj=CMakeFiles/trainer_sm90.dir/kernels/dw_adamw/dw_adamw_sm90.cu.o
if [ -z "$compile" ] || ! grep -qF " libtrainer_lib.a " <<< "$link"; then
  echo "trainer_variant.sh: $build's ninja commands do not have the expected compile / link lines" >&2
  exit 1
fi
eval "$(sed "s| -MD -MT [^ ]* -MF [^ ]*||; s| -o $obj| $defs -o $work/dw_adamw_sm90.cu.o|" <<< "$compile")" 2>&1 |
  grep -v C7510 || true
cp libtrainer_lib.a "$work/lib.a"
ar r "$work/lib.a" "$work/dw_adamw_sm90.cu.o"
eval "$(sed "s| libtrainer_lib.a | $work/lib.a |; s| -o trainer | -o $work/trainer |" <<< "$link")"
mkdir -p "$root/.dev"
xz -T2 -c "$work/trainer" > "$root/.dev/trainer_$name.xz"
echo "trainer_variant.sh: .dev/trainer_$name.xz ($defs)"
