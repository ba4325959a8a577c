# Sourced by bench/setup_peers.sh and bench/build_llama_server.sh: fetch_llama_sdist PY VERSION DEST
# STRIP MEMBER... downloads the llama-cpp-python sdist with PY's pip (no build, no dependencies) and
# unpacks the given members of it into DEST, dropping STRIP leading path components.
fetch_llama_sdist() {
  local py="$1" version="$2" dest="$3" strip="$4" dl
  shift 4
  dl="$(mktemp -d)"
  rm -rf "$dest"
  mkdir -p "$dest"
  "$py" -m pip download -q --disable-pip-version-check --no-deps --no-binary :all: \
    "llama-cpp-python==$version" -d "$dl"
  tar xzf "$dl/llama_cpp_python-$version.tar.gz" -C "$dest" --strip-components="$strip" \
    "${@/#/llama_cpp_python-$version/}"
  rm -rf "$dl"
}
