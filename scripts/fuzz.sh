#!/usr/bin/env bash
# Builds the libFuzzer targets (the `fuzz` preset: clang, ASan + UBSan) and runs each one for a
# bounded time on a scratch copy of its committed seed corpus, fuzz/corpus/<target>/. Any crash,
# sanitizer report, leak, timeout or failed invariant fails the script; the input that caused it
# is kept as build/fuzz/artifacts/<target>/crash-* (rerun: build/fuzz/fuzz/fuzz_<target> FILE).
#   scripts/fuzz.sh                      every target, TESSERA_FUZZ_SECONDS (default 30) each
#   scripts/fuzz.sh 600 npy tokenizer    600 s each, only those targets
#   TESSERA_FUZZ_RUNS=1000000 scripts/fuzz.sh 0 npy    a fixed number of executions instead
# One fuzzing process at a time (one core): the targets run one after another.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

secs="${1:-${TESSERA_FUZZ_SECONDS:-30}}"
shift || true
targets=("$@")
((${#targets[@]})) || targets=(npy safetensors_header safetensors_index model_config drafter_config tokenizer tokenizer_vocab tokenizer_json image_decode gguf
  gguf_model quant quantize_vocab chat_template serve_request spm_added_tokens)

# clang and its libFuzzer runtime come from Debian (scripts/setup.sh --fuzz installs them).
if ! command -v clang++ >/dev/null || [ ! -e "$(clang++ -print-file-name=libclang_rt.fuzzer-x86_64.a)" ]; then
  bash scripts/setup.sh --fuzz
fi
cmake --preset fuzz >/dev/null
cmake --build --preset fuzz -- -j"${TESSERA_FUZZ_BUILD_JOBS:-$(nproc)}" | grep -vE '^\[[0-9]+/[0-9]+\]' || true

failed=()
for t in "${targets[@]}"; do
  bin="build/fuzz/fuzz/fuzz_$t"
  [ -x "$bin" ] || { echo "fuzz.sh: no fuzzer $bin" >&2; exit 2; }
  work="build/fuzz/corpus-run/$t" art="build/fuzz/artifacts/$t"
  rm -rf "$work" && mkdir -p "$work" "$art" && cp -r "fuzz/corpus/$t/." "$work/"
  dict=()
  [ -f "fuzz/$t.dict" ] && dict=(-dict="fuzz/$t.dict")
  limit=(-max_total_time="$secs")
  [ -n "${TESSERA_FUZZ_RUNS:-}" ] && limit=(-runs="$TESSERA_FUZZ_RUNS")
  log="build/fuzz/$t.log"
  echo "[fuzz] $t: ${limit[*]}"
  # -timeout: one input taking seconds is a hang; -rss_limit_mb: runaway allocation is a failure.
  if "$bin" "$work" "${dict[@]}" "${limit[@]}" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 \
      -artifact_prefix="$art/" >"$log" 2>&1; then
    echo "[fuzz] $t: ok, $(grep -m1 'stat::number_of_executed_units' "$log" | awk '{print $2}') executions"
  else
    echo "[fuzz] $t: FAILED (log $log, inputs in $art/)"
    grep -E 'ERROR|SUMMARY|invariant failed|escaped' "$log" | head -5 || true
    failed+=("$t")
  fi
done
if ((${#failed[@]})); then
  echo "[fuzz] failed: ${failed[*]}" >&2
  exit 1
fi
