"""Prometheus exposition text read into plain numbers, and a histogram's quantile as Prometheus computes it.

`parse(text)` reads one scrape with prometheus_client's own text parser into a `Scrape`: every sample by its
sample name (`vllm:prompt_tokens_total`, `..._bucket`), each with its labels. A page that is not exposition text
raises `Garbled` with what was wrong, in words. llama.cpp once served its /metrics as one JSON string
(ggml-org/llama.cpp#17384), so a body that is a quoted string is unquoted first.

Every reading sums over the series of a name (all models, workers, engines of the server), as `sum()` does in
PromQL; a histogram's buckets are summed per upper bound. `histogram_quantile(q, buckets)` is Prometheus'
`bucketQuantile` (promql/quantile.go): buckets sorted by upper bound, a missing +Inf bucket gives no answer (NaN
there, None here), rank = q x the +Inf count, linear interpolation inside the bucket the rank falls in (from 0
for the lowest bucket when its bound is positive), and a rank in the +Inf bucket answers the highest finite bound.
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.parser import text_string_to_metric_families

MAX_SAMPLES = 50_000  # series in one scrape (vLLM with every histogram is ~1,000); past this the page is refused


class Garbled(ValueError):
    """The page is not Prometheus exposition text; the message says why."""


@dataclass(frozen=True)
class Sample:
    labels: dict[str, str]
    value: float


class Scrape:
    """One scrape: sample name -> its samples."""

    def __init__(self, samples: dict[str, list[Sample]]):
        self.samples = samples

    @property
    def names(self) -> set[str]:
        return set(self.samples)

    def has(self, name: str) -> bool:
        return name in self.samples

    def total(self, name: str) -> float | None:
        """The sum over every series of `name`, or None when the page has no such sample."""
        got = self.samples.get(name)
        if not got:
            return None
        values = [s.value for s in got if not math.isnan(s.value)]
        return float(sum(values)) if values else None

    def labels(self, name: str, key: str) -> list[str]:
        """The distinct values of label `key` on `name`'s series, in page order."""
        out: list[str] = []
        for s in self.samples.get(name, ()):
            v = s.labels.get(key)
            if v is not None and v not in out:
                out.append(v)
        return out

    def buckets(self, family: str) -> list[tuple[float, float]] | None:
        """Histogram `family`'s cumulative buckets [(le, count)], summed over its series per le, sorted by le;
        None when the page has none."""
        got = self.samples.get(family + "_bucket")
        if not got:
            return None
        by_le: dict[float, float] = {}
        for s in got:
            try:
                le = float(s.labels.get("le", "nan"))
            except ValueError:
                continue
            if math.isnan(le) or math.isnan(s.value):
                continue
            by_le[le] = by_le.get(le, 0.0) + s.value
        return sorted(by_le.items()) or None


def _unquote(text: str) -> str:
    t = text.strip()
    if len(t) >= 2 and t[0] == '"' and t[-1] == '"':
        try:
            inner = json.loads(t)
        except ValueError:
            return text
        if isinstance(inner, str):
            return inner
    return text


def parse(text: str) -> Scrape:
    """One page of exposition text as a Scrape; Garbled (in words) when it is not one."""
    text = _unquote(text)
    if "\x00" in text:
        raise Garbled("The page holds NUL bytes: it is not Prometheus exposition text.")
    if not text.strip():
        raise Garbled("The page is empty: no metrics at all.")
    samples: dict[str, list[Sample]] = {}
    n = 0
    try:
        for fam in text_string_to_metric_families(text):
            for s in fam.samples:
                n += 1
                if n > MAX_SAMPLES:
                    raise Garbled(f"The page has more than {MAX_SAMPLES:,} samples: refused as too big to read.")
                samples.setdefault(s.name, []).append(Sample(dict(s.labels), float(s.value)))
    except Garbled:
        raise
    except Exception as e:  # the parser raises ValueError, IndexError, ... on a broken line
        first = next((ln for ln in text.splitlines() if ln.strip()), "")[:60]
        raise Garbled(
            f"The page is not Prometheus exposition text ({type(e).__name__}); it starts with {first!r}."
        ) from None
    if not samples:
        raise Garbled("The page has no samples: only comments or blank lines.")
    return Scrape(samples)


def histogram_quantile(q: float, buckets: Iterable[tuple[float, float]] | None) -> float | None:
    """Prometheus' histogram_quantile over cumulative buckets [(le, count)]; None where Prometheus gives NaN
    (no +Inf bucket, fewer than two buckets, no observations)."""
    if buckets is None or math.isnan(q):
        return None
    if q < 0:
        return -math.inf
    if q > 1:
        return math.inf
    bs = sorted(buckets)
    merged: list[list[float]] = []
    for le, c in bs:  # buckets of one upper bound are one bucket
        if merged and merged[-1][0] == le:
            merged[-1][1] += c
        else:
            merged.append([le, c])
    if len(merged) < 2 or not math.isinf(merged[-1][0]):
        return None
    for i in range(1, len(merged)):  # cumulative counts never fall (Prometheus' ensureMonotonic)
        merged[i][1] = max(merged[i][1], merged[i - 1][1])
    observations = merged[-1][1]
    if observations <= 0:
        return None
    rank = q * observations
    b = next(i for i, (_, c) in enumerate(merged) if c >= rank)
    if b == len(merged) - 1:
        return merged[-2][0]
    if b == 0 and merged[0][0] <= 0:
        return merged[0][0]
    start, end, count = 0.0, merged[b][0], merged[b][1]
    if b > 0:
        start = merged[b - 1][0]
        count -= merged[b - 1][1]
        rank -= merged[b - 1][1]
    return start + (end - start) * (rank / count) if count > 0 else start


def bucket_delta(
    now: list[tuple[float, float]] | None, then: list[tuple[float, float]] | None
) -> list[tuple[float, float]] | None:
    """The observations between two scrapes, per bucket (rate() over the window, times its length). A count
    that fell means the server restarted: the newer page alone is the window, as rate() treats a reset."""
    if now is None:
        return None
    if then is None:
        return now
    old = dict(then)
    if any(c < old.get(le, 0.0) for le, c in now):
        return now
    return [(le, c - old.get(le, 0.0)) for le, c in now]


def counter_delta(now: float | None, then: float | None) -> float | None:
    """A counter's increase between two scrapes (a fall is a restart: the newer value is the increase)."""
    if now is None or then is None:
        return None
    return now if now < then else now - then
