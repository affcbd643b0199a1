"""Record a real llama.cpp `llama-server`'s pages as tests/fixtures/attach/llamacpp/ (issue 27), and its decode speed.

Starts the llama-server binary it is given on our SmolLM2 GGUF (run from the model's folder, so no machine path
reaches a page), on 127.0.0.1:PORT with --metrics --slots -np 4 -c 2048, and writes, byte for byte as served:
  health.json, props.json, v1_models.json, metrics_idle.txt, slots_idle.json  (before any request)
  metrics_busy_1.txt, slots_busy.json, metrics_busy_2.txt  (while 8 streamed chats share its 4 slots: the first
      scrape with all 4 busy and 4 waiting, the second once the first 4 have ended, since llama-server adds a
      request's tokens to its counters when it ends; the wall time between them goes into recorded.json)
  metrics_after.txt  (when the load is over)
  chat_stream.sse  (one streamed /v1/chat/completions, alone, raw SSE bytes)
and recorded.json (the binary's --version, the exact commands, the scrape times). With --bench it also measures
single-stream decode speed (llama.cpp's own timings.predicted_per_second, 128 tokens, ignore_eos, median of 3)
with -t 1 and -t 2 and -np 1, and prints it (for docs/benchmarks.md). Run:
    PYTHONPATH=src .venv/bin/python scripts/record_llamacpp_fixtures.py PATH/TO/llama-server [--bench]
"""

from __future__ import annotations

import argparse
import json
import shlex
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai

MODEL = Path.home() / ".cache" / "inside-llm" / "SmolLM2-135M-Instruct.Q4_1.gguf"
OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "attach" / "llamacpp"
PORT = 8781
QUESTIONS = ["What is a GPU?", "Name a colour.", "Say hello.", "What is two plus two?", "Name a fruit.",
             "What is rain?", "Count to five.", "Name a planet."]  # fmt: skip


def start(binary: str, args: list[str]) -> tuple[subprocess.Popen, str]:
    cmd = [binary, "-m", MODEL.name, "--host", "127.0.0.1", "--port", str(PORT), *args]
    proc = subprocess.Popen(cmd, cwd=MODEL.parent, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{PORT}"
    end = time.monotonic() + 300
    while time.monotonic() < end:
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        if proc.poll() is not None:
            raise SystemExit(f"llama-server exited ({proc.returncode}) before it was ready")
        time.sleep(0.5)
    proc.terminate()
    raise SystemExit("llama-server was not ready within 300 s")


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=30)


def shown(binary: str, args: list[str]) -> str:
    return shlex.join(["llama-server", "-m", MODEL.name, "--host", "127.0.0.1", "--port", str(PORT), *args])


def save(name: str, body: bytes) -> None:
    text = body.decode("utf-8", errors="replace")
    bad = [m for m in (str(Path.home()), str(MODEL.parent), str(Path.cwd())) if m in text]
    if bad:
        raise SystemExit(f"{name} holds a machine path ({bad}): not written")
    (OUT / name).write_bytes(body)
    print(f"  {name}: {len(body):,} bytes")


def get(url: str, path: str) -> bytes:
    r = httpx.get(url + path, timeout=30)
    r.raise_for_status()
    return r.content


def gauge(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return float("nan")


def record(binary: str) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, timeout=60)
    args = ["--metrics", "--slots", "-np", "4", "-c", "2048", "-t", "2"]
    proc, url = start(binary, args)
    meta: dict = {"version": (version.stdout + version.stderr).strip(), "command": shown(binary, args)}
    try:
        for name, path in (("health.json", "/health"), ("props.json", "/props"), ("v1_models.json", "/v1/models"),
                           ("metrics_idle.txt", "/metrics"), ("slots_idle.json", "/slots")):  # fmt: skip
            save(name, get(url, path))
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=300, max_retries=0)

        def chat(q: str) -> int:
            stream = client.chat.completions.create(
                model="smollm2", messages=[{"role": "user", "content": q}], max_tokens=48, stream=True,
                temperature=0, extra_body={"ignore_eos": True}, stream_options={"include_usage": True},
            )  # fmt: skip
            return sum(1 for _ in stream)

        with ThreadPoolExecutor(len(QUESTIONS)) as pool:
            futures = [pool.submit(chat, q) for q in QUESTIONS]
            end = time.monotonic() + 300
            while time.monotonic() < end:  # all 4 slots busy and some waiting
                page = get(url, "/metrics")
                if (
                    gauge(page.decode(), "llamacpp:requests_processing") == 4
                    and gauge(page.decode(), "llamacpp:requests_deferred") >= 1
                ):
                    break
                time.sleep(0.2)
            t1 = time.time()
            save("metrics_busy_1.txt", page)
            save("slots_busy.json", get(url, "/slots"))
            # llama-server adds a request's tokens to its counters when the request ends: the second scrape waits
            # for the first wave of 4 to end (tokens_predicted_total > 0) while the second wave still runs
            while time.monotonic() < end:
                page = get(url, "/metrics")
                if gauge(page.decode(), "llamacpp:tokens_predicted_total") > 0:
                    break
                time.sleep(0.1)
            t2 = time.time()
            save("metrics_busy_2.txt", page)
            chunks = [f.result(timeout=600) for f in futures]
            t3 = time.time()
        meta["load"] = {
            "chats": len(QUESTIONS),
            "max_tokens": 48,
            "ignore_eos": True,
            "how": "8 streamed chats at once through the openai client (temperature 0), 4 slots",
            "chunks_per_chat": chunks,
            "busy_1_unix_s": round(t1, 3),
            "busy_2_unix_s": round(t2, 3),
            "busy_dt_s": round(t2 - t1, 3),
        }
        save("metrics_after.txt", get(url, "/metrics"))
        meta["load"]["after_unix_s"] = round(t3, 3)
        meta["load"]["after_dt_s"] = round(t3 - t1, 3)
        body = {"model": "smollm2", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 8,
                "temperature": 0, "stream": True, "stream_options": {"include_usage": True}}  # fmt: skip
        with httpx.stream("POST", url + "/v1/chat/completions", json=body, timeout=120) as r:
            save("chat_stream.sse", b"".join(r.iter_bytes()))
        meta["stream_request"] = body
    finally:
        stop(proc)
    (OUT / "recorded.json").write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    print(json.dumps(meta, indent=2))


def cpu_s(pid: int) -> float:
    """The process's user + system CPU seconds so far (/proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / 100.0  # utime, stime in clock ticks (USER_HZ 100)


def bench(binary: str) -> None:
    out = {}
    for threads in (1, 2):
        args = ["-np", "1", "-c", "1024", "-t", str(threads)]
        proc, url = start(binary, args)
        try:
            speeds, per_cpu = [], []
            for k in range(4):  # the first warms up, not counted
                c0 = cpu_s(proc.pid)
                r = httpx.post(url + "/v1/chat/completions", timeout=600, json={
                    "model": "smollm2", "messages": [{"role": "user", "content": f"Tell me a story, number {k}."}],
                    "max_tokens": 128, "temperature": 0, "ignore_eos": True,
                })  # fmt: skip
                cpu = cpu_s(proc.pid) - c0
                t = r.json()["timings"]
                if k:
                    speeds.append(t["predicted_per_second"])
                    per_cpu.append((t["predicted_n"] + t["prompt_n"]) / cpu if cpu else float("nan"))
                print(f"  -t {threads}: {t['predicted_n']} tokens, {t['predicted_per_second']:.1f} tokens/s, "
                      f"prompt {t['prompt_n']} tokens at {t['prompt_per_second']:.1f} tokens/s, {cpu:.2f} CPU-s, "
                      f"load {Path('/proc/loadavg').read_text().split()[0]}")  # fmt: skip
            out[threads] = {"command": shown(binary, args), "median_tokens_per_s": statistics.median(speeds),
                            "runs": speeds, "tokens_per_cpu_s_incl_prompt": per_cpu}  # fmt: skip
        finally:
            stop(proc)
    print(json.dumps(out, indent=2))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("binary", help="the llama-server binary")
    ap.add_argument("--bench", action="store_true", help="also measure single-stream decode speed, -t 1 and -t 2")
    ap.add_argument("--only-bench", action="store_true", help="only the decode speed")
    a = ap.parse_args()
    if not a.only_bench:
        record(a.binary)
    if a.bench or a.only_bench:
        bench(a.binary)
    return 0


if __name__ == "__main__":
    threading.excepthook = lambda args: print(args.exc_value, file=sys.stderr)
    sys.exit(main())
