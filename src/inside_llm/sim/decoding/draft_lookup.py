"""Drafts without a draft model: prompt lookup (n-grams) and early exit, for speculative decoding.

Prompt lookup (Saxena, "Prompt Lookup Decoding", 2023, github.com/apoorvumang/prompt-lookup-decoding;
vLLM's `ngram` speculator): find the most recent earlier place where the last n tokens of the text so
far (prompt and answer) occurred, and guess the token that followed it there. Longer n-grams are tried
first (max_ngram down to min_ngram). It costs no model pass at all, so c = 0, and it guesses well
exactly when the answer repeats the prompt or itself: quoting, rewriting, editing code, lists.

Early exit: the target's own first k layers, then its final norm and output head, as a draft (as in
LayerSkip, Elhoushi et al. 2024, arXiv:2404.16710, which trains the model for it; SmolLM2 was not, so
its early layers guess poorly). It shares the target's vocabulary by construction.

Both are speculative.py Forwards: forward(new ids, cache) -> logits [T, V] with the draft's guess in
the last row; a row with no finite value means "no guess" and ends the step's drafting.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from ..model.transformer import DemoModel


class TokenCache:
    """A lookup draft's cache: the token ids so far (speculative.Cache protocol: len, truncate)."""

    def __init__(self) -> None:
        self.ids: list[int] = []

    def __len__(self) -> int:
        return len(self.ids)

    def truncate(self, n: int) -> None:
        del self.ids[n:]


def lookup(ids: Sequence[int], max_ngram: int = 3, min_ngram: int = 1) -> int | None:
    """The token that followed the most recent earlier occurrence of the longest matching tail n-gram."""
    ids = list(ids)
    for n in range(min(max_ngram, len(ids) - 1), min_ngram - 1, -1):
        tail = ids[-n:]
        for start in range(len(ids) - n - 1, -1, -1):  # most recent first, never the tail itself
            if ids[start : start + n] == tail:
                return ids[start + n]
    return None


def lookup_forward(vocab_size: int, max_ngram: int = 3, min_ngram: int = 1):
    """A prompt-lookup draft as a Forward over a TokenCache: one-hot logits of its guess, or no guess."""

    def forward(new_ids: Sequence[int], cache: TokenCache) -> np.ndarray:
        cache.ids.extend(int(i) for i in new_ids)
        out = np.full((len(new_ids), vocab_size), -np.inf, np.float32)  # [T, V]; only the last row is read
        guess = lookup(cache.ids, max_ngram, min_ngram)
        if guess is not None:
            out[-1, guess] = 0.0
        return out

    return forward


def early_exit(model: DemoModel, num_layers: int) -> DemoModel:
    """The model's first num_layers layers, then its own final norm and (tied) output head."""
    if not 1 <= num_layers <= model.config.n_layers:
        raise ValueError(f"num_layers must be in 1..{model.config.n_layers}")
    config = replace(model.config, n_layers=num_layers)
    return DemoModel(
        f"{model.name}-first-{num_layers}", config, model.tok_emb, model.layers[:num_layers], model.norm, model.vocab
    )
