"""A cold start never blocks the event loop: while the model loads, chats answer 503 in words (issue 23, M6)."""

from __future__ import annotations

import threading
import time

from inside_llm import modelfile


def test_chats_answer_503_with_retry_after_while_the_model_loads(client, monkeypatch):
    release, started = threading.Event(), threading.Event()

    def slow_load():  # a cache rebuild (about half a minute on this machine) stood in for by a wait
        started.set()
        release.wait(30)
        return None  # then the toy serves

    monkeypatch.setattr(modelfile, "_load", slow_load)
    monkeypatch.setenv("INSIDE_LLM_CACHE", str(modelfile.cache_dir() / "never-loaded-here"))
    modelfile.start_loading()
    assert started.wait(10)
    try:
        for url in ("/api/generate?prompt=Hi&max_tokens=2", "/api/engine", "/api/engine/feed"):
            t0 = time.perf_counter()
            r = client.get(url)
            assert r.status_code == 503, url
            assert time.perf_counter() - t0 < 5, "answered at once, not after the load"
            assert int(r.headers["retry-after"]) == modelfile.LOADING_RETRY_S
            assert "still loading" in r.json()["detail"] and "try again in" in r.json()["detail"]
        assert client.post("/api/engine/demo").status_code == 503
        assert client.get("/healthz").status_code == 200
        assert client.get("/api/generate?prompt=Hi&max_tokens=2&model=toy").status_code == 200  # the toy needs no load
    finally:
        release.set()
        modelfile._loader[-1].join(10)
    assert client.get("/api/engine").status_code == 200  # loaded (here: the toy)
    modelfile._served.pop(str(modelfile.cache_dir()), None)  # only this test's stand-in
