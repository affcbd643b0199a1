"""The servers this tour attaches to, named by its operator only: `inside-llm serve --attach NAME=URL` (repeatable)
and the environment variable INSIDE_LLM_ATTACH ("NAME=URL NAME=URL", spaces or commas between entries).

A visitor never names a URL: no request parameter reaches the network (SSRF); pages and the API refer to a target
by its NAME, and a name outside this list is refused in words. The URL is the server's base (`http://host:8000`);
its metrics are read at URL/metrics, or at URL itself when its path already ends in /metrics (NIM serves
/v1/metrics). No credentials in the URL, no query or fragment, http or https only.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from urllib.parse import urlsplit

ENV = "INSIDE_LLM_ATTACH"
MAX_TARGETS = 8
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,31}$")
NAME_RULE = "1-32 letters, digits, '.', '_' or '-', starting with a letter or digit"


@dataclass(frozen=True)
class Target:
    name: str
    base_url: str  # no trailing slash: /v1/... is appended to it
    metrics_url: str


def parse_target(entry: str) -> Target:
    """One NAME=URL entry; ValueError in words when it is not one."""
    name, sep, url = entry.strip().partition("=")
    if not sep or not name or not url:
        raise ValueError(f"An attached server is given as NAME=URL (e.g. vllm=http://127.0.0.1:8000), not {entry!r}.")
    if not NAME_RE.match(name):
        raise ValueError(f"The attached server's name {name!r} must be {NAME_RULE}.")
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https"):
        raise ValueError(f"The URL of {name!r} must start with http:// or https://, not {url!r}.")
    if not parts.hostname:
        raise ValueError(f"The URL of {name!r} names no host: {url!r}.")
    if parts.username or parts.password:
        raise ValueError(f"The URL of {name!r} must not carry credentials (user:password@).")
    if parts.query or parts.fragment:
        raise ValueError(f"The URL of {name!r} must have no query (?...) or fragment (#...).")
    try:
        parts.port  # noqa: B018 (a port out of range raises here)
    except ValueError:
        raise ValueError(f"The URL of {name!r} has a port out of range: {url!r}.") from None
    path = parts.path.rstrip("/")
    origin = f"{parts.scheme}://{parts.netloc}"
    if path.endswith("/metrics"):
        metrics = origin + path
        base = origin + path.removesuffix("/metrics").removesuffix("/v1")
    else:
        metrics, base = f"{origin}{path}/metrics", origin + path
    return Target(name, base, metrics)


def parse_targets(entries: list[str] | tuple[str, ...]) -> tuple[Target, ...]:
    """Every entry (each may hold several, split by spaces or commas); ValueError in words on a bad or duplicate
    one, or more than MAX_TARGETS."""
    out: list[Target] = []
    for chunk in entries:
        for entry in re.split(r"[\s,]+", chunk.strip()):
            if not entry:
                continue
            t = parse_target(entry)
            if any(o.name == t.name for o in out):
                raise ValueError(f"Two attached servers are named {t.name!r}: each needs its own name.")
            out.append(t)
    if len(out) > MAX_TARGETS:
        raise ValueError(f"At most {MAX_TARGETS} servers can be attached, not {len(out)}.")
    return tuple(out)


MEASURE_ENV = "INSIDE_LLM_ATTACH_MEASURE"


def parse_measure(value: str | None, targets: tuple[Target, ...]) -> tuple[str, ...]:
    """Which attached servers the tour may start measure runs against (`serve --attach-measure [NAMES]`):
    '*' (the flag alone) for all of them, else their names split by spaces or commas; empty for none. ValueError in
    words for a name no server has."""
    names = [n for n in re.split(r"[\s,]+", (value or "").strip()) if n]
    if "*" in names:
        return tuple(t.name for t in targets)
    known = {t.name for t in targets}
    for n in names:
        if n not in known:
            there = ", ".join(sorted(known)) or "none (add --attach NAME=URL)"
            raise ValueError(f"--attach-measure names {n!r}, which is not an attached server (attached: {there}).")
    return tuple(dict.fromkeys(names))
