"""api/packed.py: float arrays as one base-64 digit per number (chapters 2 and 3), and the byte budget of both
chapters' bodies at the longest prompt they take."""

from __future__ import annotations

import gzip

import numpy as np
import pytest

from inside_llm.api.demo_model import MAX_PROMPT_TOKENS, served_model
from inside_llm.api.embeddings import embeddings_json
from inside_llm.api.layer import layer_json
from inside_llm.api.packed import STEPS_PER_SCALE, pack, unpack

PROSE = (  # bench/bench_pages_questions.py's: MAX_PROMPT_TOKENS tokens of it, prose (a repeated word packs smaller)
    "The river runs past the old mill and under the stone bridge, where children stop to watch the water "
    "turn the wheel. In spring the banks fill with yellow flowers, and in autumn the leaves drift down "
    "and gather in the shallows until the first storms of winter carry them away to the sea, far beyond "
    "the hills that keep the valley warm and green through every season of the year."
)
BUDGET = {"embeddings": 75_000, "layer": 200_000}  # gzip bytes of a body at LONG (see docs/design-as-built.md)


def tolerance(x: np.ndarray, unit: float) -> np.ndarray:
    """The stated bound: half a unit, or float16's 2^-11 of |x| for the numbers past 2,048 units."""
    return np.maximum(unit / 2 * 1.0001, np.abs(x) * 2.0**-11)


def test_round_trip_within_half_a_unit_and_float16_for_the_outliers():
    rng = np.random.default_rng(0)
    x = rng.normal(0, 1, (7, 576)).astype(np.float32)
    x[0, :3] = [900.0, -1234.5, 31000.0]  # an attention sink's outsized numbers: past 2,048 units
    x[1, :4] = [2.3, -2.1, 40.0, -60.0]  # a few units out: "+" and two digits
    p = pack(x, 1.0)
    assert p["unit"] == 1 / STEPS_PER_SCALE and (p["rows"], p["cols"]) == x.shape
    y = unpack(p)
    assert y.shape == x.shape and y.dtype == np.float32
    assert np.all(np.abs(y - x) <= tolerance(x, p["unit"]))
    one = np.abs(np.rint(x / p["unit"])) <= 30
    assert len(p["text"]) < x.size + 3 * (~one).sum() + 1, "one character for a number within 30 units"
    assert set(p["text"]) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/")


def test_empty_and_zero_scale():
    p = pack(np.zeros((0, 576), np.float32), 0.0)
    assert p == {"rows": 0, "cols": 576, "unit": 1.0, "text": ""} and unpack(p).shape == (0, 576)
    assert np.array_equal(unpack(pack(np.zeros((2, 3)), 0.0)), np.zeros((2, 3)))


@pytest.mark.parametrize("chapter", ["embeddings", "layer"])
def test_a_body_at_the_longest_prompt_stays_within_its_byte_budget(chapter):
    s = served_model("smollm2")
    long = s.model.decode(s.model.encode(PROSE)[:MAX_PROMPT_TOKENS])
    assert len(s.model.encode(long)) == MAX_PROMPT_TOKENS
    body = embeddings_json(long) if chapter == "embeddings" else layer_json(long, s.model.config.n_layers - 1)
    size = len(gzip.compress(body, 6))
    assert size <= BUDGET[chapter], f"{chapter}: {size:,} gzip bytes at {MAX_PROMPT_TOKENS} tokens"
