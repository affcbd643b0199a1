"""Chapter 8, smaller numbers: GET /api/quantization -> model size, GPUs, speed and cost per precision,
a real weight tile in every format, published perplexities (with sources) and the demo model's own.

Sizes and speeds come from the cost model (sim.cost.costmodel, sim.cost.serving); perplexities from
data/quantization.toml (published) and sim.quant.demo_quality (measured on the demo model, weights really
quantized). The weight tile is the top-left 8x8 corner of the served model's first query matrix
(SmolLM2-135M-Instruct's, as its file's Q4_1 blocks decode, when it is on this server; else the toy's),
quantized along its input axis exactly as for the perplexity measurement.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Query
from pydantic import BaseModel, ConfigDict, Field

from ..sim.core.derivation import derive
from ..sim.core.errors import SimError
from ..sim.core.result import as_json
from ..sim.cost import serving
from ..sim.cost.costmodel import GB, EngineConfig, memory_per_gpu
from ..sim.hardware import catalog
from ..sim.hardware.hardware import FORMATS
from ..sim.model.transformer import load_model
from ..sim.quant import demo_quality, real_quality
from ..sim.quant import quantization as qz
from .common import GpuId, Math, ModelId
from .demo_model import served_model, served_name

router = APIRouter(tags=["8 · quantization"])

Precision = Literal["bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4"]
PRECISIONS = ("bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4")
PROMPT_TOKENS, OUTPUT_TOKENS = 1024, 256  # the dials' default request
TP_CHOICES = (1, 2, 4, 8, 16, 32, 64)
MAX_BATCH = 256
TILE = 8  # the tile is TILE x TILE weights
PUBLISHED_MODEL = "LLaMA-65B"
DEMO_MODEL = "main"  # the shipped demo transformer measured for the second needle
# which published row the large-model needle shows for each precision (same recipe family as the demo); FP4 has
# no published LLaMA-65B WikiText-2 row in our sources, so that needle rests and its card says so
NEEDLE_ROW = {
    "bf16": ("gptq-readme", "fp16"),
    "fp8": ("estimate-fp8", "fp8"),
    "int8": ("smoothquant-table6", "int8"),
    "int4": ("awq-table4", "RTN"),
}


class QuantizationParams(BaseModel):
    model_config = ConfigDict(extra="forbid")
    model: ModelId = Field(catalog.DEFAULT_MODEL, description="Catalog model id.")
    gpu: GpuId = Field(catalog.DEFAULT_GPU, description="Catalog GPU id.")
    precision: Precision = Field(
        "int4",
        description="Weight format: bf16 | fp8 | int8 (per channel) | int4 (group 128) | nvfp4 (E2M1, E4M3 scale "
        "per 16 + FP32 per tensor) | mxfp4 (E2M1, E8M0 scale per 32).",
    )
    batch: int = Field(
        16,
        ge=1,
        le=MAX_BATCH,
        description=f"Chats decoded together (sequences; 1-{MAX_BATCH}), "
        f"each {PROMPT_TOKENS} prompt + {OUTPUT_TOKENS} answer tokens.",
    )


class QuantizationResponse(BaseModel):
    model: str
    model_name: str
    gpu: str
    gpu_name: str
    precision: str
    batch: int
    weights_gb: float = Field(description="Whole model at this precision, GB (1e9 bytes).")
    bits_per_weight: float
    size_ratio: float = Field(description="weights_gb / the 16-bit model's weights_gb.")
    gpus_needed: int | None = Field(description="Fewest GPUs (tensor parallel) that hold it; null if over 64.")
    same_gpus: int | None = Field(
        description="GPU count every format is also compared on: the count the largest "
        "format needs (null if that is over 64)."
    )
    tokens_per_s_per_user_same_gpus: float | None = Field(
        description="Tokens/s per chat at this precision on same_gpus."
    )
    speedup_same_gpus: float | None = Field(description="tokens_per_s_per_user_same_gpus / BF16's on the same GPUs.")
    gpu_capacity_gb: float
    tokens_per_s_per_user: float | None
    ttft_ms: float | None
    cost_per_million_tokens_usd: float | None
    rows: list[dict]
    tile: dict
    published: list[dict]
    published_model: str
    demo: list[dict]
    demo_extra: list[dict]
    demo_info: dict
    real: dict | None = Field(
        description="SmolLM2 (the model on this server) measured offline: its file's Q4_1 "
        "weights as the baseline and each further quantization, and `served`: the int8 form the engine "
        "decodes from, on the same windows (demo/smollm2_quality.json)"
    )
    needles: dict
    math: Math


def _cfg(model: str, gpu: str, precision: str, tp: int = 1) -> EngineConfig:
    return EngineConfig(catalog.model(model), catalog.gpu(gpu), tp, 1, precision)


def _valid_tp(model: str, gpu: str, precision: str, tp: int) -> bool:
    try:
        _cfg(model, gpu, precision, tp)
        return True
    except ValueError:
        return False


def gpus_needed(model: str, gpu: str, precision: str, batch: int) -> int | None:
    """Fewest tensor-parallel GPUs whose memory holds weights + KV for `batch` chats + reserve."""
    for tp in TP_CHOICES:
        if (
            _valid_tp(model, gpu, precision, tp)
            and memory_per_gpu(_cfg(model, gpu, precision, tp), batch, PROMPT_TOKENS + OUTPUT_TOKENS).fits
        ):
            return tp
    return None


def _serving(model: str, gpu: str, precision: str, batch: int, n: int | None) -> serving.ServingEstimate | None:
    if n is None:
        return None
    return serving.estimate(
        serving.ServingParams(
            model=model,
            gpu=gpu,
            gpus=n,
            tp=n,
            precision=precision,
            batch=batch,
            prompt_tokens=PROMPT_TOKENS,
            output_tokens=OUTPUT_TOKENS,
        )
    )


def _fits(model: str, gpu: str, precision: str, batch: int, n: int) -> bool:
    return (
        _valid_tp(model, gpu, precision, n)
        and memory_per_gpu(_cfg(model, gpu, precision, n), batch, PROMPT_TOKENS + OUTPUT_TOKENS).fits
    )


def _row(model: str, gpu: str, precision: str, batch: int, same_gpus: int | None = None) -> dict[str, Any]:
    """One format on its fewest GPUs, and (same_gpus) on a count every format fits on."""
    cfg = _cfg(model, gpu, precision)
    n = gpus_needed(model, gpu, precision, batch)
    est = _serving(model, gpu, precision, batch, n)
    same = (
        _serving(model, gpu, precision, batch, same_gpus)
        if same_gpus and _fits(model, gpu, precision, batch, same_gpus)
        else None
    )
    return {
        "precision": precision,
        "bits_per_weight": cfg.shard.wbytes * 8,
        "weights_gb": cfg.shard.weight_bytes / GB,
        "gpus_needed": n,
        "tokens_per_s_per_user": est.tokens_per_s_per_user if est else None,
        "tokens_per_s_per_gpu": est.tokens_per_s_per_user * batch / n if est and n else None,
        "ttft_ms": est.ttft_ms if est else None,
        "cost_per_million_tokens_usd": est.cost_per_million_tokens_usd if est else None,
        "tokens_per_s_per_user_same_gpus": same.tokens_per_s_per_user if same else None,
    }


def rows_for(model: str, gpu: str, batch: int) -> tuple[list[dict[str, Any]], int | None]:
    """Every format's row, and the GPU count they are compared on: the count the largest format needs."""
    needs = [gpus_needed(model, gpu, p, batch) for p in PRECISIONS]
    same = None if None in needs else max(needs)
    rows = [_row(model, gpu, p, batch, same) for p in PRECISIONS]
    base = rows[0]["tokens_per_s_per_user_same_gpus"]
    for r in rows:
        v = r["tokens_per_s_per_user_same_gpus"]
        r["speedup_same_gpus"] = v / base if v and base else None
    return rows, same


# ---- the weight tile: real weights, every bit (sim.quant.quantization.weight_tile) ---------------------


@lru_cache(maxsize=1)
def weight_tile() -> dict[str, Any]:
    """Top-left TILE x TILE of the served model's layer-1 query matrix in each format: SmolLM2's (its file's
    Q4_1 blocks, decoded) when it is on this server, else the toy's (float32 of float16)."""
    served = served_model("smollm2")
    full = served.model.layers[0].wq  # [dim_in, q_out]
    name = served_name(served)
    stored = "the file's 4-bit Q4_1 blocks, decoded" if served.served == "smollm2" else "float32, trained here"
    return {
        "model": served.served,
        "model_name": name,
        "stored_as": stored,
        "source": f"{name}, layer 1, query projection wq [in, out] ({stored}): input rows 1-8 x output columns 1-8",
        **qz.weight_tile(full, TILE, demo_quality.GROUP_SIZE),
    }


# ---- perplexities: published (with sources) and the demo model's own -----------------------------


def published() -> list[dict[str, Any]]:
    """Every published row, each with its own table's 16-bit baseline (value and source) and the change from it."""
    rows = qz.published_perplexities()
    fp16 = {(r["source_key"], r["model"]): r for r in rows if r["precision"] == "fp16"}
    out = []
    for r in rows:
        b = fp16.get((r["source_key"], r["model"]))
        value = r.get("baseline") or (b["perplexity"] if b else None)
        origin = b or next(
            (x for x in rows if x["model"] == r["model"] and x["precision"] == "fp16" and x["perplexity"] == value),
            None,
        )
        out.append(
            {
                **r,
                "baseline": value,
                "relative_change": r["perplexity"] / value - 1 if value else None,
                "baseline_source": origin["source"] if origin else None,
                "baseline_context_tokens": origin["context_tokens"] if origin else None,
            }
        )
    return out


def _baseline_note(pick: dict[str, Any], reference: float) -> str:
    """Which 16-bit perplexity this row is measured against, and why (in words, numbers from the rows)."""
    b = pick["baseline"]
    paper = ",".join((pick["baseline_source"] or "").split(",")[:2])
    where = (
        f"FP16 in {paper}"
        if pick["estimate"] or pick["precision"] == "fp16"
        else f"the FP16 row of the same table ({paper})"
    )
    ctx = pick["baseline_context_tokens"]
    note = f"Baseline {b:.2f}: {where}" + (f", scored in windows of {ctx:,} tokens." if ctx else ".")
    if pick["precision"] == "fp16":
        note += " The tables report FP16, which stores 16 bits like BF16."
    if abs(b - reference) > 1e-9:
        note += (
            f" Not the {reference:.2f} of GPTQ and AWQ: {pick.get('context_note') or 'another evaluation setting'}."
            " A paper's quantized result is compared only with its own FP16, so the change is what carries over."
        )
    if pick.get("note"):
        note += f" {pick['note']}"
    return note


def _published_needle(precision: str, rows: list[dict]) -> dict[str, Any] | None:
    if precision not in NEEDLE_ROW:
        return None
    key, method = NEEDLE_ROW[precision]
    mine = [r for r in rows if r["model"] == PUBLISHED_MODEL]
    pick = next(
        r for r in mine if r["source_key"] == key and (r["precision"] == method or r["method"].startswith(method))
    )
    others = [r for r in mine if r["precision"] == pick["precision"] and r is not pick and r["precision"] != "fp16"]
    reference = next(
        r["perplexity"] for r in mine if r["source_key"] == NEEDLE_ROW["bf16"][0] and r["precision"] == "fp16"
    )
    return {**pick, "others": others, "reference_baseline": reference, "baseline_note": _baseline_note(pick, reference)}


def demo_rows() -> tuple[list[dict], list[dict], dict]:
    """(demo list per precision, extra variants, info) from sim.quant.demo_quality (precomputed, checked by a test)."""
    q = demo_quality.quality(DEMO_MODEL)
    by = {v["variant"]: v for v in q["variants"]}
    base = by["fp16"]["perplexity"]

    def row(v: dict, precision: str) -> dict:
        return {
            "precision": precision,
            "variant": v["variant"],
            "perplexity": v["perplexity"],
            "relative_change": v["perplexity"] / base - 1,
            "relative_change_se": v["delta_nll_se"],
            "bits_per_weight": v["bits_per_weight"],
            "method": v["method"],
            "tokens": v["tokens"],
        }

    demo = [row(by[p], p) for p in ("fp16", *PRECISIONS)]
    extra = [row(by[v], by[v]["variant"].split("_")[0]) for v in ("int4_per_channel", "int3", "int2")]
    card = load_model(DEMO_MODEL)
    info = {
        "model": DEMO_MODEL,
        "params": card.num_params,
        "tokens": by["fp16"]["tokens"],
        "windows": by["fp16"]["windows"],
        "window_tokens": q["window_tokens"],
        "recipe": q["recipe"],
        "text": "Tiny Shakespeare, held-out last 10%",
    }
    return demo, extra, info


def real_rows() -> dict[str, Any] | None:
    """The real model's stored measurement, as the chapter shows it (baseline first)."""
    q = real_quality.stored()
    if q is None:
        return None
    keep = ("variant", "method", "bits_per_weight", "perplexity", "relative_change", "delta_nll", "delta_nll_se")
    return {
        "model": q["model"],
        "file": q["file"],
        "file_sha256": q["file_sha256"],
        "num_params": q["num_params"],
        "text": q["text"],
        "tokens": q["variants"][0]["tokens"],
        "windows": q["windows"],
        "window_tokens": q["window_tokens"],
        "command": q["command"],
        "rows": [{k: v[k] for k in keep} for v in q["variants"]],
        "served": None if "served" not in q else {k: v for k, v in q["served"].items() if k != "window_nll"},
    }


# ---- the endpoint ---------------------------------------------------------------------------------


@lru_cache(maxsize=256)
def quantization(model: str, gpu: str, precision: str, batch: int) -> dict[str, Any]:
    rows, same_gpus = rows_for(model, gpu, batch)
    me = next(r for r in rows if r["precision"] == precision)
    pub = published()
    demo, extra, info = demo_rows()
    m, g = catalog.model(model), catalog.gpu(gpu)
    d = next(x for x in demo if x["precision"] == precision)
    base_demo = demo[0]["perplexity"]
    out = {
        "model": model,
        "model_name": m.name,
        "gpu": gpu,
        "gpu_name": g.name,
        "precision": precision,
        "batch": batch,
        **{
            k: me[k]
            for k in (
                "weights_gb",
                "bits_per_weight",
                "gpus_needed",
                "tokens_per_s_per_user",
                "ttft_ms",
                "cost_per_million_tokens_usd",
            )
        },
        "size_ratio": me["weights_gb"] / rows[0]["weights_gb"],
        "gpu_capacity_gb": float(g.hbm_capacity_gb),
        "rows": rows,
        "same_gpus": same_gpus,
        "tokens_per_s_per_user_same_gpus": me["tokens_per_s_per_user_same_gpus"],
        "speedup_same_gpus": me["speedup_same_gpus"],
        "tile": weight_tile(),
        "published": pub,
        "published_model": PUBLISHED_MODEL,
        "demo": demo,
        "demo_extra": extra,
        "demo_info": info,
        "real": real_rows(),
        "needles": {
            "published": _published_needle(precision, pub),
            "demo": {**d, "baseline": base_demo},
            "served": _served_needle(precision),
        },
    }
    out["math"] = _math(model, gpu, precision, batch, out)
    return out


def _math(model: str, gpu: str, precision: str, batch: int, o: dict) -> dict[str, Any]:
    cfg = _cfg(model, gpu, precision)
    d = o["needles"]["demo"]
    n = o["gpus_needed"]
    est = _serving(model, gpu, precision, batch, n)
    out = {
        "weights_gb": derive(
            o["weights_gb"],
            "GB",
            "(layer params x bytes/weight + embedding, lm_head, norms x 2 B) / 1e9",
            {"bytes_per_weight": (cfg.shard.wbytes, "B"), "bits_per_weight": (cfg.shard.wbytes * 8, "bits")},
            [
                f"{FORMATS[precision].note} (scales counted; a per-tensor scale is 32 bits over millions of weights)",
                "embedding, lm_head and norms stay 16-bit, as GPTQ/AWQ checkpoints keep them",
            ],
            [*qz.FORMAT_SOURCES, *([qz.FP4_SOURCES[precision]] if precision in qz.FP4 else [])],
        ),
        "gpus_needed": derive(
            n or 0,
            "GPUs",
            "fewest tp in 1, 2, 4, ... with weights/tp + KV + activations + reserve <= capacity",
            {
                "capacity": (o["gpu_capacity_gb"], "GB", cfg.gpu.source("hbm_capacity_gb") or None),
                "batch": (batch, "chats"),
                "context": (PROMPT_TOKENS + OUTPUT_TOKENS, "tokens"),
            },
            ["10% of memory kept back for the runtime (vLLM gpu_memory_utilization = 0.9)"],
        ),
        "demo_perplexity": derive(
            d["perplexity"],
            "",
            "exp(mean NLL per token), weights quantized and dequantized",
            {"tokens": (d["tokens"], "tokens"), "baseline_fp16": (d["baseline"], "")},
            [o["demo_info"]["recipe"]],
        ),
    }
    if est is not None:
        out.update({k: est.math[k] for k in ("tokens_per_s_per_user", "cost_per_million_tokens_usd", "ttft_ms")})
    same = o["same_gpus"] and _serving(model, gpu, precision, batch, o["same_gpus"])
    if same:
        out["tokens_per_s_per_user_same_gpus"] = same.math["tokens_per_s_per_user"]
    return as_json(out)


@router.get("/api/quantization", response_model=QuantizationResponse)
def get_quantization(p: Annotated[QuantizationParams, Query()]) -> QuantizationResponse:
    """Size, GPUs, speed and cost of the model at each weight precision; the bit tile; both perplexity needles."""
    context = catalog.model(p.model).max_position_embeddings
    if context < PROMPT_TOKENS + OUTPUT_TOKENS:
        raise SimError(
            "model",
            f"{catalog.model(p.model).name} holds {context:,} tokens of context, fewer than "
            f"this chapter's request of {PROMPT_TOKENS:,} prompt + {OUTPUT_TOKENS} answer tokens.",
        )
    return QuantizationResponse(**quantization(p.model, p.gpu, p.precision, p.batch))


def facts(q: QuantizationParams | None = None) -> dict[str, str]:
    """Sizes of the chosen model at three precisions, the chosen one's GPU count, and the perplexity sources."""
    q = q or QuantizationParams()
    every = {r["precision"]: r for r in quantization(q.model, q.gpu, q.precision, q.batch)["rows"]}  # the answer's
    rows = {p: every[p] for p in ("bf16", "fp8", "int4", q.precision)}
    chosen = rows[q.precision]
    pub = {
        (r["source_key"], r["precision"], r["method"].split(" ")[0]): r["perplexity"]
        for r in published()
        if r["model"] == PUBLISHED_MODEL
    }
    demo, _, _ = demo_rows()
    dm = {d["precision"]: d["perplexity"] for d in demo}
    return {
        "model_name": catalog.model(q.model).name,
        **{f"{p}_gb": f"{r['weights_gb']:.0f}" for p, r in rows.items()},
        "precision": q.precision.upper(),
        "precision_gb": f"{chosen['weights_gb']:.0f}",
        "gpus_needed": f"{chosen['gpus_needed']} {catalog.gpu(q.gpu).name} GPU{'s' if chosen['gpus_needed'] != 1 else ''}",
        "published_model": PUBLISHED_MODEL,
        "benchmark": "WikiText-2",
        "ppl_fp16": f"{pub[('gptq-readme', 'fp16', 'none')]:.2f}",
        "ppl_int4_rtn_g128": f"{pub[('awq-table4', 'int4', 'RTN')]:.2f}",
        "ppl_int4_gptq": f"{pub[('gptq-readme', 'int4', 'GPTQ')]:.2f}",
        "demo_fp16": f"{dm['fp16']:.1f}",
        "demo_precision": f"{dm[q.precision]:.1f}",
        "group_size": str(demo_quality.GROUP_SIZE),
        "served_change": _served_sentence(q.precision),
    }


def _served_sentence(precision: str) -> str:
    """The served model's measured change at this precision, in words (empty when it was not measured)."""
    n = _served_needle(precision)
    if n is None:
        return ""
    return (
        f" SmolLM2, served here, goes from {n['baseline']:.1f} (its file's Q4_1 weights) to {n['perplexity']:.1f}"
        f" re-rounded to {precision.upper()} ({100 * n['relative_change']:+.0f}%)."
    )


def _served_needle(precision: str) -> dict[str, Any] | None:
    """SmolLM2's measured row for this precision beside its file's Q4_1 baseline; None where it was not measured
    (BF16 and FP8: the file holds 4-bit weights, so re-rounding to more bits is the baseline, and FP8 was not run)."""
    r = real_rows()
    if r is None:
        return None
    base = r["rows"][0]
    row = next((x for x in r["rows"][1:] if x["variant"] == precision), None)
    return None if row is None else {**row, "baseline": base["perplexity"], "model": r["model"]}
