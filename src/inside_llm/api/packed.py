"""Compact numeric arrays on the wire (chapters 2 and 3): a float array as text, one base-64 digit per number.

Each number x becomes q = round(x / unit), `unit` being the array's colour scale / STEPS_PER_SCALE (the stage
paints |x| / scale, saturating at 1): -31 <= q <= 30 is one digit (DIGITS[q + 31]); a larger |q| below 2,048
is "+" then two digits of q + 2,048 (high first); beyond that, "/" then three digits of x's float16 bits.
So a decoded number is within unit / 2 of x (up to float16's 2^-11 of |x| for |x| >= 2,048 units), and most
of a residual stream's numbers (inside +-2 colour scales) take one character: about 5-6 bits after gzip,
where 4-significant-digit decimal JSON took 30. static/js/lib/packed.js decodes it; the alphabet is
chapter 6's page digits (api/kv_cache.py PAGE_DIGITS).
"""

from __future__ import annotations

import numpy as np
from pydantic import BaseModel, Field

DIGITS = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/"  # static/js/lib/packed.js
STEPS_PER_SCALE = 16  # units per colour scale: the step is 1/16 of the value that paints full colour
ONE = 31  # q in -31..30: one digit
TWO = 2048  # |q| < 2048: "+" and two digits


class Packed(BaseModel):
    """A [rows][cols] float array packed as text (api/packed.py; decoded by static/js/lib/packed.js)."""

    rows: int = Field(description="Number of rows (tokens).")
    cols: int = Field(description="Numbers per row.")
    unit: float = Field(description="The step: each number is a whole multiple of it, within unit/2 of the value.")
    text: str = Field(
        description="Row after row, one base-64 digit (A-Z a-z 0-9 + /) per number: digit d < 62 is (d - 31) units; "
        "'+' then two digits hi, lo is (64 hi + lo - 2048) units; '/' then three digits is a float16's 16 bits."
    )


_D = np.frombuffer(DIGITS, dtype=np.uint8)


def pack(a: np.ndarray, scale: float, steps: int = STEPS_PER_SCALE) -> dict:
    """Array a [rows, cols] as a Packed dict, its unit scale / steps (a 0 scale: unit 1)."""
    a = np.asarray(a, dtype=np.float32)
    rows, cols = a.shape if a.ndim == 2 else (1, a.size) if a.size else (0, 0)
    x = a.ravel()
    unit = float(f"{scale / steps:.4g}") if scale > 0 else 1.0
    q = np.rint(x / np.float32(unit)).astype(np.int64)
    one = (q >= -ONE) & (q <= ONE - 1)
    two = ~one & (np.abs(q) < TWO)
    three = ~one & ~two
    size = np.where(one, 1, np.where(two, 3, 4))
    start = np.cumsum(size) - size
    out = np.empty(int(size.sum()), dtype=np.uint8)
    out[start[one]] = _D[q[one] + ONE]
    s, v = start[two], q[two] + TWO
    out[s], out[s + 1], out[s + 2] = ord("+"), _D[v >> 6], _D[v & 63]
    s, b = start[three], x[three].astype(np.float16).view(np.uint16).astype(np.int64)
    out[s], out[s + 1], out[s + 2], out[s + 3] = ord("/"), _D[b >> 12], _D[(b >> 6) & 63], _D[b & 63]
    return {"rows": int(rows), "cols": int(cols), "unit": unit, "text": out.tobytes().decode("ascii")}


_INDEX = np.full(128, -1, dtype=np.int64)
_INDEX[_D] = np.arange(64)


def unpack(p: dict) -> np.ndarray:
    """A Packed dict back to a float32 array [rows, cols] (what static/js/lib/packed.js computes)."""
    d = _INDEX[np.frombuffer(p["text"].encode("ascii"), dtype=np.uint8)]
    out, i, n = [], 0, len(d)
    while i < n:
        if d[i] < 62:
            out.append((d[i] - ONE) * p["unit"])
            i += 1
        elif d[i] == 62:
            out.append((d[i + 1] * 64 + d[i + 2] - TWO) * p["unit"])
            i += 3
        else:
            bits = np.uint16((d[i + 1] << 12) | (d[i + 2] << 6) | d[i + 3])
            out.append(float(bits.view(np.float16)))
            i += 4
    return np.asarray(out, dtype=np.float32).reshape(p["rows"], p["cols"])
