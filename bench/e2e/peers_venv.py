"""Runs a peers driver inside bench/.peers/venv (made by bench/setup_peers.sh), where the peers and
their pinned torch / transformers live; the project's .venv stays untouched."""
import os
import sys

BENCH = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_PY = os.path.join(BENCH, ".peers", "venv", "bin", "python")


def reexec_in_peers_venv(script):
    """Re-executes the running script with the peers' interpreter unless already there (or
    TESSERA_E2E_NO_REEXEC is set); exits with a message when the peers are not installed."""
    if os.path.abspath(sys.prefix) == os.path.abspath(os.path.join(BENCH, ".peers", "venv")) or \
            os.environ.get("TESSERA_E2E_NO_REEXEC"):
        return
    if not os.path.exists(VENV_PY):
        sys.exit(f"{script}: peers not installed; run `bash bench/setup_peers.sh` first")
    os.execv(VENV_PY, [VENV_PY] + sys.argv)
