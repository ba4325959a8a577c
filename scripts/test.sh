#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the whole test suite: C++ (ctest) then Python (pytest).
#   scripts/test.sh              release build, C++ and Python tests (with transformers peers)
#   scripts/test.sh --sanitize   ASan+UBSan build of the C++ tests only
#   scripts/test.sh --tsan       ThreadSanitizer build of the C++ tests; runs the threading suites
# TESSERA_SKIP_PEERS=1 skips installing torch/transformers, ray and llama.cpp (the golden comparisons still
# run; the Ray Serve test reports itself skipped).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

# A sanitizer build of the C++ tests: $1 is its CMake preset (asan, tsan; the presets say which tests run).
sanitizer_suite() {
  bash scripts/setup.sh
  cmake --preset "$1" >/dev/null
  cmake --build --preset "$1" -- -j"$(nproc)" 2>&1 | { grep -vE '^\[[0-9]+/[0-9]+\]' || true; }  # a failed build stops here
  ctest --preset "$1" -j"$(nproc)"
}
case "${1:-}" in
  --sanitize) sanitizer_suite asan; exit 0 ;;
  --tsan) sanitizer_suite tsan; exit 0 ;;
esac

if [ "${TESSERA_SKIP_PEERS:-0}" = "1" ]; then
  bash scripts/setup.sh
else
  bash scripts/setup.sh --peers --ray
  # llama.cpp (llama-cpp-python built once, its converter): the GGUF and quantization tests' peer.
  bash bench/setup_peers.sh --llama-only
  # onnxruntime-genai's model builder: the exporter whose decoder test_ort_rewrite.py rewrites.
  bash bench/setup_peers.sh --builder
fi
ctest --preset release -j"$(nproc)"
.venv/bin/python -m pytest -q python/tests
