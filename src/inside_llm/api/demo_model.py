"""The served models' web helpers, shared by chapters 2 and 3 and GET /api/generate.

Which shipped demo model is served, prompt checks that name the field and the bound, token rows (each
model token with the cl100k piece chapter 1 showed), and rounding that keeps payloads small. Also the
prompt chapters 2 and 3 share: which model reads it (`model=smollm2|toy`), its default, its bounds and
its params model.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from .. import modelfile
from ..sim.core.errors import SimError
from ..sim.model import tokenizer as tk
from ..sim.model.demo_vocab import byte_token_ids
from ..sim.model.transformer import DEMO_DIR, DemoConfig, DemoModel, load_model

MODEL_ORDER = ("main", "draft")  # serve main; its small draft stands in until main's weights are installed
MAX_PROMPT_TOKENS = 64  # the stage draws a column per token; longer prompts would not be readable
MAX_PROMPT_CHARS = 1000
DEFAULT_PROMPT = "The capital of France is"
SCALE_MODEL = "llama-3.1-70b"
MODEL_CHOICES = ("smollm2", "toy")


@lru_cache(maxsize=1)
def demo_model_name() -> str:
    """'main' when its weights are installed, else 'draft' (same API, smaller)."""
    return next((n for n in MODEL_ORDER if (DEMO_DIR / f"{n}.npz").is_file()), MODEL_ORDER[0])


def demo_model() -> DemoModel:
    return load_model(demo_model_name())


@lru_cache(maxsize=1)
def demo_config() -> DemoConfig:
    """The served model's config, read without loading its weights (for bounds at import time)."""
    with np.load(DEMO_DIR / f"{demo_model_name()}.npz", allow_pickle=False) as z:
        return DemoConfig(**json.loads(str(z["config_json"])))


def check_prompt(text: str, max_tokens: int, min_tokens: int = 1) -> str:
    """SimError on `prompt` unless text is min_tokens..max_tokens demo-model tokens."""
    n = len(demo_model().encode(text))
    if n < min_tokens:
        raise SimError("prompt", f"The prompt must hold at least {min_tokens} token.")
    if n > max_tokens:
        raise SimError("prompt", f"The prompt must be at most {max_tokens} tokens for the demo model; this one is {n}.")
    return text


def model_info(m: DemoModel) -> dict:
    c = m.config
    return {
        "name": m.name,
        "dim": c.dim,
        "n_layers": c.n_layers,
        "n_heads": c.n_heads,
        "n_kv_heads": c.n_kv_heads,
        "head_dim": c.head_dim,
        "ffn_dim": c.ffn_dim,
        "vocab_size": c.vocab_size,
        "max_seq_len": c.max_seq_len,
        "num_params": m.num_params,
    }


def piece_text(piece: bytes) -> str | None:
    try:
        return piece.decode("utf-8")
    except UnicodeDecodeError:
        return None


def prompt_tokens(m: DemoModel, text: str) -> tuple[list[int], list[dict], list[dict]]:
    """(model ids, chapter 1's cl100k pieces with in_vocab, one row per model token).

    A piece outside the demo vocabulary is spelled as its single-byte tokens (fallback=True on each).
    """
    known = m.vocab.cl100k  # [V] sorted cl100k ids
    enc = tk.get_encoding("cl100k_base")
    ids, pieces, rows = [], [], []
    for pi, c in enumerate(tk.encode(text, "cl100k_base")):
        raw = enc.decode_single_token_bytes(c)
        j = int(np.searchsorted(known, c))
        in_vocab = j < len(known) and int(known[j]) == c
        pieces.append({"id": c, "text": piece_text(raw), "bytes": raw.hex(" ").upper(), "in_vocab": in_vocab})
        for mid in [j] if in_vocab else _byte_ids(m, raw):
            p = m.piece(mid)
            rows.append(
                {
                    "index": len(ids),
                    "id": mid,
                    "cl100k_id": int(known[mid]),
                    "text": piece_text(p),
                    "bytes": p.hex(" ").upper(),
                    "piece": pi,
                    "fallback": not in_vocab,
                }
            )
            ids.append(mid)
    return ids, pieces, rows


@lru_cache(maxsize=1)
def _byte_cl100k() -> tuple[int, ...]:
    return tuple(byte_token_ids())


def _byte_ids(m: DemoModel, raw: bytes) -> list[int]:
    """Model ids of raw's single bytes (the vocabulary's fallback rule)."""
    return [int(np.searchsorted(m.vocab.cl100k, _byte_cl100k()[b])) for b in raw]


def sig(a, digits: int = 4):
    """Nested lists of floats rounded to `digits` significant digits (small, stable JSON)."""
    arr = np.asarray(a, dtype=np.float64)
    return [float(f"{x:.{digits}g}") for x in arr.ravel().tolist()] if arr.ndim == 1 else [sig(r, digits) for r in arr]


# ---- which model reads the prompt ------------------------------------------------------------


@dataclass(frozen=True)
class Served:
    """The model behind `model=`: the one asked for when it is on this server, else the toy, and why."""

    requested: str
    served: str  # "smollm2" | "toy"
    model: object  # the model object (the demo transformer's interface)
    note: str | None  # why the toy serves when smollm2 was asked for; None otherwise


def _real_model():
    """(SmolLM2-135M-Instruct, None) when its file is on this server, else (None, why not)."""
    m = modelfile.served_smollm()
    if m is None:
        return None, (
            f"SmolLM2-135M-Instruct is not on this server ({modelfile.HOW_TO_FETCH}); "
            "the toy model trained here serves meanwhile."
        )
    return m, None


def served_model(requested: str = "smollm2") -> Served:
    if requested == "smollm2":
        m, why = _real_model()
        if m is not None:
            return Served(requested, "smollm2", m, None)
        return Served(requested, "toy", demo_model(), why)
    return Served(requested, "toy", demo_model(), None)


def served_info(s: Served) -> dict:
    """model_info plus which model was asked for, which serves, why when they differ, and what each
    choice of `model` would serve (so a page can bound its layer and head controls before it asks)."""
    choices = {}
    for name in MODEL_CHOICES:
        o = served_model(name)
        choices[name] = {"served": o.served, "n_layers": o.model.config.n_layers, "n_heads": o.model.config.n_heads}
    return model_info(s.model) | {"requested": s.requested, "served": s.served, "note": s.note, "choices": choices}


def check_model_prompt(text: str, info: ValidationInfo, max_tokens: int) -> str:
    """SimError on `prompt` unless the text is at most max_tokens tokens of the model that serves."""
    s = served_model(info.data.get("model", "smollm2"))
    n = len(s.model.encode(text))
    if n > max_tokens:
        raise SimError(
            "prompt", f"The prompt must be at most {max_tokens} tokens for {served_name(s)}; this one is {n}."
        )
    return text


def model_tokens(s: Served, prompt: str) -> tuple[list[int], list[dict], list[dict]]:
    """(ids, chapter 1's cl100k pieces (toy only; [] otherwise), one row per model token)."""
    if s.served == "toy":
        return prompt_tokens(s.model, prompt)
    m, ids = s.model, s.model.encode(prompt)
    rows = [
        {
            "index": i,
            "id": t,
            "cl100k_id": None,
            "text": piece_text(m.piece(t)),
            "bytes": m.piece(t).hex(" ").upper(),
            "piece": i,
            "fallback": False,
        }
        for i, t in enumerate(ids)
    ]
    return ids, [], rows


MODEL_FIELD = Field(
    "smollm2",
    description="Which model reads the prompt: smollm2 (SmolLM2-135M-Instruct, when its "
    "file is on this server; otherwise the toy serves and the response says so) or toy (the 6M-parameter "
    "model trained here). No unit.",
)


class PromptParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: Literal["smollm2", "toy"] = MODEL_FIELD
    prompt: str = Field(
        DEFAULT_PROMPT,
        max_length=MAX_PROMPT_CHARS,
        description=(
            f"Text the model reads (characters; at most {MAX_PROMPT_CHARS:,}, and at most {MAX_PROMPT_TOKENS} "
            "tokens of the model that serves; empty gives an empty picture)."
        ),
    )

    @field_validator("prompt")
    @classmethod
    def _prompt(cls, v: str, info: ValidationInfo) -> str:
        return check_model_prompt(v, info, MAX_PROMPT_TOKENS)


def served_name(s: Served) -> str:
    """The served model in a fact sentence."""
    return "SmolLM2-135M-Instruct" if s.served == "smollm2" else "our toy model"
