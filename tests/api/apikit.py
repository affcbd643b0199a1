"""What the API tests share: a GET's JSON, a refusal's first error, and the same-URL-same-bytes check."""

from __future__ import annotations


def get_json(client, path: str, **query) -> dict:
    """GET path?query; asserts a 200 and returns the body."""
    r = client.get(path, params=query)
    assert r.status_code == 200, r.text
    return r.json()


def refusal(client, path: str, **query) -> dict:
    """GET path?query; asserts a 422 and returns its first error (loc, msg, ...)."""
    r = client.get(path, params=query)
    assert r.status_code == 422, r.text
    return r.json()["detail"][0]


def assert_refused(client, path: str, query: dict, field: str, words: str = "") -> None:
    """A 422 whose first error names `field` (the last part of its loc) and says `words` in its message."""
    err = refusal(client, path, **query)
    assert err["loc"][-1] == field and words in err["msg"], err


def assert_same_bytes_and_etag(client, url: str, *same_as: str):
    """url, asked again (and each URL in same_as, which spell the same query), gives the same bytes and ETag;
    that ETag gets a 304. Returns the first response."""
    first = client.get(url)
    for other in (url, *same_as):
        again = client.get(other)
        assert again.content == first.content and again.headers["etag"] == first.headers["etag"], other
    assert client.get(url, headers={"if-none-match": first.headers["etag"]}).status_code == 304
    return first


def forget_measurements(monkeypatch, module, measure, on_failure) -> None:
    """Nothing measured yet in this process: the shared measurements and module.MEASURED start empty, so each
    test measures for itself (module: an api router with a /measured endpoint; measure, on_failure: its own)."""
    from inside_llm.api import measured

    monkeypatch.setattr(measured, "_SHARED", {})
    monkeypatch.setattr(module, "MEASURED", measured.Measured(measure, 2, on_failure))
