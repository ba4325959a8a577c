#!/bin/sh
# Checks that the quantized decode kernels in LIB (the ops library) still issue their software
# prefetches. A prefetch has no side effect the compiler must keep, so GCC once deleted the
# K-quant rows' prefetch (a call it had not inlined, found effect-free) and nothing else noticed:
# results stayed exact, only the weight stream slowed. Every function of the kernel families below
# must hold a prefetch instruction, and the families must be found (so the check cannot pass empty).
# Usage: prefetch_emitted.sh LIB [OBJDUMP]
set -eu
lib=$1
objdump=${2:-objdump}
"$objdump" -d --no-show-raw-insn -C "$lib" | awk '
  /^[0-9a-f]+ <.*>:$/ {
    fn = $0
    if (fn ~ /RowQ5KTokens::Row<[0-9]>|RowQ6KTokens::Row<[0-9]>|RowGroups16<.*, [0-9]+>\(|Rows8T<[^<>]*, [0-9]>/ ||
        fn ~ /::Row<tessera::Block[A-Z0-9_]+, tessera::ops::ActBlock/ || fn ~ /::RowLaneQ6K\(/) {
      kernels[fn] = 0
      if (fn ~ /::Row<tessera::Block/ || fn ~ /::RowLaneQ6K\(/) x86++
      if (fn ~ /RowQ6KTokens/) q6k++
      if (fn ~ /RowGroups16<.*Lanes16<tessera::BlockQ4_0>/) l40++
      if (fn ~ /RowGroups16<.*Lanes16<tessera::BlockQ5_0>/) l50++
      if (fn ~ /RowGroups16<.*Lanes16<tessera::BlockQ8_0>/) l80++
      if (fn ~ /RowGroups16<.*Lanes16<tessera::BlockQ4_1>/) l41++
      if (fn ~ /RowGroups16<.*Lanes16<tessera::BlockQ5_1>/) l51++
      if (fn ~ /RowGroups16<.*LanesQ4K16,/) l4k++
      if (fn ~ /RowQ5KTokens/) q5k++
      if (fn ~ /Rows8T<[^<>]*GroupQ4_0, /) r8++
      if (fn ~ /Rows8T<[^<>]*GroupQ5_0, /) r85++
      if (fn ~ /Rows8T<[^<>]*GroupQ4_1, /) r81++
      if (fn ~ /Rows8T<[^<>]*GroupQ5_1, /) r851++
      if (fn ~ /Rows8T<[^<>]*GroupQ8_0, /) r880++
      if (fn ~ /Rows8T<[^<>]*GroupQ4_K, /) r8k++
      if (fn ~ /Rows8T<[^<>]*GroupQ5_K, /) r85k++
      if (fn ~ /Rows8T<[^<>]*GroupQ6_K, /) r86++
    }
    next
  }
  /prefetch/ && (fn in kernels) { kernels[fn]++ }
  END {
    bad = 0
    for (f in kernels) if (kernels[f] == 0) { print "no prefetch in " f; bad = 1 }
    printf "kernels: %d Q5_K rows, %d Q6_K rows, AVX-512 sixteen rows: %d Q4_0, %d Q5_0, %d Q8_0, %d Q4_1, %d Q5_1, %d Q4_K; %d AVX2 Q4_0 Rows8T, %d AVX2 Q5_0 Rows8T, %d AVX2 Q4_1 Rows8T, %d AVX2 Q5_1 Rows8T, %d AVX2 Q8_0 Rows8T, %d AVX2 Q4_K Rows8T, %d AVX2 Q5_K Rows8T, %d AVX2 Q6_K Rows8T, %d one-row (AVX2 form)\n",
           q5k, q6k, l40, l50, l80, l41, l51, l4k, r8, r85, r81, r851, r880, r8k, r85k, r86, x86
    if (q5k == 0 || q6k == 0 || l40 == 0 || l50 == 0 || l80 == 0 || l41 == 0 || l51 == 0 || l4k == 0 || r8 == 0 || r85 == 0 || r81 == 0 || r851 == 0 || r880 == 0 || r8k == 0 || r85k == 0 || r86 == 0 || x86 == 0) { print "a kernel family was not found"; bad = 1 }
    exit bad
  }'
