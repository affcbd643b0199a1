"""The dials inverted: the largest batch that meets a latency, the longest context that fits, the fewest GPUs for N users.

Each answer is a `Solution`: the setup to adopt (ServingParams), the value found, and `binding`, the constraint
that stops it from going further ("memory", "ttft", "tokens_per_s_per_user", "batch_limit", "context_window",
"gpu_limit"), with a sentence. An ask that nothing satisfies is `feasible=False` and `binding` says which
constraint fails even at the smallest setup. TTFT grows and tokens/s per user falls with the batch, and memory
grows with batch and context, so each search is a bisection over the estimate (sim/cost/serving.py).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from ..core.errors import SimError
from .costmodel import max_batch, memory_per_gpu
from .serving import MAX_BATCH, MAX_GPUS, ServingParams, estimate, resolve

TP_OPTIONS = (1, 2, 4, 8, 16, 32, 64)
ASKS = ("batch", "context", "gpus")


@dataclass(frozen=True)
class Solution:
    ask: str
    feasible: bool
    value: int | None
    params: ServingParams | None  # the setup to adopt (None when infeasible)
    binding: str
    text: str


def _meets(p: ServingParams, max_ttft_ms: float | None, min_tps_user: float | None) -> str:
    """'' when p fits and meets both limits, else the name of the first constraint it breaks."""
    e = estimate(p)
    if not e.fits:
        return "memory"
    if max_ttft_ms is not None and e.ttft_ms > max_ttft_ms:
        return "ttft"
    if min_tps_user is not None and e.tokens_per_s_per_user < min_tps_user:
        return "tokens_per_s_per_user"
    return ""


LIMIT = {"ttft": "time-to-first-token", "tokens_per_s_per_user": "tokens/s-per-user", "memory": "memory"}
WHY = {
    "memory": "the KV cache of one more sequence does not fit in memory",
    "ttft": "the time to first token would pass the limit",
    "tokens_per_s_per_user": "each user's tokens/s would fall below the limit",
    "batch_limit": f"the dials stop at {MAX_BATCH:,} sequences",
    "prompt_limit": "the prompt-length range asked for ends there",
}


def largest_batch(
    p: ServingParams, max_ttft_ms: float | None = None, min_tokens_per_s_per_user: float | None = None
) -> Solution:
    """The largest batch (per replica) that fits and meets both limits, everything else as in p."""
    cfg, _ = resolve(p)
    cap = min(max_batch(cfg, p.prompt_tokens + p.output_tokens), MAX_BATCH)
    if cap < 1:
        return Solution("batch", False, None, None, "memory", "Not even one sequence of this length fits in memory.")
    first = _meets(replace(p, batch=1), max_ttft_ms, min_tokens_per_s_per_user)
    if first:
        e = estimate(replace(p, batch=1))
        got = {"ttft": f"{e.ttft_ms:,.0f} ms", "tokens_per_s_per_user": f"{e.tokens_per_s_per_user:,.1f} tokens/s"}
        return Solution(
            "batch", False, None, None, first,
            f"Infeasible: even one request breaks the {LIMIT[first]} limit (batch 1 gives {got.get(first, 'no room')}).",
        )  # fmt: skip
    lo, hi = 1, cap
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if _meets(replace(p, batch=mid), max_ttft_ms, min_tokens_per_s_per_user):
            hi = mid - 1
        else:
            lo = mid
    if lo == MAX_BATCH:
        binding = "batch_limit"
    elif lo == cap:
        binding = "memory"
    else:
        binding = _meets(replace(p, batch=lo + 1), max_ttft_ms, min_tokens_per_s_per_user) or "memory"
    return Solution("batch", True, lo, replace(p, batch=lo), binding, f"Batch {lo:,}: beyond it {WHY[binding]}.")


def longest_context(p: ServingParams, max_prompt_tokens: int | None = None) -> Solution:
    """The longest prompt (output length as in p, at most max_prompt_tokens when given: a control's range) whose
    batch of p.batch sequences fits in memory."""
    cfg, _ = resolve(p)
    model_window = cfg.model.max_position_embeddings - p.output_tokens
    window = model_window if max_prompt_tokens is None else min(model_window, max_prompt_tokens)
    if window < 1 or not memory_per_gpu(cfg, p.batch, 1 + p.output_tokens).fits:
        return Solution(
            "context", False, None, None, "memory",
            f"Infeasible: {p.batch:,} sequences do not fit in memory even with a 1-token prompt.",
        )  # fmt: skip
    lo, hi = 1, window
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if memory_per_gpu(cfg, p.batch, mid + p.output_tokens).fits:
            lo = mid
        else:
            hi = mid - 1
    binding = "memory" if lo < window else "context_window" if window == model_window else "prompt_limit"
    why = f"{cfg.model.name}'s window ends there" if binding == "context_window" else WHY[binding]
    text = f"Prompts of {lo:,} tokens (+{p.output_tokens:,} out) at batch {p.batch:,}: beyond that {why}."
    return Solution("context", True, lo, replace(p, prompt_tokens=lo), binding, text)


def fewest_gpus(
    p: ServingParams,
    users: int,
    max_ttft_ms: float | None = None,
    min_tokens_per_s_per_user: float | None = None,
    counts: tuple[int, ...] | None = None,
) -> Solution:
    """The fewest GPUs (replicas of tp GPUs, pp = 1) that serve `users` concurrent requests within both limits.

    counts: the server sizes allowed (a GPU menu, e.g. the dials'); the answer is then the smallest of them that
    holds enough replicas (and is a multiple of tp). None: any whole number of replicas up to MAX_GPUS."""
    if not 1 <= users <= MAX_GPUS * MAX_BATCH:
        raise SimError("users", f"The users must be between 1 and {MAX_GPUS * MAX_BATCH:,}, not {users!r}.")
    best: tuple[int, int, int, int, str] | None = None  # (gpus, tp, replicas, batch, binding)
    last = "memory"
    for tp in TP_OPTIONS:
        if tp > MAX_GPUS:
            break
        try:
            s = largest_batch(replace(p, gpus=tp, tp=tp, pp=1), max_ttft_ms, min_tokens_per_s_per_user)
        except SimError:
            continue  # tp does not divide the model's heads
        if not s.feasible or s.value is None:
            last = s.binding
            continue
        replicas = math.ceil(users / s.value)
        gpus = replicas * tp
        if counts is not None:
            gpus = min((c for c in counts if c >= gpus and c % tp == 0), default=MAX_GPUS + 1)
            replicas = gpus // tp
        if gpus > MAX_GPUS:
            last = "gpu_limit"
            continue
        if best is None or (gpus, tp) < best[:2]:
            best = (gpus, tp, replicas, math.ceil(users / replicas), s.binding)
    if best is None:
        top = MAX_GPUS if counts is None else max(counts)
        why = {"gpu_limit": f"more than {top} GPUs would be needed"}.get(last, WHY.get(last, last))
        return Solution("gpus", False, None, None, last, f"Infeasible for {users:,} users: {why}.")
    gpus, tp, replicas, batch, binding = best
    adopt = replace(p, gpus=gpus, tp=tp, pp=1, batch=batch)
    text = (
        f"{gpus} GPU{'s' if gpus > 1 else ''}: {replicas} replica{'s' if replicas > 1 else ''} of tp {tp}, {batch:,} "
        f"user{'s' if batch > 1 else ''} each "
        f"(a replica takes no more because {WHY[binding]})."
    )
    return Solution("gpus", True, gpus, adopt, binding, text)


# ---- sweeps ---------------------------------------------------------------------------------------

SWEEP_AXES = ("batch", "prompt_tokens", "gpus", "precision")
SWEEP_PRECISIONS = ("bf16", "fp8", "int8", "int4", "nvfp4")


def sweep_values(p: ServingParams, axis: str) -> list:
    """The x values a sweep of `axis` visits for p: powers of two up to the dials' bounds (and the model's window)."""
    if axis == "batch":
        return [2**i for i in range(13)]  # 1..4,096
    if axis == "prompt_tokens":
        cfg, _ = resolve(p)
        top = cfg.model.max_position_embeddings - p.output_tokens
        return [2**i for i in range(7, 21) if 2**i <= top] or [top]
    if axis == "gpus":
        unit = p.tp * p.pp
        return [unit * k for k in (1, 2, 4, 8, 16) if unit * k <= MAX_GPUS]
    if axis == "precision":
        return list(SWEEP_PRECISIONS)
    raise SimError("x", f"The swept input must be one of {', '.join(SWEEP_AXES)}, not {axis!r}.")


def sweep(p: ServingParams, axis: str, values: list | None = None) -> list[tuple[object, ServingParams]]:
    """(x, setup) for each value of `axis`, everything else as in p (for gpus: more replicas of the same tp x pp)."""
    xs = sweep_values(p, axis) if values is None else values
    return [(x, replace(p, **{axis: x})) for x in xs]
