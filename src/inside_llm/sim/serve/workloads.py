"""Request traces: prompt and output lengths (tokens) and Poisson arrival times (seconds), seeded.

Every trace comes from `numpy.random.default_rng(seed)`; nothing here keeps random state between
calls. Lengths are drawn first and arrival gaps second, so changing `rate` never changes lengths.

Distributions (a stand-in for the real datasets, which we do not ship):
- `sharegpt`: prompt and output lengths are independent lognormals whose means, after clipping to
  the maximum sequence length, equal the ShareGPT means that the PagedAttention paper reports
  (161 prompt / 338 output tokens; Kwon et al., SOSP 2023, section 6.1 and Fig. 11). ShareGPT is
  heavy-tailed (long conversations), so sigma is 1.0: a few requests are ten times the mean.
- `alpaca`: the same shape with the paper's Alpaca means (19 / 58 tokens), narrower (sigma 0.6 / 0.8):
  short single-turn instructions.
- `fixed`: every request has the same lengths (default 161 / 338, ShareGPT's means without spread).
Clipping: 1 <= prompt <= max_seq_len - 1 and 1 <= output <= max_seq_len - prompt, so every
request fits in `max_seq_len` tokens of KV cache (the model's context window).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

MAX_NUM_REQUESTS = 10_000
MAX_SEQ_LEN_BOUNDS = (16, 32_768)
PAPER = "Kwon et al., Efficient Memory Management for LLM Serving with PagedAttention, SOSP 2023, §6.1, Fig. 11"


@dataclass(frozen=True)
class LengthDist:
    """Lognormal length distribution: target mean (after clipping) in tokens and log-space sigma."""

    prompt_mean: float
    output_mean: float
    prompt_sigma: float
    output_sigma: float
    source: str = PAPER


WORKLOADS: dict[str, LengthDist | None] = {
    "sharegpt": LengthDist(161.0, 338.0, 1.0, 1.0),
    "alpaca": LengthDist(19.0, 58.0, 0.6, 0.8),
    "fixed": None,
}
FIXED_PROMPT_TOKENS, FIXED_OUTPUT_TOKENS = 161, 338


@dataclass(frozen=True)
class Trace:
    """One request per index, in arrival order. Request id == index.

    arrival_s: float64 [N], non-decreasing, seconds from t=0 (all zeros when rate is None).
    num_prompt_tokens, num_output_tokens: int64 [N], each >= 1, and their sum <= max_seq_len.
    """

    workload: str
    seed: int
    max_seq_len: int
    rate: float | None
    arrival_s: np.ndarray
    num_prompt_tokens: np.ndarray
    num_output_tokens: np.ndarray

    @property
    def num_requests(self) -> int:
        return int(self.num_prompt_tokens.shape[0])

    def summary(self) -> dict:
        """Means and maxima actually drawn, next to the distribution they came from."""
        return {
            "workload": self.workload,
            "seed": self.seed,
            "num_requests": self.num_requests,
            "max_seq_len": self.max_seq_len,
            "rate_per_s": self.rate,
            "prompt_tokens_mean": float(self.num_prompt_tokens.mean()),
            "output_tokens_mean": float(self.num_output_tokens.mean()),
            "prompt_tokens_max": int(self.num_prompt_tokens.max()),
            "output_tokens_max": int(self.num_output_tokens.max()),
            "distribution": describe_workload(self.workload),
        }


def describe_workload(workload: str) -> dict:
    """The distribution behind a workload name, with the paper means it is calibrated to."""
    _check_workload(workload)
    dist = WORKLOADS[workload]
    if dist is None:
        return {"kind": "fixed", "prompt_tokens": FIXED_PROMPT_TOKENS, "output_tokens": FIXED_OUTPUT_TOKENS}
    return {
        "kind": "lognormal, clipped to max_seq_len",
        "prompt_mean_tokens": dist.prompt_mean,
        "output_mean_tokens": dist.output_mean,
        "prompt_sigma": dist.prompt_sigma,
        "output_sigma": dist.output_sigma,
        "source": dist.source,
    }


def _check_workload(workload: str) -> None:
    if workload not in WORKLOADS:
        raise ValueError(f"workload must be one of {tuple(WORKLOADS)}, got {workload!r}")


def _clipped_lognormal_mean(mu: float, sigma: float, cap: float) -> float:
    """E[min(X, cap)] for X ~ LogNormal(mu, sigma): partial expectation plus the clipped mass."""
    phi = lambda z: 0.5 * (1.0 + math.erf(z / math.sqrt(2.0)))  # noqa: E731 (standard normal CDF)
    log_cap = math.log(cap)
    below = math.exp(mu + sigma * sigma / 2) * phi((log_cap - mu - sigma * sigma) / sigma)
    return below + cap * (1.0 - phi((log_cap - mu) / sigma))


def calibrated_mu(mean: float, sigma: float, cap: float) -> float:
    """The log-space mu whose lognormal, clipped at `cap`, has the given mean (bisection, 60 steps)."""
    lo, hi = math.log(mean) - 5 * sigma * sigma, math.log(cap) + 5 * sigma
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if _clipped_lognormal_mean(mid, sigma, cap) < mean else (lo, mid)
    return 0.5 * (lo + hi)


def _draw_lengths(
    dist: LengthDist, n: int, max_seq_len: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """Prompt then output lengths; output is clipped to the room the prompt leaves."""
    mu_p = calibrated_mu(dist.prompt_mean, dist.prompt_sigma, max_seq_len - 1)
    # The output's cap depends on its prompt; calibrate against the cap left by a mean prompt.
    mu_o = calibrated_mu(dist.output_mean, dist.output_sigma, max_seq_len - dist.prompt_mean)
    prompt = np.rint(rng.lognormal(mu_p, dist.prompt_sigma, n)).astype(np.int64)
    prompt = np.clip(prompt, 1, max_seq_len - 1)
    output = np.rint(rng.lognormal(mu_o, dist.output_sigma, n)).astype(np.int64)
    output = np.clip(output, 1, max_seq_len - prompt)
    return prompt, output


def make_trace(
    workload: str = "sharegpt",
    num_requests: int = 200,
    seed: int = 0,
    rate: float | None = None,
    max_seq_len: int = 2048,
) -> Trace:
    """A seeded request trace. rate: Poisson arrivals per second, or None for all at t=0.

    Raises ValueError naming the parameter and its bound: num_requests in [1, 10000],
    max_seq_len in [16, 32768], rate > 0 (and finite), workload in WORKLOADS.
    """
    _check_workload(workload)
    check_int("num_requests", num_requests, 1, MAX_NUM_REQUESTS)
    check_int("max_seq_len", max_seq_len, *MAX_SEQ_LEN_BOUNDS)
    if rate is not None and not (math.isfinite(rate) and rate > 0):
        raise ValueError(f"rate must be > 0 requests/s and finite, got {rate!r}")
    rng = np.random.default_rng(seed)
    dist = WORKLOADS[workload]
    if dist is None:
        prompt = np.full(num_requests, min(FIXED_PROMPT_TOKENS, max_seq_len - 1), dtype=np.int64)
        output = np.clip(np.full(num_requests, FIXED_OUTPUT_TOKENS, dtype=np.int64), 1, max_seq_len - prompt)
    else:
        prompt, output = _draw_lengths(dist, num_requests, max_seq_len, rng)
    if rate is None:
        arrival = np.zeros(num_requests)
    else:
        arrival = np.cumsum(rng.exponential(1.0 / rate, num_requests))  # Poisson: exponential gaps
    return Trace(workload, int(seed), max_seq_len, rate, arrival, prompt, output)


def check_int(name: str, value: int, lo: int, hi: int) -> None:
    """ValueError naming the parameter and its bound unless value is an int in [lo, hi]."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not lo <= value <= hi:
        raise ValueError(f"{name} must be an integer in [{lo}, {hi}], got {value!r}")


def check_subset(name: str, values: tuple[str, ...], allowed: tuple[str, ...]) -> None:
    """ValueError naming the parameter unless values is a non-empty subset of allowed."""
    if not values or any(v not in allowed for v in values):
        raise ValueError(f"{name} must be a non-empty subset of {allowed}, got {values!r}")
