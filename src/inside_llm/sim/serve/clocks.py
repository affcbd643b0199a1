"""The serving core's executors are clocks: a clock runs a StepPlan by saying how long it took.

`Executor(step_time).execute(plan)` fills plan.durations, plan.end_s and plan.k (a decode run's steps);
chapter 7 runs the calibrated cost model (CostModelClock), tests SimpleStepCost; `UnitClock` makes every
step last 1 (chapter 6's unit of time: one step = one token per resident request).

step_time(num_prefill_tokens, num_decode_seqs, decode_context_tokens) -> seconds, where
num_prefill_tokens: prompt (or re-prefill) tokens computed this step, all requests together;
num_decode_seqs: requests computing exactly their one newest token;
decode_context_tokens: sum over those decode requests of the keys each attends to (its length).
Routers pass inside_llm.sim.cost.costmodel's calibrated model; tests use SimpleStepCost.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, is_dataclass
from typing import Any

import numpy as np

from inside_llm.sim.cost.costmodel import Efficiency, EngineConfig, StepTime, step_time

StepTimeFn = Callable[[int, int, int], Any]


@dataclass(frozen=True)
class SimpleStepCost:
    """Default step_time: a roofline for a Llama-2-7B-sized model (FP16) on one H100 SXM.

    seconds = overhead_s + max(bytes read / (hbm_bytes_per_s * hbm_efficiency),
                               2 * params * tokens / (flops_per_s * math_efficiency))
    bytes read = weights + KV of every token attended (decode context + prefill tokens).
    A stand-in for inside_llm.sim.cost.costmodel (routers pass the calibrated one); figures: H100 SXM
    datasheet (3.35 TB/s, 989 dense BF16 TFLOPS), Llama-2-7B config (6.74e9 params, 32 layers x
    4096 hidden x K and V x 2 bytes = 524,288 bytes of KV per token); efficiencies and overhead
    are the cost model's own (Efficiency: hbm 0.75, GEMM 0.62, 1 ms + 32 layers x 25 us per step).
    """

    params: float = 6.74e9
    weight_bytes: float = 13.5e9
    kv_bytes_per_token: float = 524_288.0
    hbm_bytes_per_s: float = 3.35e12
    flops_per_s: float = 989e12
    hbm_efficiency: float = Efficiency.hbm
    math_efficiency: float = Efficiency.gemm_compute_bf16
    overhead_s: float = Efficiency.step_overhead_s + 32 * Efficiency.per_layer_overhead_s  # 32 layers

    def __call__(self, num_prefill_tokens: int, num_decode_seqs: int, decode_context_tokens: int) -> float:
        return float(self._seconds(num_prefill_tokens, num_decode_seqs, decode_context_tokens))

    def decode_seconds(self, num_decode_seqs: int, contexts: np.ndarray) -> np.ndarray:
        """Pure-decode steps at each total context, in one numpy call (the same floats as __call__)."""
        return self._seconds(0, num_decode_seqs, np.asarray(contexts, dtype=np.int64))

    def _seconds(self, num_prefill_tokens, num_decode_seqs, decode_context_tokens):
        read = self.weight_bytes + self.kv_bytes_per_token * (decode_context_tokens + num_prefill_tokens)
        memory_s = read / (self.hbm_bytes_per_s * self.hbm_efficiency)
        math_s = 2.0 * self.params * (num_prefill_tokens + num_decode_seqs) / (self.flops_per_s * self.math_efficiency)
        return self.overhead_s + np.maximum(memory_s, math_s)


def seconds(step_time: StepTimeFn, p: int, d: int, c: int) -> float:
    """Call the cost function; accepts a float or an object with `.seconds` (costmodel.StepTime)."""
    out = step_time(p, d, c)
    out = float(getattr(out, "seconds", out))
    if not (out > 0 and math.isfinite(out)):
        raise ValueError(f"step_time must return a positive finite number of seconds, got {out!r}")
    return out


def describe_step_time(step_time: StepTimeFn) -> dict:
    """What clock a run used: the dataclass fields of a cost object, else the callable's name."""
    if hasattr(step_time, "describe"):
        return step_time.describe()
    name = getattr(step_time, "__qualname__", None) or type(step_time).__qualname__
    out: dict = {"name": name}
    if is_dataclass(step_time) and not isinstance(step_time, type):
        out["params"] = asdict(step_time)
    if isinstance(step_time, SimpleStepCost):
        out["doc"] = " ".join((SimpleStepCost.__doc__ or "").split())
    return out


def decode_run_seconds(
    step_time: StepTimeFn, num_seqs: int, context_tokens: int, max_steps: int, start_s: float, stop_at_s: float
) -> tuple[list[float], float]:
    """Up to max_steps pure-decode steps of num_seqs requests whose contexts total context_tokens
    before the run (each step adds num_seqs), stopping after the first step that ends at or after
    stop_at_s. Returns (durations, end time); the end is the same float sum as stepping one by one.

    A clock with `decode_seconds(num_seqs, contexts: ndarray) -> ndarray` is called once per batch of
    steps; any other is called step by step.
    """
    vector = getattr(step_time, "decode_seconds", None)
    if vector is None:
        out, t = [], start_s
        for j in range(1, max_steps + 1):
            out.append(seconds(step_time, 0, num_seqs, context_tokens + j * num_seqs))
            t += out[-1]
            if t >= stop_at_s:
                break
        return out, t
    n_eval = max_steps if math.isinf(stop_at_s) else min(max_steps, 64)  # an arrival stops runs early
    while True:
        contexts = context_tokens + num_seqs * np.arange(1, n_eval + 1, dtype=np.int64)
        d = np.asarray(vector(num_seqs, contexts), dtype=np.float64)
        if not (d.min() > 0 and math.isfinite(d.sum())):
            raise ValueError("step_time.decode_seconds must return positive finite seconds")
        ends = np.cumsum(np.concatenate(([start_s], d)))[1:]  # sequential sums, as t += d
        k = int(np.searchsorted(ends, stop_at_s, side="left")) + 1
        if k <= n_eval or n_eval == max_steps:
            k = min(k, n_eval)
            return d[:k].tolist(), float(ends[k - 1])
        n_eval = min(max_steps, 2 * n_eval)


class CostModelClock:
    """The calibrated cost model (costmodel.step_time) as the engine's clock, for one EngineConfig."""

    def __init__(self, config: EngineConfig):
        self.config = config
        self._decode_lines: dict[int, tuple[float, float]] = {}

    def __call__(self, num_prefill_tokens: int, num_decode_seqs: int, decode_context_tokens: int) -> StepTime:
        return step_time(self.config, num_prefill_tokens, num_decode_seqs, decode_context_tokens)

    def describe(self) -> dict:
        c = self.config
        return {
            "name": "costmodel.step_time",
            "model": c.model.name,
            "gpu": c.gpu.name,
            "tp": c.tp,
            "pp": c.pp,
            "precision": c.precision,
            "kv_precision": c.kv_precision,
        }

    def decode_seconds(self, num_decode_seqs: int, contexts: np.ndarray) -> np.ndarray:
        """Pure-decode steps at each total context, in one numpy call. In the cost model only the
        attention kernel depends on the context, and both of its roofs (FLOPs and KV bytes) grow in
        proportion to it, so a step is (its time at no context) + (seconds per key) x context.
        tests/sim/serve/test_scheduler.py checks this against step_time."""
        line = self._decode_lines.get(num_decode_seqs)
        if line is None:
            base = step_time(self.config, 0, num_decode_seqs, 0)
            ref = step_time(self.config, 0, num_decode_seqs, REFERENCE_CONTEXT)
            line = self._decode_lines[num_decode_seqs] = (
                base.seconds,
                (ref.attention_s - base.attention_s) / REFERENCE_CONTEXT,
            )
        return line[0] + line[1] * np.asarray(contexts, dtype=np.float64)


REFERENCE_CONTEXT = 1 << 20


class UnitClock:
    """Every step lasts one unit (chapter 6: time counted in steps)."""

    def __call__(self, num_prefill_tokens: int, num_decode_seqs: int, decode_context_tokens: int) -> float:
        return 1.0

    def decode_seconds(self, num_decode_seqs: int, contexts: np.ndarray) -> np.ndarray:
        return np.ones(len(contexts))

    def describe(self) -> dict:
        return {"name": "unit", "doc": "one step = one unit of time"}


class Executor:
    """Runs a scheduler's StepPlan on a step_time clock: one step, or a decode run of up to plan.k_max
    steps that stops after the first to end at or after plan.stop_at_s."""

    def __init__(self, step_time: StepTimeFn):
        self.step_time = step_time

    def execute(self, plan) -> None:
        if plan.decode_run:
            plan.durations, plan.end_s = decode_run_seconds(
                self.step_time, len(plan.ids), int(plan.computed.sum()), plan.k_max, plan.start_s, plan.stop_at_s
            )
            plan.k = len(plan.durations)
        else:
            d = seconds(self.step_time, plan.num_prefill_tokens, plan.num_decode_seqs, plan.decode_context_tokens)
            plan.durations, plan.end_s = [d], plan.start_s + d
