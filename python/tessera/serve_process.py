"""`tessera serve` as a child process: started on a free loopback port, ready once it prints its
"listening on" line, stopped (SIGTERM, then SIGKILL) when done. Used by the server tests, the
throughput bench (bench/serve_throughput.py) and the Ray Serve replicas (tessera.serve_ray).

    with ServeProcess("path/to/checkpoint", "--slots", "4") as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="unused")

Pure Python (no engine calls): the engine runs in the child."""
from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import threading
import time

__all__ = ["ServeProcess", "default_binary"]

_LISTENING = re.compile(r"tessera serve: listening on (http://\S+)")
_REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def default_binary():
    """$TESSERA_BIN, else this checkout's build/release/tessera (or $TESSERA_BUILD_DIR's), else `tessera` on PATH."""
    if os.environ.get("TESSERA_BIN"):
        return os.environ["TESSERA_BIN"]
    build = os.environ.get("TESSERA_BUILD_DIR", os.path.join(_REPO, "build", "release"))
    local = os.path.join(build, "tessera")
    if os.access(local, os.X_OK):
        return local
    return shutil.which("tessera") or local


class ServeProcess:
    """One `tessera serve --model MODEL --port 0 ARGS...` child. The port is the server's choice
    (read from its listening line), so parallel test runs never collide."""

    def __init__(self, model, *args, binary=None, host="127.0.0.1", start_timeout=300.0, env=None):
        self.argv = [binary or default_binary(), "serve", "--model", str(model), "--host", host, "--port", "0",
                     *map(str, args)]
        self.start_timeout = start_timeout
        self.env = env
        self.url = None            # http://HOST:PORT
        self.proc = None
        self._stdout, self._stderr = [], []
        self._ready = threading.Event()
        self._readers = []

    # --- lifetime ---------------------------------------------------------------------------------

    def start(self):
        # A session of its own: a stop signal reaches the server only, never the test runner.
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                     errors="replace", env=self.env, start_new_session=True)
        self._readers = [threading.Thread(target=self._drain, args=(self.proc.stdout, self._stdout, True), daemon=True),
                         threading.Thread(target=self._drain, args=(self.proc.stderr, self._stderr, False), daemon=True)]
        for t in self._readers:
            t.start()
        deadline = time.monotonic() + self.start_timeout
        while not self._ready.wait(0.05):
            if self.proc.poll() is not None:
                self._reap_readers()
                raise RuntimeError(f"tessera serve exited with status {self.proc.returncode} before listening\n"
                                   f"command: {' '.join(self.argv)}\nstderr:\n{self.stderr[-4000:]}")
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"tessera serve did not print its listening line within {self.start_timeout} s\n"
                                   f"command: {' '.join(self.argv)}\nstderr:\n{self.stderr[-4000:]}")
        return self

    def stop(self, timeout=20.0):
        """SIGTERM (the server's clean stop), SIGKILL after `timeout` s; returns the exit status."""
        if self.proc is None:
            return None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._reap_readers()
        return self.proc.returncode

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc):
        self.stop()

    # --- what it tells ----------------------------------------------------------------------------

    @property
    def base_url(self):
        """The OpenAI client's base_url (the /v1 prefix)."""
        return self.url + "/v1"

    @property
    def pid(self):
        return self.proc.pid

    @property
    def port(self):
        return int(self.url.rsplit(":", 1)[1])

    @property
    def stderr(self):
        return "".join(self._stderr)

    @property
    def stdout(self):
        return "".join(self._stdout)

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def status_kb(self, field="VmRSS"):
        """A memory figure of the server process from /proc/PID/status (VmRSS, VmHWM...), in KiB."""
        with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
        raise KeyError(f"/proc/{self.proc.pid}/status has no {field}")

    # --- internals --------------------------------------------------------------------------------

    def _drain(self, pipe, sink, watch):
        # Read the pipes to the end so the child never blocks on a full pipe.
        for line in pipe:
            sink.append(line)
            if watch and not self._ready.is_set():
                m = _LISTENING.search(line)
                if m:
                    self.url = m.group(1).rstrip("/")
                    self._ready.set()

    def _reap_readers(self):
        # The child is gone: its pipes end, so the readers finish; a grandchild holding them open
        # must not hang us, hence the bounded join.
        for t in self._readers:
            t.join(5.0)
        for pipe in (self.proc.stdout, self.proc.stderr):
            try:
                pipe.close()
            except (OSError, ValueError):
                pass
