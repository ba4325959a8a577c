#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the whole test suite: C++ (ctest) then Python (pytest).
#   scripts/test.sh              release build, C++ and Python tests (with transformers peers)
#   scripts/test.sh --sanitize   ASan+UBSan build of the C++ tests only
#   scripts/test.sh --tsan       ThreadSanitizer build of the C++ tests; runs the threading suites
# TESSERA_SKIP_PEERS=1 skips installing torch/transformers (the golden comparisons still run).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

if [ "${1:-}" = "--sanitize" ]; then
  bash scripts/setup.sh
  cmake --preset asan >/dev/null
  cmake --build --preset asan -- -j"$(nproc)" | grep -vE '^\[[0-9]+/[0-9]+\]' || true
  ctest --preset asan -j"$(nproc)"
  exit 0
fi
if [ "${1:-}" = "--tsan" ]; then
  bash scripts/setup.sh
  cmake --preset tsan >/dev/null
  cmake --build --preset tsan -- -j"$(nproc)" | grep -vE '^\[[0-9]+/[0-9]+\]' || true
  ctest --preset tsan -j"$(nproc)"
  exit 0
fi

if [ "${TESSERA_SKIP_PEERS:-0}" = "1" ]; then bash scripts/setup.sh; else bash scripts/setup.sh --peers; fi
ctest --preset release -j"$(nproc)"
.venv/bin/python -m pytest -q python/tests
