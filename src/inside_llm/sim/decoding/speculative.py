"""Speculative decoding: a small draft model guesses, the big model checks all guesses in one pass.

Analytic part: Leviathan, Kalman & Matias, "Fast Inference from Transformers via Speculative
Decoding", ICML 2023 (arXiv:2211.17192). With per-token acceptance probability alpha, draft length
gamma and cost ratio c = (one draft pass time) / (one target pass time) (Definition 3.7):
  expected tokens per target pass  E = (1 - alpha^(gamma+1)) / (1 - alpha)          (Equation 1)
  expected wall-time improvement   S = E / (gamma*c + 1)                             (Theorem 3.8)

Real part, model-agnostic. A model is a callable `forward(ids, cache) -> logits[T, V]`: it appends the
T new token ids to `cache` and returns, for each of them, the logits of the token that follows it.
A cache must support `len(cache)` (tokens it holds) and `cache.truncate(n)` (keep the first n tokens):
rejected draft tokens have been written into both caches and must be rolled back. Forward is only ever
called with the tokens the cache is missing, so a cache always holds a prefix of the real sequence.
A draft may guess fewer than gamma tokens: a last row of logits with no finite value means "no guess"
(sim/decoding/draft_lookup.py's n-gram draft, when the text so far holds no earlier match); the target then
checks the guesses made so far, or makes a plain pass.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from inside_llm.sim.core.derivation import Derivation, derive
from inside_llm.sim.core.result import about

LEVIATHAN = ("Leviathan, Kalman & Matias, Fast Inference from Transformers via Speculative Decoding, "
             "ICML 2023, arXiv:2211.17192")
CURVE_GAMMAS = range(1, 11)
MAX_GAMMA = 64


class Cache(Protocol):
    def __len__(self) -> int: ...
    def truncate(self, n: int) -> None: ...


Forward = Callable[[list[int], Any], np.ndarray]   # (new ids, cache) -> logits [len(ids), vocab]


# ---- analytic -------------------------------------------------------------------------------------

def _check(alpha: float, gamma: int, cost_ratio: float) -> None:
    if not 0.0 <= alpha <= 1.0 or gamma < 0 or cost_ratio < 0:
        raise ValueError("need 0 <= alpha <= 1, gamma >= 0, cost_ratio >= 0")


def expected_tokens_per_pass(alpha: float, gamma: int) -> float:
    """Leviathan Eq. 1: mean tokens emitted per target pass, a geometric count capped at gamma + 1."""
    _check(alpha, gamma, 0.0)
    return float(gamma + 1) if alpha == 1.0 else (1.0 - alpha ** (gamma + 1)) / (1.0 - alpha)


def speedup(alpha: float, gamma: int, cost_ratio: float) -> float:
    """Leviathan Theorem 3.8: each step costs gamma draft passes (c*T each) plus one target pass (T)."""
    _check(alpha, gamma, cost_ratio)
    return expected_tokens_per_pass(alpha, gamma) / (gamma * cost_ratio + 1.0)


def optimal_gamma(alpha: float, cost_ratio: float, max_gamma: int = MAX_GAMMA) -> int:
    """The integer gamma in 1..max_gamma that maximises the wall-time improvement (paper Sec. 3.5)."""
    return max(range(1, max_gamma + 1), key=lambda g: speedup(alpha, g, cost_ratio))


def alpha_from_tokens_per_pass(tokens_per_pass: float, gamma: int) -> float:
    """Invert Eq. 1 by bisection: the alpha whose expected tokens per pass equals the measured mean."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens_per_pass(mid, gamma) < tokens_per_pass else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Analytic:
    """Leviathan's expected tokens per target pass and speed-up at alpha, gamma and c, and over gamma."""

    alpha: float = about("Acceptance rate: chance the target keeps a draft token (probability).")
    gamma: int = about("Draft tokens per check.")
    cost_ratio: float = about("c: one draft pass / one target pass (time).")
    expected_tokens_per_pass: float = about("E = (1 - alpha^(gamma+1)) / (1 - alpha): tokens per target pass.")
    speedup: float = about("E / (gamma * c + 1): wall time of plain decoding / speculative decoding.")
    optimal_gamma: int = about(f"The gamma in 1..{MAX_GAMMA} with the largest speed-up at this alpha and c.")
    optimal_speedup: float = about("The speed-up at optimal_gamma.")
    curve: list[dict[str, float]] = about(
        f"gamma = {CURVE_GAMMAS[0]}..{CURVE_GAMMAS[-1]}: gamma, expected_tokens_per_pass and speedup at each.")
    math: dict[str, Derivation] = about("Show-the-math: each headline field's name -> how it was computed.")


def analytic(alpha: float, gamma: int, cost_ratio: float) -> Analytic:
    """Headline numbers, a curve over gamma = 1..10 for the stage, the best gamma, and the math."""
    e, s = expected_tokens_per_pass(alpha, gamma), speedup(alpha, gamma, cost_ratio)
    best = optimal_gamma(alpha, cost_ratio)
    ins = {"alpha": (alpha, "probability a draft token is accepted"), "gamma": (gamma, "draft tokens/step"),
           "c": (cost_ratio, "draft pass time / target pass time")}
    iid = "acceptances are independent with the same probability alpha (the paper's simplification)"
    math = {
        "expected_tokens_per_pass": derive(
            e, "tokens/target pass", "(1 - alpha^(gamma+1)) / (1 - alpha); gamma + 1 when alpha = 1",
            {k: ins[k] for k in ("alpha", "gamma")}, [iid], [f"{LEVIATHAN}, Equation 1"]),
        "speedup": derive(
            s, "x", "E / (gamma * c + 1)", {"E": (e, "tokens/target pass"), **ins},
            [iid, "one target pass over gamma + 1 tokens takes as long as one decode step (memory-bound)",
             "plain decoding emits one token per target pass"], [f"{LEVIATHAN}, Theorem 3.8"]),
        "optimal_gamma": derive(
            best, "draft tokens/step", f"argmax over gamma in 1..{MAX_GAMMA} of E(gamma) / (gamma * c + 1)",
            {k: ins[k] for k in ("alpha", "c")}, [iid], [f"{LEVIATHAN}, Section 3.5"]),
    }
    curve = [{"gamma": g, "expected_tokens_per_pass": expected_tokens_per_pass(alpha, g),
              "speedup": speedup(alpha, g, cost_ratio)} for g in CURVE_GAMMAS]
    return Analytic(alpha=alpha, gamma=gamma, cost_ratio=cost_ratio, expected_tokens_per_pass=e, speedup=s,
                    optimal_gamma=best, optimal_speedup=speedup(alpha, best, cost_ratio), curve=curve, math=math)


# ---- the real loop --------------------------------------------------------------------------------

@dataclass
class SpecResult:
    """Output of a speculative run. Counts exclude the prompt; the prefill is target pass number one."""

    output_ids: list[int] = field(default_factory=list)
    num_proposed: int = 0          # draft tokens shown to the target
    num_accepted: int = 0          # of those, kept
    num_rejected: int = 0          # steps that ended at a mismatch (each rejects exactly one draft)
    num_target_passes: int = 0
    num_draft_passes: int = 0
    target_time_s: float = 0.0     # perf_counter seconds inside target forward calls
    draft_time_s: float = 0.0
    wall_time_s: float = 0.0       # the whole loop, bookkeeping included
    draft_pass_s: list[float] = field(default_factory=list)
    frames: list[dict] = field(default_factory=list)

    @property
    def acceptance_rate(self) -> float:
        """Accepted drafts / proposed drafts (drafts after the first mismatch count as not accepted)."""
        return self.num_accepted / self.num_proposed if self.num_proposed else 0.0

    @property
    def alpha_estimate(self) -> float:
        """Accepted / judged: the per-token acceptance probability alpha, counting only drafts the
        target actually ruled on (the accepted ones and the first rejected one of each step)."""
        judged = self.num_accepted + self.num_rejected
        return self.num_accepted / judged if judged else 0.0

    def to_dict(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items()}
        d.update(acceptance_rate=self.acceptance_rate, alpha_estimate=self.alpha_estimate)
        return d


def _timed(fn: Forward, ids: list[int], cache: Any) -> tuple[np.ndarray, float]:
    t0 = time.perf_counter()
    out = np.asarray(fn(ids, cache))
    return out, time.perf_counter() - t0


def _argmax(row: np.ndarray, rng: np.random.Generator | None) -> tuple[int, None]:
    return int(np.argmax(row)), None


def _verify_greedy(p_rows: np.ndarray, drafts: list[int], q_rows: list, rng) -> tuple[int, int]:
    """Keep the drafts that equal the target's argmax; at the first mismatch emit the target's token."""
    best = np.argmax(p_rows, axis=-1)
    k = 0
    while k < len(drafts) and drafts[k] == best[k]:
        k += 1
    return k, int(best[k])


def _probs(row: np.ndarray, temperature: float) -> np.ndarray:
    z = np.asarray(row, np.float64) / temperature
    z = np.exp(z - z.max())
    return z / z.sum()


def _draw(p: np.ndarray, rng: np.random.Generator) -> int:
    """One sample from probabilities p (inverse CDF; tolerant of p not summing to exactly 1)."""
    c = np.cumsum(p)
    return int(min(np.searchsorted(c, rng.random() * c[-1], side="right"), len(p) - 1))


def _sampler(temperature: float):
    def propose(row: np.ndarray, rng: np.random.Generator) -> tuple[int, np.ndarray]:
        q = _probs(row, temperature)
        return _draw(q, rng), q

    def verify(p_rows: np.ndarray, drafts: list[int], q_rows: list, rng) -> tuple[int, int]:
        """Leviathan Algorithm 1: accept draft x with probability min(1, p(x)/q(x)); at the first
        rejection sample from normalize(max(0, p - q)); if all pass, sample a bonus token from p."""
        for i, x in enumerate(drafts):
            p = _probs(p_rows[i], temperature)
            if rng.random() * q_rows[i][x] < p[x]:
                continue
            resid = np.maximum(p - q_rows[i], 0.0)
            return i, _draw(resid if resid.sum() > 0 else p, rng)
        return len(drafts), _draw(_probs(p_rows[-1], temperature), rng)

    return propose, verify


def _step(ids: list[int], g: int, models: tuple, policy: tuple, rng, res: SpecResult) -> list[int]:
    """One draft-then-verify step; returns the emitted tokens and rolls both caches back."""
    (target, draft, tcache, dcache), (propose, verify) = models, policy
    drafts, q_rows, draft_s = [], [], 0.0
    for _ in range(g):                                      # up to gamma cheap sequential draft passes
        logits, dt = _timed(draft, (ids + drafts)[len(dcache):], dcache)
        res.draft_pass_s.append(dt)
        draft_s += dt
        res.num_draft_passes += 1
        if not np.isfinite(logits[-1]).any():               # no guess (a lookup draft found no match)
            break
        tok, q = propose(logits[-1], rng)
        drafts.append(tok)
        q_rows.append(q)
    g = len(drafts)
    p_all, target_s = _timed(target, (ids + drafts)[len(tcache):], tcache)   # ONE pass scores all
    k, nxt = verify(p_all[-(g + 1):], drafts, q_rows, rng)
    tcache.truncate(len(ids) + k)                           # drop rejected drafts from both caches
    dcache.truncate(min(len(dcache), len(ids) + k))
    kind = "plain" if g == 0 else ("bonus" if k == g else "replacement")
    res.frames.append({
        "step": len(res.frames), "kind": kind, "proposed": drafts, "accepted": drafts[:k],
        "num_accepted": k, "rejected": drafts[k] if k < g else None,
        "replacement": nxt if kind == "replacement" else None, "bonus": nxt if kind == "bonus" else None,
        "emitted": drafts[:k] + [nxt], "draft_s": draft_s, "target_s": target_s})
    res.num_proposed += g
    res.num_accepted += k
    res.num_rejected += int(k < g)
    res.num_target_passes += 1
    res.draft_time_s += draft_s
    res.target_time_s += target_s
    return drafts[:k] + [nxt]


def _run(target: Forward, draft: Forward, prompt_ids, max_new_tokens: int, gamma: int,
         caches: tuple, policy: tuple, rng, eos_id: int | None) -> SpecResult:
    if gamma < 0 or max_new_tokens < 1 or len(prompt_ids) == 0:
        raise ValueError("need gamma >= 0, max_new_tokens >= 1 and a non-empty prompt")
    t0, res = time.perf_counter(), SpecResult()
    ids = [int(t) for t in prompt_ids]
    n_prompt, (tcache, dcache) = len(ids), caches
    logits, dt = _timed(target, ids[len(tcache):], tcache)          # prefill gives the first token
    first = policy[0](logits[-1], rng)[0]
    ids.append(first)
    res.num_target_passes, res.target_time_s = 1, dt
    res.frames.append({"step": 0, "kind": "prefill", "proposed": [], "accepted": [], "num_accepted": 0,
                       "rejected": None, "replacement": None, "bonus": None, "emitted": [first],
                       "draft_s": 0.0, "target_s": dt})
    while len(ids) - n_prompt < max_new_tokens and ids[-1] != eos_id:
        g = min(gamma, max_new_tokens - (len(ids) - n_prompt) - 1)   # never draft past the end
        emitted = _step(ids, g, (target, draft, tcache, dcache), policy, rng, res)
        if eos_id is not None and eos_id in emitted:
            emitted = emitted[:emitted.index(eos_id) + 1]
        ids.extend(emitted)
    res.output_ids = ids[n_prompt:]
    res.wall_time_s = time.perf_counter() - t0
    return res


def speculative_generate(target_forward: Forward, draft_forward: Forward, prompt_ids, max_new_tokens: int,
                         gamma: int, target_cache: Cache, draft_cache: Cache,
                         eos_id: int | None = None) -> SpecResult:
    """Greedy speculative decoding. Invariant: output_ids == the target's own greedy output, token for
    token (drafts are kept only where they equal the target's argmax). Caches must start empty or
    hold a prefix of prompt_ids."""
    return _run(target_forward, draft_forward, prompt_ids, max_new_tokens, gamma,
                (target_cache, draft_cache), (_argmax, _verify_greedy), None, eos_id)


def speculative_sample(target_forward: Forward, draft_forward: Forward, prompt_ids, max_new_tokens: int,
                       gamma: int, target_cache: Cache, draft_cache: Cache, rng: np.random.Generator,
                       temperature: float = 1.0, eos_id: int | None = None) -> SpecResult:
    """Sampling-mode speculative decoding (rejection sampling, Leviathan Algorithm 1 / Appendix A.1):
    the output tokens are distributed exactly as if sampled from the target at `temperature`."""
    if temperature <= 0:
        raise ValueError("temperature must be > 0; use speculative_generate for greedy decoding")
    return _run(target_forward, draft_forward, prompt_ids, max_new_tokens, gamma,
                (target_cache, draft_cache), _sampler(temperature), rng, eos_id)


def greedy_generate(forward: Forward, prompt_ids, max_new_tokens: int, cache: Cache,
                    eos_id: int | None = None) -> dict[str, Any]:
    """Plain greedy decoding with the target alone: one pass per token (the baseline)."""
    t0, ids, pass_s = time.perf_counter(), [int(t) for t in prompt_ids], []
    n_prompt = len(ids)
    while len(ids) - n_prompt < max_new_tokens and (len(ids) == n_prompt or ids[-1] != eos_id):
        logits, dt = _timed(forward, ids[len(cache):], cache)
        pass_s.append(dt)
        ids.append(int(np.argmax(logits[-1])))
    return {"output_ids": ids[n_prompt:], "num_passes": len(pass_s), "pass_s": pass_s,
            "wall_time_s": time.perf_counter() - t0}


def compare_with_greedy(target_forward: Forward, draft_forward: Forward, make_target_cache: Callable[[], Cache],
                        make_draft_cache: Callable[[], Cache], prompt_ids, max_new_tokens: int, gamma: int,
                        eos_id: int | None = None) -> dict[str, Any]:
    """Run plain greedy and speculative greedy on fresh caches; measure, and predict with Theorem 3.8.

    measured_cost_ratio = median draft pass time / median greedy decode pass time (prefill excluded).
    The prediction assumes a (gamma+1)-token target pass costs one decode step; on a CPU it costs more,
    so the measured speed-up can fall below the prediction.
    """
    greedy = greedy_generate(target_forward, prompt_ids, max_new_tokens, make_target_cache(), eos_id)
    spec = speculative_generate(target_forward, draft_forward, prompt_ids, max_new_tokens, gamma,
                                make_target_cache(), make_draft_cache(), eos_id)
    decode_s = float(np.median(greedy["pass_s"][1:] or greedy["pass_s"]))
    c = float(np.median(spec.draft_pass_s)) / decode_s if spec.draft_pass_s and decode_s > 0 else 0.0
    alpha = spec.alpha_estimate
    return {"matches_greedy": spec.output_ids == greedy["output_ids"],
            "acceptance_rate": spec.acceptance_rate, "alpha_estimate": alpha,
            "measured_cost_ratio": c,
            "measured_speedup": greedy["wall_time_s"] / spec.wall_time_s if spec.wall_time_s else 0.0,
            "predicted_speedup": speedup(alpha, gamma, c),
            "greedy": greedy, "speculative": spec.to_dict()}
