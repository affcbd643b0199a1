"""A real server for the tests that measure what hostile load does to it: `inside-llm serve` in its own process
on a loopback port, its peak memory (VmHWM, reset through clear_refs) and /healthz's latency while load runs."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from contextlib import contextmanager

import httpx


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LiveServer:
    def __init__(self, proc: subprocess.Popen, url: str):
        self.proc, self.url = proc, url

    def _status(self, key: str) -> float:
        with open(f"/proc/{self.proc.pid}/status", encoding="ascii") as f:
            return next(int(ln.split()[1]) for ln in f if ln.startswith(key + ":")) / 1024  # kB -> MB

    def rss_mb(self) -> float:
        return self._status("VmRSS")

    def reset_peak(self) -> None:
        """From now on, peak_mb() is the highest RSS since this call (Linux: clear_refs 5 resets VmHWM)."""
        with open(f"/proc/{self.proc.pid}/clear_refs", "w", encoding="ascii") as f:
            f.write("5")

    def peak_mb(self) -> float:
        return self._status("VmHWM")

    def children(self) -> list[int]:
        """Pids of the server's child processes (e.g. the long texts' tokenizer workers), whichever of its threads
        started them (Linux lists a child under the thread that made it)."""
        pids = []
        for task in os.listdir(f"/proc/{self.proc.pid}/task"):
            with open(f"/proc/{self.proc.pid}/task/{task}/children", encoding="ascii") as f:
                pids += [int(x) for x in f.read().split()]
        return sorted(set(pids))


@contextmanager
def live_server(timeout_s: float = 60, args: tuple[str, ...] = ()):
    """`python -m inside_llm serve` (with `args`) on a free loopback port; stopped (by its own pid) on exit."""
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "inside_llm", "serve", "--port", str(port), "--log-level", "warning", *args],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=os.environ | {"PYTHONPATH": os.pathsep.join(sys.path)},
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline or proc.poll() is not None:
                raise RuntimeError("the server did not start")
            time.sleep(0.2)
        yield LiveServer(proc, url)
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(timeout=10)


_PROBE = """
import sys, threading, time, httpx
url, every, paths = sys.argv[1], float(sys.argv[2]), sys.argv[3:]
done = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), done.set()), daemon=True).start()
with httpx.Client(timeout=60) as c:
    c.get(url + "/healthz")
    print("ready", flush=True)
    n = 0
    while not done.is_set():
        t0 = time.perf_counter()
        c.get(url + paths[n % len(paths)])
        n += 1
        print(1e3 * (time.perf_counter() - t0), flush=True)
        done.wait(every)
"""


class HealthProbe:
    """Times GET /healthz (or each of `paths` in turn) every `every_s` while load runs, from its own process (so
    the load's client threads do not slow the probe): ms lists each answer's latency in milliseconds."""

    def __init__(self, url: str, every_s: float = 0.1, paths: tuple[str, ...] = ("/healthz",)):
        self.url, self.every_s, self.paths, self.ms = url, every_s, paths, []

    def __enter__(self) -> HealthProbe:
        self._proc = subprocess.Popen(
            [sys.executable, "-c", _PROBE, self.url, str(self.every_s), *self.paths],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self._proc.stdout.readline().strip() == "ready"  # probing before the load begins
        return self

    def __exit__(self, *exc) -> None:
        out, _ = self._proc.communicate(input="", timeout=70)
        self.ms = [float(x) for x in out.split()]

    def worst(self) -> float:
        return max(self.ms)


@contextmanager
def serve_in_thread(app, port: int | None = None, start_s: float = 20):
    """`app` under uvicorn on a loopback port (a free one unless given), in a thread of this process, with the
    server's own request-head limit; yields its base URL and stops it on exit."""
    import uvicorn

    from inside_llm.settings import MAX_REQUEST_HEAD_BYTES

    port = port or _free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="warning", h11_max_incomplete_event_size=MAX_REQUEST_HEAD_BYTES
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_s
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
