#!/usr/bin/env bash
# Installs the peers of the end-to-end benchmark (bench/e2e_peers.py): onnxruntime-genai (+ the
# model builder's undeclared deps torch / transformers / onnx-ir) and llama-cpp-python, into their
# own venv bench/.peers/venv (git-ignored) so the project's .venv is untouched, and fetches the
# llama-cpp-python sdist for llama.cpp's convert_hf_to_gguf.py (bench/.peers/llama-sdist).
# No peer source is committed. Idempotent: a second run only checks.
#   bash bench/setup_peers.sh               everything the end-to-end benchmark needs
#   bash bench/setup_peers.sh --llama-only  llama-cpp-python and the converter only: the peer of the
#                                           GGUF and quantization tests (scripts/test.sh runs this)
#   bash bench/setup_peers.sh --builder     (alone) onnxruntime-genai's model builder only, in a small
#                                           venv over the project's .venv (the ONNX rewrite test)
#   bash bench/setup_peers.sh --llama-server  (opt-in, alone) llama.cpp's `llama-server` built from the
#                                           llama.cpp the same sdist vendors, only that target:
#                                           bench/.peers/llama-server/bin/llama-server, the peer of
#                                           bench/serve_throughput.py (~10 min on 2 cores, under the lock)
# The llama-cpp-python build (~8 min on 2 cores) runs under `flock /tmp/tessera-cpu.lock` so it
# does not disturb timing runs that take the same lock.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
peers="bench/.peers"
venv="$peers/venv"
llama_version="0.3.36"            # llama-cpp-python (vendors llama.cpp / ggml 0.25.3)
reqs="bench/requirements-e2e.txt"
lock="${TESSERA_CPU_LOCK:-/tmp/tessera-cpu.lock}"
log() { printf '[setup_peers] %s\n' "$*"; }
llama_only=0
[ "${1:-}" = "--llama-only" ] && llama_only=1
if [ "${1:-}" = "--llama-server" ]; then
  exec bash "$root/bench/build_llama_server.sh" "$llama_version"
fi
# --builder (alone): onnxruntime-genai's model builder only, for python/tests/test_ort_rewrite.py and
# bench/ort_decoder.py: a small venv (bench/.peers/builder-venv) that sees the project's .venv
# (torch, transformers, onnx from requirements-peers.txt) through a .pth file and adds, without
# their dependencies, the two packages the builder needs beyond it, at requirements-e2e.txt's pins.
if [ "${1:-}" = "--builder" ]; then
  bvenv="$peers/builder-venv"
  pins=$(grep -E '^(onnxruntime-genai|onnx-ir)==' "$reqs")
  if ! cmp -s <(echo "$pins") "$bvenv/.stamp-builder" 2>/dev/null; then
    log "builder venv $bvenv: $(echo $pins)"
    rm -rf "$bvenv"
    "${PYTHON:-python3}" -m venv "$bvenv"
    site="$("$bvenv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
    "$root/.venv/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > "$site/project-venv.pth"
    # shellcheck disable=SC2086
    "$bvenv/bin/python" -m pip install -q --disable-pip-version-check --no-deps $pins
    echo "$pins" > "$bvenv/.stamp-builder"
  fi
  # Without torch/transformers in .venv (setup.sh skips them on a full disk) the builder cannot run;
  # its test then reports itself skipped, so this is a warning, not a failure.
  if "$bvenv/bin/python" -c 'import onnxruntime_genai.models, onnx_ir, transformers, torch' 2>/dev/null; then
    log "ok: $bvenv"
  else
    log "WARNING: the model builder cannot import its modules (torch / transformers missing from .venv?)"
  fi
  exit 0
fi

# --- Debian packages (compilers for the llama.cpp build) ----------------------------------------
debs=(cmake ninja-build g++ python3-venv util-linux)
missing=()
for p in "${debs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- venv + pinned Python packages ---------------------------------------------------------------
mkdir -p "$peers"
py="${PYTHON:-python3}"
if [ ! -x "$venv/bin/python" ]; then
  log "creating $venv"
  "$py" -m venv "$venv"
fi
stamp="$venv/.stamp-requirements-e2e.txt"
if [ "$llama_only" -eq 0 ] && ! cmp -s "$reqs" "$stamp" 2>/dev/null; then
  log "pip install -r $reqs (torch pulls large wheels: a few minutes the first time)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$reqs"
  cp "$reqs" "$stamp"
fi

# --- llama-cpp-python (built from its sdist) -----------------------------------------------------
have="$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("llama_cpp_python"))' 2>/dev/null || true)"
if [ "$have" != "$llama_version" ]; then
  log "building llama-cpp-python==$llama_version (~8 min on 2 cores, under $lock)"
  CMAKE_BUILD_PARALLEL_LEVEL="$(nproc)" flock "$lock" \
    "$venv/bin/python" -m pip install -q --disable-pip-version-check "llama-cpp-python==$llama_version"
fi

# --- llama.cpp converter from the same sdist ------------------------------------------------------
sd="$peers/llama-sdist"
if [ ! -f "$sd/vendor/llama.cpp/convert_hf_to_gguf.py" ]; then
  log "fetching the llama-cpp-python $llama_version sdist for convert_hf_to_gguf.py"
  . bench/llama_sdist.sh
  fetch_llama_sdist "$venv/bin/python" "$llama_version" "$sd" 1 vendor/llama.cpp/convert_hf_to_gguf.py \
    vendor/llama.cpp/conversion vendor/llama.cpp/gguf-py
fi

if [ "$llama_only" -eq 1 ]; then
  "$venv/bin/python" -c 'import llama_cpp; print("[setup_peers] llama_cpp_python", llama_cpp.__version__)'
  log "ok (llama.cpp only): $venv, converter in $sd/vendor/llama.cpp"
  exit 0
fi
"$venv/bin/python" - <<'PY'
import importlib.metadata as m
for p in ("onnxruntime", "onnxruntime-genai", "llama_cpp_python", "torch", "transformers", "onnx-ir"):
    print(f"[setup_peers] {p} {m.version(p)}")
import onnxruntime_genai, llama_cpp  # noqa: F401  (both load)
PY
log "ok: $venv, converter in $sd/vendor/llama.cpp"
