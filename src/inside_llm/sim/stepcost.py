"""The engine's clock: how long one step takes, as a pluggable function of what the step computes.

step_time(num_prefill_tokens, num_decode_seqs, decode_context_tokens) -> seconds, where
num_prefill_tokens: prompt (or re-prefill) tokens computed this step, all requests together;
num_decode_seqs: requests computing exactly their one newest token;
decode_context_tokens: sum over those decode requests of the keys each attends to (its length).
Routers pass inside_llm.sim.costmodel's calibrated model; tests use SimpleStepCost.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any

StepTimeFn = Callable[[int, int, int], Any]


@dataclass(frozen=True)
class SimpleStepCost:
    """Default step_time: a roofline for a Llama-2-7B-sized model (FP16) on one H100 SXM.

    seconds = overhead_s + max(bytes read / (hbm_bytes_per_s * hbm_efficiency),
                               2 * params * tokens / (flops_per_s * math_efficiency))
    bytes read = weights + KV of every token attended (decode context + prefill tokens).
    A stand-in for inside_llm.sim.costmodel (routers pass the calibrated one); figures: H100 SXM
    datasheet (3.35 TB/s, 989 dense BF16 TFLOPS), Llama-2-7B config (6.74e9 params, 32 layers x
    4096 hidden x K and V x 2 bytes = 524,288 bytes of KV per token); efficiencies and overhead
    as the cost model's defaults (hbm 0.75, GEMM 0.62, 1 ms + 32 layers x 25 us per step).
    """

    params: float = 6.74e9
    weight_bytes: float = 13.5e9
    kv_bytes_per_token: float = 524_288.0
    hbm_bytes_per_s: float = 3.35e12
    flops_per_s: float = 989e12
    hbm_efficiency: float = 0.75
    math_efficiency: float = 0.62
    overhead_s: float = 1.8e-3

    def __call__(self, num_prefill_tokens: int, num_decode_seqs: int, decode_context_tokens: int) -> float:
        read = self.weight_bytes + self.kv_bytes_per_token * (decode_context_tokens + num_prefill_tokens)
        memory_s = read / (self.hbm_bytes_per_s * self.hbm_efficiency)
        math_s = 2.0 * self.params * (num_prefill_tokens + num_decode_seqs) / (self.flops_per_s * self.math_efficiency)
        return self.overhead_s + max(memory_s, math_s)


def seconds(step_time: StepTimeFn, p: int, d: int, c: int) -> float:
    """Call the cost function; accepts a float or an object with `.seconds` (costmodel.StepTime)."""
    out = step_time(p, d, c)
    out = float(getattr(out, "seconds", out))
    if not (out > 0 and math.isfinite(out)):
        raise ValueError(f"step_time must return a positive finite number of seconds, got {out!r}")
    return out


def describe_step_time(step_time: StepTimeFn) -> dict:
    """What clock a run used: the dataclass fields of a cost object, else the callable's name."""
    name = getattr(step_time, "__qualname__", None) or type(step_time).__qualname__
    out: dict = {"name": name}
    if is_dataclass(step_time) and not isinstance(step_time, type):
        out["params"] = asdict(step_time)
    if isinstance(step_time, SimpleStepCost):
        out["doc"] = " ".join((SimpleStepCost.__doc__ or "").split())
    return out
