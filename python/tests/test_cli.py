"""The `tessera` command line and the benchmark programs (issue 17): every command answers --help,
nonsense arguments are refused by name, and special files never block. Runs the binaries of the
build in $TESSERA_BUILD_DIR (default build/release); skipped where they are not built."""
from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from helpers.models import BUILD_DIR as BUILD, MODELS_DIR

TESSERA = os.path.join(BUILD, "tessera")
TEXT_MODEL = os.path.join(MODELS_DIR, "gemma3_text")

pytestmark = pytest.mark.skipif(not os.access(TESSERA, os.X_OK), reason=f"{TESSERA} is not built")


def run(*args, timeout=60):
    try:
        return subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        pytest.fail(f"{' '.join(args)} ran past {timeout} s")


@pytest.mark.parametrize("command", ["run", "demo", "inspect", "kv-memory", "selfcheck"])
@pytest.mark.parametrize("flag", ["--help", "-h"])
def test_every_subcommand_answers_help(command, flag):
    r = run(TESSERA, command, flag, timeout=20)
    assert r.returncode == 0, r.stderr
    assert "usage: tessera " + command in r.stdout


def test_help_after_other_options():
    r = run(TESSERA, "run", "--model", "nowhere", "--help", timeout=20)
    assert r.returncode == 0 and "usage: tessera run" in r.stdout, r.stderr
    # A value that happens to read "--help" is a value.
    r = run(TESSERA, "run", "--model", TEXT_MODEL, "--prompt", "--help", timeout=20)
    assert r.returncode != 0 and "tokenizer.model" in r.stderr


@pytest.mark.parametrize("bench", ["tessera_bench_attention", "tessera_bench_linear", "tessera_bench_modes",
                                   "tessera_bench_onednn"])
def test_benchmarks_answer_help_without_running(bench):
    path = os.path.join(BUILD, bench)
    if not os.access(path, os.X_OK):
        pytest.skip(f"{bench} is not built")
    r = run(path, "--help", timeout=20)
    assert r.returncode == 0, r.stderr
    assert "usage: " + bench in r.stdout
    r = run(path, "--threads", timeout=20)  # an option without its value
    assert r.returncode == 2 and "--threads" in r.stderr


@pytest.mark.parametrize("args, message", [
    (["run", "--model", TEXT_MODEL, "--ids", "2,3", "--max-new-tokens", "-1"], "--max-new-tokens"),
    (["run", "--model", TEXT_MODEL, "--ids", "2,3", "--threads", "-3"], "--threads"),
    (["run", "--model", TEXT_MODEL, "--ids", "2,3", "--threads", "0"], "--threads"),
    (["run", "--model", TEXT_MODEL, "--ids", "2,3", "stray"], "stray"),
    (["inspect", "--model", TEXT_MODEL, "stray"], "stray"),
    (["demo", "stray"], "stray"),
    (["demo", "--threads", "-3"], "--threads"),
    (["demo", "--max-new-tokens", "-2"], "--max-new-tokens"),
    (["selfcheck", "stray"], "stray"),
])
def test_nonsense_arguments_are_refused_by_name(args, message):
    r = run(TESSERA, *args)
    assert r.returncode != 0, r.stdout
    assert message in r.stderr


def test_ids_never_touch_the_tokenizer(tmp_path):
    # A FIFO as tokenizer.model would block whoever opens it: --ids must not.
    d = tmp_path / "m"
    shutil.copytree(TEXT_MODEL, d)
    os.mkfifo(d / "tokenizer.model")
    r = run(TESSERA, "run", "--model", str(d), "--ids", "2,3,4", "--max-new-tokens", "2", "--threads", "1",
            timeout=60)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.split()) == 2  # the generated ids
    r = run(TESSERA, "run", "--model", str(d), "--prompt", "hi", "--threads", "1", timeout=60)
    assert r.returncode != 0 and "FIFO" in r.stderr and "tokenizer.model" in r.stderr


def test_image_embeds_fifo_is_an_immediate_error(tmp_path):
    fifo = tmp_path / "e.npy"
    os.mkfifo(fifo)
    r = run(TESSERA, "run", "--model", TEXT_MODEL, "--ids", "2,3", "--image-embeds", str(fifo), "--threads", "1",
            timeout=60)
    assert r.returncode != 0 and "FIFO" in r.stderr and str(fifo) in r.stderr
