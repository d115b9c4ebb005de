#!/bin/bash
# v23 call5: the SASS of the d 128 causal backward (BwdTraits<128, 2, 24, 240, 64, 2>, 1, 0) in production
# (8d124cd) and in variant A (st.shared.v2 dQ stores, 3.5-6% slower in call2), for the next look at why.
set -u
R=$OUT/r; mkdir -p $R
tar xJf .dev/flash_old.tar.xz && tar xJf .dev/flash_a.tar.xz
cp .dev/call5.sh $R/run.sh
K=_ZN7trainer5flash4sm9021flash_bwd_sm90_kernelINS1_9BwdTraitsILi128ELi2ELi24ELi240ELi64ELi2EEELb1ELb0EEEvNS0_14FlashBwdParamsENS1_7TmaMapsE
for x in old a; do
  timeout 120 cuobjdump -sass -fun $K .dev/flash_$x/libflashbench.so > $R/sass_bwd_d128_$x.txt 2> $R/sass_$x.err
  echo "$x rc $? lines $(wc -l < $R/sass_bwd_d128_$x.txt)"
done
for x in old a; do
  echo "== $x"; grep -oE '^\s+/\*[0-9a-f]+\*/\s+[@!A-Z0-9P]*\s*[A-Z][A-Z0-9_.]+' $R/sass_bwd_d128_$x.txt | awk '{print $NF}' | sed 's/\..*//' | sort | uniq -c | sort -rn | head -14
done
gzip -9 $R/sass_bwd_d128_*.txt
tar czf $OUT/r.tgz -C $OUT r
