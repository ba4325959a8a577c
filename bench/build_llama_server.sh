#!/usr/bin/env bash
# llama.cpp's HTTP server (`llama-server`) from the llama.cpp sources that the llama-cpp-python sdist
# vendors (the version the other benches run, so both servers share kernels with bench/e2e_peers.py's
# llama.cpp): fetched with pip, only the llama-server target built, CPU backend as llama-cpp-python
# builds it (native, OpenMP). Run through `bash bench/setup_peers.sh --llama-server`.
#   bench/build_llama_server.sh VERSION   -> bench/.peers/llama-server/bin/llama-server
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
version="${1:?llama-cpp-python version}"
peers="bench/.peers"
out="$peers/llama-server"
src="$out/src"
lock="${TESSERA_CPU_LOCK:-/tmp/tessera-cpu.lock}"
log() { printf '[llama-server] %s\n' "$*"; }

if [ -x "$out/bin/llama-server" ] && [ "$(cat "$out/VERSION" 2>/dev/null)" = "$version" ]; then
  log "ok: $out/bin/llama-server (llama-cpp-python $version's llama.cpp)"
  exit 0
fi
# Any Python with pip fetches the sdist (no build, no dependencies).
py=""
for c in "$peers/venv/bin/python" ".venv/bin/python" python3; do
  if "$c" -m pip --version >/dev/null 2>&1; then py="$c"; break; fi
done
[ -n "$py" ] || { log "no Python with pip to fetch the sdist"; exit 1; }
if [ ! -f "$src/CMakeLists.txt" ]; then
  log "fetching the llama-cpp-python $version sdist (its vendor/llama.cpp)"
  . bench/llama_sdist.sh
  fetch_llama_sdist "$py" "$version" "$src" 3 vendor/llama.cpp
  rm -f "$src/.git"  # a submodule pointer into llama-cpp-python's repository, which is not here
fi
log "configuring (server only: no tests, examples, curl or web UI download)"
cmake -S "$src" -B "$src/build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
  -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
  -DLLAMA_CURL=OFF -DHF_ENABLED=OFF -DGGML_NATIVE=ON >/dev/null
log "building llama-server (under $lock)"
t0=$(date +%s)
flock "$lock" cmake --build "$src/build" --target llama-server -j"$(nproc)" 2>&1 | { grep -vE '^\[[0-9]+/[0-9]+\]' || true; }
mkdir -p "$out/bin"
cp "$src/build/bin/llama-server" "$out/bin/llama-server"
echo "$version" > "$out/VERSION"
log "ok: $out/bin/llama-server in $(( $(date +%s) - t0 )) s"
