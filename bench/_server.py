"""Shared by the benchmarks: start `inside-llm serve` on a free loopback port, wait for /healthz, stop it;
time a GET on it and write a latency row (median, p99 and the ratio to a baseline of the same run).

The server is a child process group of the benchmark: it is always stopped on exit, even on error.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def serve(workers: int = 1, timeout_s: float = 60.0) -> Iterator[tuple[str, subprocess.Popen]]:
    """(base URL, process) of a fresh server; the process group is killed when the block ends."""
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "inside_llm.cli",
        "serve",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--workers",
        str(workers),
        "--log-level",
        "warning",
    ]
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, start_new_session=True)
    base = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(base, proc, timeout_s, workers)
        yield base, proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=5)


def _wait_healthy(base: str, proc: subprocess.Popen, timeout_s: float, workers: int) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}")
        with contextlib.suppress(OSError):
            with urllib.request.urlopen(base + "/healthz", timeout=2) as r:
                if r.status == 200 and len(server_pids(proc)) >= max(1, workers):
                    return
        time.sleep(0.2)
    raise RuntimeError(f"server not healthy after {timeout_s:g} s")


def server_pids(proc: subprocess.Popen) -> list[int]:
    """The serving processes: the workers when there are several, else the server itself."""
    workers = [p for p in children(proc.pid) if "spawn_main" in _cmdline(p)]
    return workers or [proc.pid]


def children(pid: int) -> list[int]:
    out = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError):
                out += [int(c) for c in (task / "children").read_text().split()]
    return out


def _cmdline(pid: int) -> str:
    with contextlib.suppress(OSError):
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    return ""


def rss_mb(pids: list[int]) -> float:
    """Resident memory of the given processes together (MB)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmRSS:"):
                    total += int(line.split()[1])
    return total / 1024


def cpu_s(pids: list[int]) -> float:
    """CPU time (user + system) the given processes and their threads have used so far (s)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime in clock ticks
    return total / os.sysconf("SC_CLK_TCK")


def percentile(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def get_ms(client, path: str) -> float:
    """Wall time of one GET on `client` (an httpx.Client), ms; a non-2xx answer raises."""
    t0 = time.perf_counter()
    client.get(path).raise_for_status()
    return (time.perf_counter() - t0) * 1e3


def latency_row(name: str, ms: list[float], base_ms: float, note: str) -> dict:
    """A row of request times: median and p99 (ms), and the median as a ratio to `base_ms`, the same run's
    baseline (/healthz), so a busy neighbour weighs on both alike."""
    med = statistics.median(ms)
    return {
        "name": name,
        "value": round(med, 3),
        "p99": round(percentile(ms, 0.99), 3),
        "unit": "ms",
        "ratio": round(med / base_ms, 2) if base_ms else None,
        "note": note,
    }
