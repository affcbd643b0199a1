"""Record the tour's own /metrics after a few real chats, as tests/fixtures/attach/inside_llm_own.txt.

Runs the app on a loopback port in a thread, streams a few short chats through /v1/chat/completions with the
official openai client, scrapes /metrics, and writes it with a header saying how it was made. Run:
    PYTHONPATH=src .venv/bin/python scripts/record_attach_fixture.py
"""

from __future__ import annotations

import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import openai
import uvicorn

from inside_llm import __version__
from inside_llm.app import create_app

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "attach" / "inside_llm_own.txt"
QUESTIONS = ["What is a GPU?", "Name a colour.", "Say hello.", "What is two plus two?"]


def main() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(), host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    url = f"http://127.0.0.1:{port}"
    client = openai.OpenAI(base_url=f"{url}/v1", api_key="none", timeout=120)

    def chat(q: str) -> int:
        stream = client.chat.completions.create(
            model="smollm2", messages=[{"role": "user", "content": q}], max_tokens=8, stream=True, seed=1
        )
        return sum(1 for _ in stream)

    with ThreadPoolExecutor(2) as pool:
        chunks = list(pool.map(chat, QUESTIONS))
    text = httpx.get(f"{url}/metrics", timeout=60).text
    server.should_exit = True
    header = (
        f"# Recorded from inside-llm {__version__} (its own engine, SmolLM2-135M-Instruct on CPU) by\n"
        f"# scripts/record_attach_fixture.py: {len(QUESTIONS)} streamed chats of at most 8 tokens through\n"
        "# /v1/chat/completions, two at a time, then one GET /metrics. Process and GC series as served.\n"
    )
    OUT.write_text(header + text, encoding="utf-8")
    print(f"wrote {OUT.name}: {len(text):,} bytes; chunks per chat {chunks}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
