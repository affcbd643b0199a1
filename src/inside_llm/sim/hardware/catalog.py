"""Catalog loader: GPUs, models, 8-GPU node facts and published references, from data/*.toml.

Everything is read once (functools.cache) and returned as frozen dataclasses. Look-ups by id raise
ValueError naming the field and the allowed ids, which the routers turn into 422s.

Demo-model hook: if `inside_llm/demo/model_card.json` exists, its models are merged into `models()`.
Two layouts are read: {"id", "name", "config": {<Hugging Face config.json fields>}}, or the demo
trainer's {"models": {"<key>": {"config": {dim, n_layers, n_heads, n_kv_heads, head_dim, ffn_dim,
vocab_size, max_seq_len}, "tied_embeddings": bool}}}, which becomes id "demo-<key>". Nothing else
is needed to make the demo model selectable wherever a catalog model is.
"""

from __future__ import annotations

import json
import math
import tomllib
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from types import MappingProxyType
from typing import Any

from ..core.errors import SimError
from ..model.models import ModelSpec, from_hf_config, param_counts
from .hardware import GPU

DATA_DIR = Path(__file__).parents[2] / "data"
DEMO_CARD = Path(__file__).parents[2] / "demo" / "model_card.json"
DEFAULT_GPU = "h100-sxm"
DEFAULT_MODEL = "llama-3.1-70b"


@dataclass(frozen=True)
class NodeSpec:
    """An 8-GPU HGX-style server: switch chips and per-GPU link bandwidths (see data/node.toml)."""

    gpu_id: str
    name: str
    gpus: int
    nvswitch_chips: int
    nvswitch_generation: int
    nvlink_links_per_gpu: int
    nvlink_bandwidth_gb_s: float  # per GPU, both directions
    nvlink_one_direction_gb_s: float
    allreduce_bus_bandwidth_gb_s: float | None = None  # NCCL busBw, ring, large messages
    allreduce_nvls_bus_bandwidth_gb_s: float | None = None
    sources: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)


@dataclass(frozen=True, kw_only=True)
class Reference:
    """A published measurement with its exact conditions (data/references.toml)."""

    id: str
    metric: str  # "tokens_per_s_total" | "ttft_ms" | "tpot_ms" | "e2e_latency_ms"
    measured: float
    model: str
    gpu: str
    gpus: int
    tp: int
    pp: int = 1
    precision: str
    kv_precision: str
    batch: int | None = None  # None: the engine chose it; predicted with the largest batch that fits
    max_batch: int | None = None  # the engine's batch cap when batch is None
    prompt_tokens: int
    output_tokens: int
    engine: str
    conditions: str
    source: str
    batching: str = "static"  # "continuous": in-flight batching at max load, predicted in steady state
    year: int = 0  # year the measurement was published
    in_scope: bool = True  # False: shown in the table, not held to the error bound (reason says why)
    out_of_scope_reason: str = ""


def _read(name: str) -> dict[str, Any]:
    with (DATA_DIR / name).open("rb") as fh:
        return tomllib.load(fh)


def _sourced_rows(name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """(id, fields) per row of a catalog file whose rows carry a [sources] table, the sources made read-only."""
    for key, row in _read(name).items():
        yield key, {**row, "sources": MappingProxyType(dict(row.get("sources", {})))}


@cache
def gpus() -> Mapping[str, GPU]:
    """All catalog GPUs by id (insertion order of gpus.toml)."""
    return MappingProxyType({gpu_id: GPU(id=gpu_id, **row) for gpu_id, row in _sourced_rows("gpus.toml")})


_DEMO_KEYS = {
    "dim": "hidden_size",
    "n_layers": "num_hidden_layers",
    "n_heads": "num_attention_heads",
    "n_kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "ffn_dim": "intermediate_size",
    "vocab_size": "vocab_size",
    "max_seq_len": "max_position_embeddings",
}


def _demo_entries(card: Mapping[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    """(id, name, HF-style config) for each model in a demo card, in either supported layout."""
    if "config" in card:  # {"id", "name", "config": {HF config.json fields}}
        model_id = str(card.get("id", "demo"))
        return [(model_id, str(card.get("name", model_id)), dict(card["config"]))]
    out = []
    for key, entry in (card.get("models") or {}).items():  # {"models": {"draft": {"config": {dim, ...}}}}
        cfg = {_DEMO_KEYS[k]: v for k, v in entry["config"].items() if k in _DEMO_KEYS}
        cfg["tie_word_embeddings"] = bool(entry.get("tied_embeddings", False))
        out.append((f"demo-{key}", f"Demo {key} model (tiny Shakespeare transformer)", cfg))
    return out


def _demo_models() -> dict[str, ModelSpec]:
    """The demo model(s) from inside_llm/demo/model_card.json; a missing or malformed card adds none."""
    if not DEMO_CARD.is_file():
        return {}
    try:
        card = json.loads(DEMO_CARD.read_text())
        return {
            mid: from_hf_config(cfg, model_id=mid, name=name, source="inside_llm/demo/model_card.json")
            for mid, name, cfg in _demo_entries(card)
        }
    except (ValueError, KeyError, TypeError, AttributeError):
        return {}


@cache
def models() -> Mapping[str, ModelSpec]:
    """All catalog models by id, the demo model merged in when its card exists."""
    out: dict[str, ModelSpec] = {}
    for model_id, row in _read("models.toml").items():
        row = dict(row)
        row.setdefault("head_dim", row["hidden_size"] // row["num_attention_heads"])
        out[model_id] = ModelSpec(id=model_id, **row)
    out.update(_demo_models())
    return MappingProxyType(out)


@cache
def nodes() -> Mapping[str, NodeSpec]:
    """8-GPU node facts keyed by GPU id (only GPUs sold on an HGX-style baseboard)."""
    return MappingProxyType({gpu_id: NodeSpec(gpu_id=gpu_id, **row) for gpu_id, row in _sourced_rows("node.toml")})


@cache
def references() -> tuple[Reference, ...]:
    """Published measurements used to calibrate the cost model, in file order."""
    return tuple(Reference(id=ref_id, **row) for ref_id, row in _read("references.toml").items())


def _lookup(table: Mapping[str, Any], key: str, field_name: str) -> Any:
    if key not in table:
        raise SimError(field_name, f"{field_name} must be one of {', '.join(table)}, not '{key}'.")
    return table[key]


def gpu(gpu_id: str = DEFAULT_GPU) -> GPU:
    """A catalog GPU by id; ValueError names the field `gpu` and the allowed ids."""
    return _lookup(gpus(), gpu_id, "gpu")


def model(model_id: str = DEFAULT_MODEL) -> ModelSpec:
    """A catalog model by id; ValueError names the field `model` and the allowed ids."""
    return _lookup(models(), model_id, "model")


def node(gpu_id: str = DEFAULT_GPU) -> NodeSpec | None:
    """The 8-GPU node for a GPU id, or None when the catalog has none (PCIe cards, custom GPUs)."""
    return nodes().get(gpu_id)


MAX_HF_NUMBER = 2**40  # no architecture field comes near (the largest, vocab and context, are about 2^18)


def check_hf_numbers(cfg: Mapping[str, Any]) -> None:
    """Refuse what Python's json reads but no config.json holds, before from_hf_config does arithmetic on it:
    Infinity, -Infinity and NaN, numbers beyond +-2^40 (1e300, 10^400) and an `architectures` that is not a
    list of names. SimError names the field (inside text_config by its own name) and the bound."""
    for where in (cfg, cfg.get("text_config")):
        if not isinstance(where, Mapping):
            continue
        for key, value in where.items():
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            if isinstance(value, float) and not math.isfinite(value):
                raise SimError(key, f"config.json field '{key}' must be a finite number, not {value}.")
            if abs(value) > MAX_HF_NUMBER:
                raise SimError(
                    key, f"config.json field '{key}' must be at most {MAX_HF_NUMBER:,} (2^40) in size; it is larger."
                )
        archs = where.get("architectures")
        if archs is not None and not (isinstance(archs, list) and all(isinstance(a, str) for a in archs)):
            raise SimError(
                "architectures",
                "config.json field 'architectures' must be a list of names, e.g. [\"LlamaForCausalLM\"].",
            )


def model_summary(m: ModelSpec) -> dict[str, Any]:
    """JSON-ready model row with computed parameter counts (billions) next to the published ones."""
    pc = param_counts(m)
    row = {k: getattr(m, k) for k in ModelSpec.__dataclass_fields__}
    row.update(params_b=round(pc.total / 1e9, 3), active_params_b=round(pc.active / 1e9, 3), is_moe=m.is_moe)
    return row


def gpu_summary(g: GPU) -> dict[str, Any]:
    """JSON-ready GPU row, sources included."""
    row = {k: getattr(g, k) for k in GPU.__dataclass_fields__ if k != "sources"}
    row["sources"] = dict(g.sources)
    return row


def catalog_dict() -> dict[str, Any]:
    """The whole catalog as plain JSON-able data (for GET /api/catalog)."""
    return {
        "defaults": {"gpu": DEFAULT_GPU, "model": DEFAULT_MODEL},
        "gpus": [gpu_summary(g) for g in gpus().values()],
        "models": [model_summary(m) for m in models().values()],
        "nodes": [
            {**{k: getattr(n, k) for k in NodeSpec.__dataclass_fields__ if k != "sources"}, "sources": dict(n.sources)}
            for n in nodes().values()
        ],
    }
