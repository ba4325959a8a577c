#!/usr/bin/env bash
# Installs everything Tessera needs on a fresh machine of this project's kind and builds the
# release preset. Idempotent and quick when nothing changed.
#   scripts/setup.sh            Debian packages, .venv with python/requirements.txt, release build
#   scripts/setup.sh --peers    also python/requirements-peers.txt (torch + transformers)
#   scripts/setup.sh --fuzz     also clang and its libFuzzer runtime (scripts/fuzz.sh)
#   scripts/setup.sh --ray      also python/requirements-ray.txt (ray[serve]: tessera.serve_ray and its test)
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

want_peers=0
want_fuzz=0
want_ray=0
for arg in "$@"; do
  case "$arg" in
    --peers) want_peers=1 ;;
    --fuzz) want_fuzz=1 ;;
    --ray) want_ray=1 ;;
    *) echo "setup.sh: unknown argument $arg" >&2; exit 2 ;;
  esac
done

log() { printf '[setup] %s\n' "$*"; }

# --- Debian packages -----------------------------------------------------------------------------
# (libdnnl-dev: oneDNN, the peer of bench/onednn_bench.cc; the engine itself does not use it.)
# (libcpp-httplib-dev: tessera serve's HTTP/1.1 server: keep-alive, a thread pool, chunked responses
# for SSE; pkg-config gives its flags.)
debs=(cmake ninja-build g++ libgtest-dev python3-venv nlohmann-json3-dev libsentencepiece-dev sentencepiece libdnnl-dev
      libjpeg62-turbo-dev libpng-dev libcpp-httplib-dev pkg-config)
# Fuzzing only: Debian's clang, plus libclang-rt-dev for libFuzzer and the sanitizer runtimes (clang
# merely recommends it). About 250 MB, so not part of the default set.
if [ "$want_fuzz" -eq 1 ]; then debs+=(clang libclang-rt-dev); fi
missing=()
for p in "${debs[@]}"; do dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p"); done
if ((${#missing[@]})); then
  log "installing Debian packages: ${missing[*]}"
  if [ "$(id -u)" -eq 0 ]; then SUDO=""; else SUDO="sudo"; fi
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# --- Python virtual environment ------------------------------------------------------------------
py="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  log "creating .venv"
  "$py" -m venv .venv
fi
stamp_of() { echo ".venv/.stamp-$(basename "$1")"; }
install_reqs() {  # $1 = requirements file; reinstalls only when the file changed
  local req="$1" stamp
  stamp="$(stamp_of "$1")"
  if ! cmp -s "$req" "$stamp" 2>/dev/null; then
    log "pip install -r $req"
    # No wheel cache: torch's CUDA wheels would otherwise stay on disk twice (~4 GB).
    .venv/bin/python -m pip install -q --disable-pip-version-check --no-cache-dir -r "$req"
    cp "$req" "$stamp"
  fi
}
install_reqs python/requirements.txt
# Ray Serve (scale-out, tessera.serve_ray): ~135 MB of wheels, ~360 MB installed, a few minutes;
# only the Ray deployment and its test need it, so only when asked (scripts/test.sh asks, with the peers).
if [ "$want_ray" -eq 1 ]; then install_reqs python/requirements-ray.txt; fi
# torch pulls ~6 GB of CUDA wheels (installed) plus ~4 GB of downloads while installing. On a disk
# without that room the install would die half way ("No space left on device") and take the whole
# test run with it; instead say so and go on without the live comparison (the committed goldens are
# still compared, and the tests that need torch report themselves skipped).
peers_need_gib="${TESSERA_PEERS_NEED_GIB:-12}"
if [ "$want_peers" -eq 1 ]; then
  peers_req=python/requirements-peers.txt
  free_gib=$(( $(df -Pk .venv | awk 'NR == 2 { print $4 }') / 1048576 ))
  if cmp -s "$peers_req" "$(stamp_of "$peers_req")" 2>/dev/null || [ "$free_gib" -ge "$peers_need_gib" ]; then
    install_reqs "$peers_req"
  else
    log "WARNING: only ${free_gib} GiB free on the disk of .venv; torch + transformers need about" \
        "${peers_need_gib} GiB to install. Not installing them: the live transformers comparisons" \
        "will be skipped (free disk space and rerun to include them)."
  fi
fi
# `import tessera` resolves to python/tessera, where the build drops the extension module.
site="$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$root/python" > "$site/tessera-dev.pth"

# --- onnxruntime's C API headers (libtessera_ort.so, docs/onnxruntime.md) ----------------------------
# The custom-op library compiles against onnxruntime's public headers; neither the onnxruntime wheel
# nor this Debian release ships them, Debian trixie's libonnxruntime-dev does. Its .deb (headers
# only, 85 kB) is fetched with apt from a private source list (the system's is left alone), checked
# against a pinned digest and unpacked into .deps/onnxruntime. Its API version (21) is older than
# the runtime in .venv, which serves every older version.
ort_deb_version="1.21.0+dfsg-1"
ort_deb_sha256="14f7d959d5deacbcf1504830d4189f91fc67382b399ed9ae9d3aa9c4050ced08"
ort_dir=.deps/onnxruntime
if [ ! -f "$ort_dir/.stamp-$ort_deb_version" ]; then
  log "fetching onnxruntime headers (Debian trixie libonnxruntime-dev $ort_deb_version)"
  tmp="$(mktemp -d)"
  mkdir -p "$tmp/sources" "$tmp/lists/partial" "$tmp/cache/archives/partial"
  printf '%s\n' "Types: deb" "URIs: http://deb.debian.org/debian" "Suites: trixie" "Components: main" \
    "Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg" > "$tmp/sources/trixie.sources"
  apt_private=(-o Dir::Etc::SourceList=/dev/null -o "Dir::Etc::SourceParts=$tmp/sources"
               -o "Dir::State::Lists=$tmp/lists" -o "Dir::Cache=$tmp/cache" -o APT::Sandbox::User=root)
  apt-get "${apt_private[@]}" update -qq
  # A stable suite keeps only its newest revision: when a point release replaces the pinned one, take
  # the suite's current .deb (apt checks it against the signed index) rather than fail the setup.
  if (cd "$tmp" && apt-get "${apt_private[@]}" download -qq "libonnxruntime-dev:amd64=$ort_deb_version"); then
    deb="$tmp/libonnxruntime-dev_${ort_deb_version/:/%3a}_amd64.deb"
    echo "$ort_deb_sha256  $deb" | sha256sum -c --quiet
  else
    log "libonnxruntime-dev $ort_deb_version is gone from trixie; taking its current revision"
    (cd "$tmp" && apt-get "${apt_private[@]}" download -qq "libonnxruntime-dev:amd64")
    deb="$(ls "$tmp"/libonnxruntime-dev_*_amd64.deb)"
  fi
  rm -rf "$ort_dir" && mkdir -p "$ort_dir"
  dpkg-deb -x "$deb" "$ort_dir"
  rm -rf "$tmp"
  touch "$ort_dir/.stamp-$ort_deb_version"
fi

# --- Build ---------------------------------------------------------------------------------------
log "building (release preset)"
cmake --preset release -DPython3_EXECUTABLE="$root/.venv/bin/python" \
  -Dpybind11_DIR="$(.venv/bin/python -m pybind11 --cmakedir)" >/dev/null
cmake --build --preset release -- -j"$(nproc)" 2>&1 | { grep -vE '^\[[0-9]+/[0-9]+\]' || true; }  # a failed build stops here
test -x build/release/tessera
