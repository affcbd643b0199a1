"""The requests a scheduler serves, as numpy columns indexed by request id (vLLM's Request, one column
per field), so a step reads and updates its whole batch in a few array operations.

prompt, max_tokens: the trace's lengths (tokens); computed: tokens whose keys and values are in the KV
cache (vLLM's num_computed_tokens); output: tokens sampled so far; a request has prompt + output tokens
and computes until computed == prompt + output, then samples one more. preemptions: times it lost its
KV; arrival_s, first_token_s, finish_s: seconds (nan until they happen).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


class Request:
    """One request's outcome, a row of Requests (Requests.rows())."""

    __slots__ = (
        "request_id",
        "arrival_s",
        "num_prompt_tokens",
        "max_tokens",
        "num_output_tokens",
        "num_computed_tokens",
        "num_preemptions",
        "first_token_s",
        "finish_s",
    )

    def __init__(self, *values):
        for name, value in zip(self.__slots__, values, strict=True):
            setattr(self, name, value)


@dataclass
class Requests:
    arrival_s: np.ndarray  # float64
    prompt: np.ndarray  # int64, from here on
    max_tokens: np.ndarray
    computed: np.ndarray
    output: np.ndarray
    preemptions: np.ndarray
    first_token_s: np.ndarray  # float64, from here on
    finish_s: np.ndarray

    @classmethod
    def of(cls, arrival_s, num_prompt_tokens, num_output_tokens) -> Requests:
        """Fresh requests: nothing computed or sampled yet."""
        n = len(arrival_s)
        zeros = lambda: np.zeros(n, dtype=np.int64)  # noqa: E731
        return cls(
            np.asarray(arrival_s, dtype=np.float64),
            np.array(num_prompt_tokens, dtype=np.int64),
            np.array(num_output_tokens, dtype=np.int64),
            zeros(),
            zeros(),
            zeros(),
            np.full(n, math.nan),
            np.full(n, math.nan),
        )

    def __len__(self) -> int:
        return len(self.arrival_s)

    def rows(self) -> list[Request]:
        cols = (
            range(len(self)),
            self.arrival_s.tolist(),
            self.prompt.tolist(),
            self.max_tokens.tolist(),
            self.output.tolist(),
            self.computed.tolist(),
            self.preemptions.tolist(),
            self.first_token_s.tolist(),
            self.finish_s.tolist(),
        )
        return [Request(*values) for values in zip(*cols)]
