#!/usr/bin/env bash
# Sets up (scripts/setup.sh) and runs the demo.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/setup.sh"
exec "$root/build/release/tessera" demo "$@"
