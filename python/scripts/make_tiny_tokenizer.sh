#!/usr/bin/env bash
# Regenerates tests/testdata/tokenizer/tiny.model: a 64-piece BPE SentencePiece model trained on a
# fixed synthetic corpus with Debian's spm_train (package `sentencepiece`), and the expected ids
# of the test sentences (printed; tests/tokenizer_test.cc holds them).
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
work="$(mktemp -d)"
python3 - "$work/corpus.txt" <<'PY'
import random, sys
random.seed(1)
words = ['the', 'image', 'model', 'token', 'gemma', 'window', 'block', 'attention', 'cache', 'tessera',
         'engine', 'fast', 'layer', 'prompt']
with open(sys.argv[1], 'w') as f:
    for _ in range(2000):
        f.write(' '.join(random.choice(words) for _ in range(12)) + '\n')
PY
spm_train --input="$work/corpus.txt" --model_prefix="$work/tiny" --vocab_size=64 --model_type=bpe \
  --character_coverage=1.0 --bos_id=2 --eos_id=1 --pad_id=0 --unk_id=3 >/dev/null 2>&1
cp "$work/tiny.model" "$root/tests/testdata/tokenizer/tiny.model"
for s in "the image model" "tessera engine is fast" "attention window block cache"; do
  printf '%s -> ' "$s"; echo "$s" | spm_encode --model="$root/tests/testdata/tokenizer/tiny.model" --output_format=id
done
