"""Speculative decoding for real: a draft guesses, the target verifies, on this CPU (chapter 9).

The target is a parameter, held with its draft in a Setup:
  real_setup(model)  the real chat model (SmolLM2) as target, drafted by PROMPT LOOKUP (sim/decoding/draft_lookup.py):
                     n-grams of the prompt and answer so far. Why that draft: no other model shares SmolLM2's
                     vocabulary here (the toy models speak cl100k pieces), and its own first layers guess badly
                     (it was not trained to exit early) while costing a large share of a pass (the 28M-weight
                     output head is read by every draft pass); a lookup costs no pass at all, c = 0.
                     scripts/measure_real_model.py measures both drafts on the example prompts.
  toy_setup()        the demo model "main" as target, the small demo model "draft" as draft; both read the
                     same vocabulary (cl100k pieces). Until main's weights are installed the draft drafts for
                     itself (acceptance 1.0): the code path is the same.

Two halves with different promises:
  run_demo(...)      the tokens, frames, acceptance and the greedy check: a pure function of its
                     arguments (fixed weights, greedy decoding), so a response built from it is cacheable.
                     Built from one Answer per (prompt, tokens), whatever gamma: the target's greedy answer
                     (one pass per token), one pass of the target over that whole answer (its top token at
                     every position: the exact-output check) and the draft's guesses along it. With greedy
                     checking a draft token is kept exactly when it equals the target's top token there, so
                     the draft-then-check steps for any gamma follow from those without another target pass
                     (replay); a model draft's guesses after a step's first miss are never judged and not
                     computed (each still counts as a draft pass). Cost per new prompt: its prefill, one
                     pass per answer token and one check pass; the real model writes at most
                     REAL_MAX_NEW_TOKENS (each of its decode steps costs ~65 ms of one core here).
  measure_demo(...)  wall-clock times on this CPU: the real loops (sim/decoding/speculative.py), greedy alone vs
                     speculative, from one shared prefill. They vary run to run and belong in a separate,
                     uncached-by-URL response.
"""

from __future__ import annotations

import dataclasses
import statistics
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

import numpy as np

from inside_llm.sim.core.derivation import derive
from inside_llm.sim.core.result import as_json
from inside_llm.sim.decoding import speculative as sp
from inside_llm.sim.decoding.draft_lookup import TokenCache, early_exit, lookup, lookup_forward
from inside_llm.sim.model.transformer import DemoModel, KVCache, Layer, load_model

from ..core.errors import SimError

# The chapter opens on a run where the draft is usually right, then offers one where it is often wrong.
# Both are lines of The Taming of the Shrew (Tiny Shakespeare); chosen by running the demo models on
# candidate lines: these two are near the top and the bottom of the draft's acceptance.
DEFAULT_PROMPT = "KATHARINA:\nIf I be waspish, best beware my sting.\n\n"
HARD_PROMPT = "PETRUCHIO:\nMy remedy is then, to pluck it out.\n\n"
# The real chat model's examples: an answer that repeats the question's words (lookup guesses them) and
# one that has to invent its words (lookup rarely guesses).
REAL_GOOD_PROMPT = ("Repeat this list exactly, one item per line: apples, bananas, cherries, dates, "
                    "elderberries, figs, grapes, honeydew melons.")
REAL_HARD_PROMPT = "Write a short poem about the sea."
MAX_PROMPT_TOKENS = 256     # the demo models' trained context
MAX_NEW_TOKENS = 64
# The real model's bounds per new prompt (its prefill costs ~7 ms of one core a token here, a decode step
# ~65 ms): a question of up to ~100 tokens in its chat template, an answer of up to 16 tokens.
REAL_MAX_PROMPT_TOKENS = 128
REAL_MAX_NEW_TOKENS = 16
MEASURE_ROUNDS = 2          # the demo models: fastest of two rounds
REAL_MEASURE_ROUNDS = 1     # the real model: one round (~2 s of one core)


class DemoCache:
    """speculative.py's cache protocol (len, truncate) over the demo model's KVCache."""

    def __init__(self, model: DemoModel, capacity: int = 128):
        self.kv = KVCache(model.config, capacity)

    def __len__(self) -> int:
        return self.kv.num_tokens

    def truncate(self, n: int) -> None:
        self.kv.truncate(n)


def forward_fn(model: DemoModel):
    """speculative.py's Forward: (new ids, cache) -> logits [T, V], appending the ids to the cache."""
    def forward(ids: list[int], cache: DemoCache) -> np.ndarray:
        return model.forward(ids, cache.kv).logits
    return forward


@dataclass(frozen=True, eq=False)
class Setup:
    """A target and its draft: what run_demo and measure_demo run (hashed by identity: one per process)."""

    name: str                                    # cache key: "smollm2+lookup", "main+draft", ...
    target: DemoModel
    draft: Callable                              # speculative Forward
    new_draft_cache: Callable[[], object]
    draft_info: dict
    cost_ratio: float                            # c on a memory-bound GPU: draft weight bytes / target's
    encode: Callable[[str], list[int]]           # prompt text -> the ids the target reads
    eos_id: int | None
    examples: tuple[str, str]                    # (usually right, often wrong)
    same_model: bool = False
    # the draft's own guess for answer token j given everything before it, for every j (one pass of a model
    # draft along the answer); None: prompt lookup, replayed token by token (it costs no pass)
    guesses: Callable[[Answer], list[int]] | None = None
    max_prompt_tokens: int = MAX_PROMPT_TOKENS
    max_new_tokens: int = MAX_NEW_TOKENS
    measure_rounds: int = MEASURE_ROUNDS
    prefix: tuple[int, ...] = ()                 # ids every prompt starts with (the chat template's opening)

    def new_target_cache(self) -> DemoCache:
        return DemoCache(self.target)


def demo_pair() -> tuple[DemoModel, DemoModel]:
    """(target, draft): main and draft when main is installed, else draft checking itself."""
    draft = load_model("draft")
    try:
        target = load_model("main")
    except (FileNotFoundError, OSError):
        target = draft
    if not np.array_equal(target.vocab.cl100k, draft.vocab.cl100k):
        raise ValueError("the draft and target demo models must share one vocabulary")
    return target, draft


def model_guesses(draft: DemoModel) -> Callable[[Answer], list[int]]:
    """A model draft's guesses along an answer: one pass over prompt + answer, its top token at each position."""
    def guesses(a: Answer) -> list[int]:
        seq = list(a.prompt_ids) + list(a.ids[:-1])
        logits = draft.forward(seq, KVCache(draft.config, len(seq))).logits[len(a.prompt_ids) - 1:]
        return [int(i) for i in np.argmax(logits, axis=-1)]
    return guesses


def toy_setup() -> Setup:
    target, draft = demo_pair()
    return Setup(f"{target.name}+{draft.name}", target, forward_fn(draft), lambda: DemoCache(draft),
                 _model_info(draft), weights_cost_ratio(target, draft), draft.encode, None,
                 (DEFAULT_PROMPT, HARD_PROMPT), target is draft, model_guesses(draft))


def real_setup(model: DemoModel) -> Setup:
    """The chat model as target (its chat template, stopping at its end-of-turn), drafted by prompt lookup.

    The target is the model as the server serves it: its `served_form` (int8 matrices, sim/model/smollm.ServedSmolLM)
    when it has one, so the greedy answer, the check pass and every draft's guesses come from that one path.
    """
    info = {"name": "prompt lookup", "num_params": 0, "layers": 0, "dim": 0,
            "kind": "n-grams of the prompt and the answer so far (3, then 2, then 1 token)"}
    target = getattr(model, "served_form", None) or model
    eos = min(target.stop_ids) if getattr(target, "stop_ids", None) else None
    encode = target.chat_ids if hasattr(target, "chat_ids") else target.encode
    return Setup(f"{target.name}+lookup", target, lookup_forward(target.config.vocab_size), TokenCache, info, 0.0,
                 encode, eos, (REAL_GOOD_PROMPT, REAL_HARD_PROMPT), max_prompt_tokens=REAL_MAX_PROMPT_TOKENS,
                 max_new_tokens=REAL_MAX_NEW_TOKENS, measure_rounds=REAL_MEASURE_ROUNDS,
                 prefix=common_prefix(encode("a"), encode("b")) if hasattr(target, "chat_ids") else ())


def common_prefix(a: list[int], b: list[int]) -> tuple[int, ...]:
    """The ids two prompts start with (for a chat model: its template's opening, system turn included)."""
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return tuple(a[:n])


def encode_prompt(text: str, setup: Setup | None = None) -> list[int]:
    """Model ids of the prompt; ValueError naming `prompt` when empty or over the context."""
    ids = (setup.encode if setup else demo_pair()[1].encode)(text)
    bound = setup.max_prompt_tokens if setup else MAX_PROMPT_TOKENS
    if not ids:
        raise SimError("prompt", "The prompt must hold at least 1 token.")
    if len(ids) > bound:
        which = "the demo models" if bound == MAX_PROMPT_TOKENS else f"{setup.target.name}'s live draft-and-check"
        raise SimError("prompt", f"The prompt must be at most {bound} tokens for {which} (chat template "
                       f"included); this one is {len(ids)}.")
    return ids


def _check(gamma: int, max_new_tokens: int) -> None:
    if not 1 <= gamma <= sp.MAX_GAMMA:
        raise ValueError(f"gamma must be in 1..{sp.MAX_GAMMA}")
    if not 1 <= max_new_tokens <= MAX_NEW_TOKENS:
        raise ValueError(f"max_tokens must be in 1..{MAX_NEW_TOKENS}")


def _tok(model: DemoModel, i: int | None) -> dict | None:
    """A token as {id, text}; a partial UTF-8 piece shows U+FFFD."""
    return None if i is None else {"id": int(i), "text": model.piece(int(i)).decode("utf-8", "replace")}


def _frame(model: DemoModel, f: dict, start: int) -> dict:
    """One target pass, timings dropped; `start` = output tokens before it. target_token is the
    target's own token that ends every pass: the replacement, the bonus, or (prefill, and a last
    pass with no room left to draft: kind "plain") the token it would write anyway."""
    t = lambda i: _tok(model, i)  # noqa: E731
    return {"pass": f["step"] + 1, "kind": f["kind"], "start": start,
            "proposed": [t(i) for i in f["proposed"]], "num_accepted": f["num_accepted"],
            "num_drafted": f.get("num_drafted", len(f["proposed"])),
            "accepted": [t(i) for i in f["accepted"]], "rejected": t(f["rejected"]),
            "replacement": t(f["replacement"]), "bonus": t(f["bonus"]),
            "target_token": t(f["emitted"][-1]), "emitted": [t(i) for i in f["emitted"]]}


def weights_cost_ratio(target: DemoModel, draft: DemoModel) -> float:
    """c if a pass's time were its weight reads (memory-bound, as decode is on a GPU): params ratio."""
    return draft.num_params / target.num_params


@dataclass(frozen=True, eq=False)
class Answer:
    """The target's greedy answer to a prompt and its check: what every gamma's run is replayed from."""

    prompt_ids: tuple[int, ...]
    ids: tuple[int, ...]          # the greedy answer, one target pass per token
    check_ids: tuple[int, ...]    # the target's top token at each answer position, from ONE pass over it all
    rows: np.ndarray              # [layers, N, dim] the residual after each layer at those N positions
    guesses: dict = dataclasses.field(default_factory=dict, compare=False)  # self-drafts' guesses, by layers


@lru_cache(maxsize=4)
def _prefix_cache(target: DemoModel, prefix: tuple[int, ...]) -> KVCache:
    """The keys and values of `prefix` (the chat template's opening, the same for every question), computed once
    per target: a new question's prefill reads only its own tokens after it (prefix caching)."""
    kv = KVCache(target.config, len(prefix))
    target.forward(list(prefix), kv, last_only=True)
    return kv


def _prefilled(target: DemoModel, ids: tuple[int, ...], prefix: tuple[int, ...], capacity: int) -> KVCache:
    """A cache holding ids[:-1]: the stored prefix's keys and values copied when ids start with it, then
    one pass over the rest (no logits: the greedy loop reads the last prompt token itself)."""
    kv, done = KVCache(target.config, capacity), 0
    if prefix and len(ids) > len(prefix) and ids[: len(prefix)] == prefix:
        src, done = _prefix_cache(target, prefix), len(prefix)
        for layer in range(target.config.n_layers):
            kv.k[layer][:, :done], kv.v[layer][:, :done] = src.k[layer][:, :done], src.v[layer][:, :done]
        kv.num_tokens = done
    if len(ids) - 1 > done:
        target.forward(list(ids[done:-1]), kv, last_only=True)
    return kv


@lru_cache(maxsize=32)
def answer(target: DemoModel, eos_id: int | None, ids: tuple[int, ...], max_new_tokens: int,
           prefix: tuple[int, ...] = ()) -> Answer:
    """Greedy decoding (one pass per token, from the prompt's cache: its stored prefix and one pass over the
    rest), then one pass over [last prompt token + answer[:-1]] from the same cache: row j is the target's
    choice for answer token j given all before it. Shared by every draft of this target (hashed by identity:
    one model object per process)."""
    cache = _prefilled(target, ids, prefix, len(ids) + max_new_tokens)
    out, tok = [], ids[-1]
    while len(out) < max_new_tokens:
        tok = int(np.argmax(target.forward([tok], cache, last_only=True).logits[-1]))
        out.append(tok)
        if tok == eos_id:
            break
    cache.truncate(len(ids) - 1)
    logits, rows = target.forward_rows([ids[-1], *out[:-1]], cache)
    return Answer(ids, tuple(out), tuple(int(i) for i in np.argmax(logits, axis=-1)), rows)


def replay(a: Answer, gamma: int, max_new_tokens: int, guesses: list[int] | None) -> list[dict]:
    """The draft-then-check steps of greedy speculative decoding over answer a (sim/decoding/speculative._run's frames,
    without clock values). A draft token is kept iff it equals a.ids at its position, the target's own choice
    there. guesses=None: prompt lookup on the text so far (and its own guesses); else the model draft's guess
    for each position, known while its earlier guesses in the step were right (then never judged)."""
    out, n = list(a.ids), len(a.ids)
    frames = [{"step": 0, "kind": "prefill", "proposed": [], "accepted": [], "num_accepted": 0, "num_drafted": 0,
               "rejected": None, "replacement": None, "bonus": None, "emitted": out[:1]}]
    p = 1
    while p < n:
        g = min(gamma, max_new_tokens - p - 1, n - p - 1)   # never draft past the end (nor past its last token)
        drafts, drafted = [], 0
        for i in range(g):
            if guesses is None:
                d = lookup([*a.prompt_ids, *out[:p], *drafts])
                if d is None:                                 # no earlier match: the step's drafting ends
                    break
            else:
                d = guesses[p + i] if drafts == out[p:p + i] else None
            drafted += 1
            if d is not None:
                drafts.append(d)
        k = 0
        while k < len(drafts) and drafts[k] == out[p + k]:
            k += 1
        kind = "plain" if drafted == 0 else ("bonus" if k == drafted else "replacement")
        nxt = out[p + k]
        frames.append({"step": len(frames), "kind": kind, "proposed": drafts, "accepted": drafts[:k],
                       "num_accepted": k, "num_drafted": drafted, "rejected": drafts[k] if k < len(drafts) else None,
                       "replacement": nxt if kind == "replacement" else None,
                       "bonus": nxt if kind == "bonus" else None, "emitted": drafts[:k] + [nxt]})
        p += k + 1
    return frames


def run_demo(prompt: str, gamma: int, max_new_tokens: int, setup: Setup | None = None) -> dict[str, Any]:
    """Greedy speculative decoding of `prompt`, replayed from the target's greedy answer (Answer), and checked.

    Deterministic: no clock values. frames[0] is the prefill pass; each later frame is one
    draft-then-verify step. acceptance_rate = accepted / drafted over all frames. The real model writes at
    most setup.max_new_tokens (num_tokens says how many).
    """
    _check(gamma, max_new_tokens)
    setup = setup or toy_setup()
    target = setup.target
    ids = encode_prompt(prompt, setup)
    n = min(max_new_tokens, setup.max_new_tokens)
    a = answer(target, setup.eos_id, tuple(ids), n, setup.prefix)
    guesses = setup.guesses(a) if setup.guesses else None
    spec = replay(a, gamma, n, guesses)
    emitted = [t for f in spec for t in f["emitted"]]
    if emitted != list(a.ids):
        raise AssertionError("a replayed run must write the target's greedy answer")
    frames, start = [], 0
    for f in spec:
        frames.append(_frame(target, f, start))
        start += len(f["emitted"])
    counts = _counts(spec)
    c = setup.cost_ratio
    alpha, n_out = counts["alpha_estimate"], len(a.ids)
    return {
        "target_model": _model_info(target), "draft_model": setup.draft_info, "same_model": setup.same_model,
        "prompt_tokens": [_tok(target, i) for i in ids], "output_text": target.decode(a.ids),
        "output_tokens": [_tok(target, i) for i in a.ids],
        "greedy_output_ids": list(a.ids), "matches_greedy": a.check_ids == a.ids,
        "check": check_view(target, a),
        "num_tokens": n_out, "max_new_tokens": setup.max_new_tokens,
        **{k: counts[k] for k in ("num_target_passes", "num_draft_passes", "num_proposed", "num_accepted",
                                  "num_rejected", "acceptance_rate")},
        "alpha_estimate": alpha,
        "tokens_per_target_pass": n_out / counts["num_target_passes"],
        "weights_cost_ratio": c, "predicted_speedup_memory_bound": sp.speedup(alpha, gamma, c),
        "gpu_time": gpu_time(frames, n_out, c),
        "draft_choice": stored_drafts() if setup.cost_ratio == 0 and not setup.same_model else None,
        "frames": frames, "math": _demo_math(counts, gamma, c, target, setup.draft_info),
        "drafts": [draft_summary(setup, spec, n_out)]
                  + [draft_summary(s, replay(a, gamma, n, s.guesses(a)), n_out) for s in self_drafts(setup)],
    }


SELF_DRAFT_SHARES = (0.2, 0.8)  # self-drafts: the target's first fifth and first four fifths of its layers


def self_draft_layers(n_layers: int) -> list[int]:
    """How many of its n_layers layers each self-draft runs: SELF_DRAFT_SHARES of them, fewer than all."""
    return sorted({max(1, round(f * n_layers)) for f in SELF_DRAFT_SHARES} - {n_layers})


def self_drafts(setup: Setup) -> list[Setup]:
    """The target drafting for itself: its own first layers, then its head (early exit), shallow and deep."""
    return [early_exit_setup(setup, k) for k in self_draft_layers(setup.target.config.n_layers)]


def draft_summary(setup: Setup, spec: list[dict], num_tokens: int) -> dict[str, Any]:
    """One draft's run on the prompt, for the side-by-side: its steps (drafted, kept, missed, tokens written),
    acceptance, alpha, c and GPU time in big-model passes (a check costs one pass, a draft pass c)."""
    counts, c = _counts(spec), setup.cost_ratio
    steps = [{"drafted": f["num_drafted"], "kept": f["num_accepted"], "missed": f["rejected"] is not None,
              "tokens": len(f["emitted"])} for f in spec]
    gpu = sum(1 + f["num_drafted"] * c for f in spec)
    kind = "lookup" if setup.guesses is None else ("self" if setup.name.rsplit("-ee", 1)[-1].isdigit() else "model")
    return {"name": setup.draft_info["name"], "kind": kind, "cost_ratio": c,
            "acceptance_rate": counts["acceptance_rate"], "alpha_estimate": counts["alpha_estimate"],
            "num_target_passes": counts["num_target_passes"], "num_draft_passes": counts["num_draft_passes"],
            "tokens_per_target_pass": num_tokens / counts["num_target_passes"],
            "gpu_time": gpu, "speedup": num_tokens / gpu, "steps": steps}


def _counts(spec: list[dict]) -> dict[str, Any]:
    drafted = sum(f["num_drafted"] for f in spec)
    accepted = sum(f["num_accepted"] for f in spec)
    rejected = sum(f["rejected"] is not None for f in spec)
    judged = accepted + rejected
    return {"num_target_passes": len(spec), "num_draft_passes": drafted, "num_proposed": drafted,
            "num_accepted": accepted, "num_rejected": rejected,
            "acceptance_rate": accepted / drafted if drafted else 0.0,
            "alpha_estimate": accepted / judged if judged else 0.0}


def check_view(target: DemoModel, a: Answer) -> dict[str, Any]:
    """The exact-output check in words: one pass over the answer, its top token at each position."""
    same = sum(x == y for x, y in zip(a.check_ids, a.ids, strict=True))
    return {"positions": len(a.ids), "agree": same,
            "how": f"{target.name} read its whole answer in one pass: at {same} of {len(a.ids)} positions its own "
                   "top token is the one written, so the answer is exactly its greedy output, and a check pass "
                   "keeps a draft token only where it equals that token"}


def gpu_time(frames: list[dict], num_tokens: int, c: float) -> dict[str, Any]:
    """GPU time of this run, in big-model passes, where a pass costs its weight reads (memory-bound decode).

    Plain decoding: one pass per token. Speculative: per pass, its draft passes at c each, then one
    big-model pass that checks them all (a (gamma+1)-token pass reads the weights once: about one step).
    """
    per_pass = [{"draft": f["num_drafted"] * c, "target": 1.0, "tokens": len(f["emitted"])} for f in frames]
    spec = sum(p["draft"] + p["target"] for p in per_pass)
    draft_passes = sum(f["num_drafted"] for f in frames)
    return {"plain": float(num_tokens), "speculative": spec, "speedup": num_tokens / spec if spec else 0.0,
            "per_pass": per_pass, "cost_ratio": c,
            "math": as_json(derive(
                num_tokens / spec if spec else 0.0, "x", "plain passes / (checks + draft passes x c)",
                {"plain": (num_tokens, "big-model passes, one per token"),
                 "checks": (len(frames), "big-model passes"), "draft_passes": (draft_passes, "passes"),
                 "c": (c, "one draft pass / one big-model pass")},
                ["a decode pass costs its weight reads, so a check of gamma+1 tokens costs one pass",
                 "the prompt's prefill is the first pass of both"]))}


def _model_info(m: DemoModel) -> dict[str, Any]:
    c = m.config
    return {"name": m.name, "num_params": m.num_params, "layers": c.n_layers, "dim": c.dim,
            "weights": getattr(m, "weights_format", "float32")}


def _demo_math(counts: dict, gamma: int, c: float, target: DemoModel, draft: dict) -> dict:
    alpha, accepted = counts["alpha_estimate"], counts["num_accepted"]
    judged = accepted + counts["num_rejected"]
    return as_json({
        "acceptance_rate": derive(
            counts["acceptance_rate"], "", "accepted draft tokens / drafted tokens",
            {"accepted": (accepted, "tokens"), "drafted": (counts["num_proposed"], "tokens")},
            ["drafts after a step's first mismatch are never judged and count as not accepted"]),
        "alpha_estimate": derive(
            alpha, "", "accepted / (accepted + first rejections)",
            {"accepted": (accepted, "tokens"), "judged": (judged, "tokens")},
            ["only drafts the target ruled on count: the kept ones and each step's first mistake"],
            [f"{sp.LEVIATHAN}, Definition 3.1 (acceptance rate beta; alpha = E(beta))"]),
        "weights_cost_ratio": derive(
            c, "", "draft parameters / target parameters",
            {"draft": (draft["num_params"], "parameters"), "target": (target.num_params, "parameters")},
            ["a decode pass is memory-bound, so its time is the weight bytes it reads (as on a GPU)",
             "both models store weights in the same precision; the tied output head is read every pass",
             "a prompt-lookup draft reads no weights: c = 0"]),
        "predicted_speedup_memory_bound": derive(
            sp.speedup(alpha, gamma, c), "x", "(1 - alpha^(gamma+1)) / (1 - alpha) / (gamma * c + 1)",
            {"alpha": (alpha, "measured on this run"), "gamma": (gamma, "draft tokens/step"),
             "c": (c, "draft/target weight bytes")},
            ["a gamma+1-token verification costs one decode step (true while decode is memory-bound)"],
            [f"{sp.LEVIATHAN}, Equation 1 and Theorem 3.8"]),
    })


# ---- wall clock: varies run to run ---------------------------------------------------------------

def measure_demo(prompt: str, gamma: int, max_new_tokens: int, rounds: int = MEASURE_ROUNDS,
                 setup: Setup | None = None) -> dict[str, Any]:
    """Greedy-alone vs speculative wall time on this CPU, and the prediction for the measured alpha and c.

    Both start from one prefill of the prompt (the same for both: speculation only changes decoding), and
    each round runs both (sp.compare_with_greedy) from it. Every figure is the fastest
    round's (a busy neighbour on the CPU counts least): measured_speedup = fastest greedy run /
    fastest speculative run; a decode step, a draft pass and a verification are per-round medians,
    then the smallest over rounds. verify_cost_steps = one (gamma+1)-token target pass / one decode
    step: about 1 on a memory-bound GPU, more on a CPU, where extra tokens cost extra arithmetic.
    """
    _check(gamma, max_new_tokens)
    setup = setup or toy_setup()
    ids = encode_prompt(prompt, setup)
    n = min(max_new_tokens, setup.max_new_tokens)
    fwd_t = forward_fn(setup.target)
    cache = setup.new_target_cache()
    if len(ids) > 1:
        fwd_t(ids[:-1], cache)                         # the prompt's prefill, once: both runs start from it

    def from_prefill() -> DemoCache:                   # each run reads the last prompt token, then decodes
        cache.truncate(len(ids) - 1)
        return cache

    runs = [sp.compare_with_greedy(fwd_t, setup.draft, from_prefill, setup.new_draft_cache,
                                   ids, n, gamma, setup.eos_id) for _ in range(max(1, rounds))]
    greedy_s = min(r["greedy"]["wall_time_s"] for r in runs)
    spec_s = min(r["speculative"]["wall_time_s"] for r in runs)
    decode_s = min(statistics.median(r["greedy"]["pass_s"][1:] or r["greedy"]["pass_s"]) for r in runs)
    draft_s = min(statistics.median(r["speculative"]["draft_pass_s"] or [0.0]) for r in runs)
    verify = [[f["target_s"] for f in r["speculative"]["frames"] if len(f["proposed"]) == gamma] for r in runs]
    verify_s = min((statistics.median(v) for v in verify if v), default=0.0)
    c = draft_s / decode_s if decode_s > 0 else 0.0
    v = verify_s / decode_s if verify_s > 0 and decode_s > 0 else 1.0
    alpha, first = runs[0]["alpha_estimate"], runs[0]
    e = sp.expected_tokens_per_pass(alpha, gamma)
    return {
        "matches_greedy": all(r["matches_greedy"] for r in runs), "acceptance_rate": first["acceptance_rate"],
        "alpha_estimate": alpha, "rounds": len(runs), "num_tokens": len(runs[0]["greedy"]["output_ids"]), "greedy_wall_s": greedy_s, "speculative_wall_s": spec_s,
        "decode_step_s": decode_s, "measured_cost_ratio": c, "verify_cost_steps": v,
        "measured_speedup": greedy_s / spec_s if spec_s > 0 else 0.0,
        "predicted_speedup": sp.speedup(alpha, gamma, c),
        "predicted_speedup_with_verify_cost": e / (gamma * c + v),
        "math": _measure_math(alpha, gamma, c, v, e, greedy_s, spec_s),
    }


def _measure_math(alpha, gamma, c, v, e, greedy_s, spec_s) -> dict:
    ins = {"alpha": (alpha, "measured on this run"), "gamma": (gamma, "draft tokens/step"),
           "c": (c, "measured draft pass / decode step")}
    return as_json({
        "measured_speedup": derive(
            greedy_s / spec_s if spec_s > 0 else 0.0, "x", "greedy wall time / speculative wall time",
            {"greedy": (greedy_s, "s"), "speculative": (spec_s, "s")},
            ["fastest of the rounds for each; same prompt, same number of new tokens, both from one prefill",
             "measured on this server's CPU, shared with other work"]),
        "predicted_speedup": derive(
            sp.speedup(alpha, gamma, c), "x", "E / (gamma * c + 1), E = (1 - alpha^(gamma+1)) / (1 - alpha)",
            {**ins, "E": (e, "tokens/target pass")},
            ["a gamma+1-token verification costs one decode step"],
            [f"{sp.LEVIATHAN}, Theorem 3.8"]),
        "predicted_speedup_with_verify_cost": derive(
            e / (gamma * c + v), "x", "E / (gamma * c + v)",
            {**ins, "E": (e, "tokens/target pass"), "v": (v, "decode steps per verification (measured)")},
            ["Theorem 3.8 with the verification's measured cost instead of one decode step"]),
    })


# ---- which draft: prompt lookup against early exit, on the real model's examples (offline) ------------

def early_exit_setup(setup: Setup, num_layers: int) -> Setup:
    """The same target drafted by its own first num_layers layers (and its head); c = their weight share."""

    t = setup.target
    ref = getattr(t, "reference", t)                        # parameters counted on the float32 model
    if not 1 <= num_layers <= t.config.n_layers:
        raise ValueError(f"num_layers must be in 1..{t.config.n_layers}")
    per_layer = [sum(getattr(w, f).size for f in Layer.__dataclass_fields__) for w in ref.layers]
    head = ref.tok_emb.size                                 # the tied output head, read by every pass
    c = (sum(per_layer[:num_layers]) + ref.norm.size + head) / (sum(per_layer) + ref.norm.size + head)
    ee_model = lru_cache(maxsize=1)(lambda: early_exit(ref, num_layers))  # built only if a draft pass runs

    def draft(ids: list[int], cache: DemoCache) -> np.ndarray:
        return ee_model().forward(ids, cache.kv).logits

    def guesses(a: Answer) -> list[int]:     # the target's own residual after layer k, through its head
        if num_layers not in a.guesses:      # every self-draft depth through the head in one pass, kept
            ks = sorted({num_layers, *self_draft_layers(t.config.n_layers)})
            n = a.rows.shape[1]
            top = np.argmax(t.head(np.concatenate([a.rows[k - 1] for k in ks])), axis=-1)
            a.guesses.update({k: [int(i) for i in top[j * n:(j + 1) * n]] for j, k in enumerate(ks)})
        return a.guesses[num_layers]

    return dataclasses.replace(
        setup, name=f"{setup.name}-ee{num_layers}", draft=draft, new_draft_cache=lambda: DemoCache(ee_model()),
        draft_info={"name": f"first {num_layers} of {t.config.n_layers} layers", "layers": num_layers,
                    "num_params": sum(per_layer[:num_layers]) + ref.norm.size + head, "dim": t.config.dim,
                    "weights": getattr(t, "weights_format", "float32")},
        cost_ratio=c, guesses=guesses)


def stored_drafts() -> dict[str, Any] | None:
    """The stored comparison (demo/smollm2_drafts.json, made by scripts/measure_real_model.py), if shipped."""
    import json

    from inside_llm.sim.model.transformer import DEMO_DIR

    path = DEMO_DIR / "smollm2_drafts.json"
    return json.loads(path.read_text()) if path.exists() else None


def compare_drafts(setup: Setup, gamma: int = 4, max_new_tokens: int = 24,
                   layers: tuple[int, ...] = (6, 15)) -> list[dict[str, Any]]:
    """Acceptance, c and GPU-time speed-up of prompt lookup and early exits on both example prompts."""
    rows = []
    for s in (setup, *(early_exit_setup(setup, k) for k in layers)):
        runs = [run_demo(p, gamma, max_new_tokens, s) for p in setup.examples]
        rows.append({"draft": s.draft_info["name"], "cost_ratio": s.cost_ratio,
                     "runs": [{"prompt": p, "acceptance_rate": r["acceptance_rate"], "matches_greedy": r["matches_greedy"],
                               "gpu_time_speedup": r["gpu_time"]["speedup"], "target_passes": r["num_target_passes"]}
                              for p, r in zip(setup.examples, runs, strict=True)]})
    return rows
