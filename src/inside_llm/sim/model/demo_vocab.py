"""The demo model's vocabulary: a subset of cl100k_base, with a byte fallback.

The demo transformer reads the same cl100k_base pieces that chapter 1 shows, but only those it
could learn: every cl100k id that occurs in the training text, plus the 256 single-byte cl100k
tokens. Model ids 0..V-1 index that list in ascending cl100k order.

Fallback rule: text is first split by cl100k as usual; any cl100k piece that is not in the
vocabulary is replaced by the single-byte tokens of its UTF-8 bytes, one model id per byte.
So no input is ever unknown and decode(encode(text)) == text for every string.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np

from inside_llm.sim.model.tokenizer import encode as cl100k_encode
from inside_llm.sim.model.tokenizer import get_encoding

ENCODING = "cl100k_base"


def byte_token_ids() -> list[int]:
    """The 256 cl100k ids whose piece is exactly one byte, indexed by that byte's value."""
    enc = get_encoding(ENCODING)
    return [enc.encode_single_token(bytes([b])) for b in range(256)]


def build_vocab(training_text: str) -> np.ndarray:
    """Sorted cl100k ids [V] (int32): every id used by training_text plus the 256 byte tokens."""
    used = set(cl100k_encode(training_text, ENCODING))
    return np.array(sorted(used | set(byte_token_ids())), dtype=np.int32)


class DemoVocab:
    """Maps text <-> model ids through cl100k_base, with the byte fallback of the module docstring.

    Invariant: cl100k[model_id] is the cl100k id of model_id; it is strictly increasing.
    """

    def __init__(self, cl100k: np.ndarray):
        self.cl100k = np.asarray(cl100k, dtype=np.int64)  # [V] model id -> cl100k id
        self._to_model = {int(c): i for i, c in enumerate(self.cl100k)}  # cl100k id -> model id
        missing = [b for b in byte_token_ids() if b not in self._to_model]
        if missing:
            raise ValueError(f"vocabulary lacks {len(missing)} single-byte tokens; fallback impossible")
        self._byte_ids = [self._to_model[c] for c in byte_token_ids()]  # byte value -> model id
        enc = get_encoding(ENCODING)
        self._pieces = [enc.decode_single_token_bytes(int(c)) for c in self.cl100k]  # [V] bytes

    @property
    def size(self) -> int:
        return len(self.cl100k)

    def encode(self, text: str) -> list[int]:
        """Model ids for text: cl100k pieces, unknown pieces spelled out byte by byte."""
        ids, _ = self.encode_with_stats(text)
        return ids

    def encode_with_stats(self, text: str) -> tuple[list[int], int]:
        """(model ids, number of cl100k pieces that needed the byte fallback)."""
        enc = get_encoding(ENCODING)
        out: list[int] = []
        num_fallback = 0
        for c in cl100k_encode(text, ENCODING):
            mid = self._to_model.get(c)
            if mid is not None:
                out.append(mid)
            else:
                num_fallback += 1
                out.extend(self._byte_ids[b] for b in enc.decode_single_token_bytes(c))
        return out, num_fallback

    def piece(self, model_id: int) -> bytes:
        """The bytes that model_id stands for (may be a partial UTF-8 sequence)."""
        return self._pieces[model_id]

    def decode_bytes(self, ids: Iterable[int]) -> bytes:
        return b"".join(self._pieces[i] for i in ids)

    def decode(self, ids: Iterable[int]) -> str:
        """Text for model ids; a cut-off UTF-8 sequence at the end decodes to U+FFFD."""
        return self.decode_bytes(ids).decode("utf-8", errors="replace")

    def cl100k_ids(self, ids: Iterable[int]) -> list[int]:
        """The cl100k_base id of each model id (what chapter 1's tokenizer shows)."""
        return [int(self.cl100k[i]) for i in ids]
