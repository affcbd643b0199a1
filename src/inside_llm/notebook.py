"""The dials from Python or a notebook: `estimate(...)`, `explain(command)`, `embed(slug, **state)`.

    from inside_llm import estimate, explain, embed
    e = estimate(model="llama-3.1-70b", gpu="h100-sxm", gpus=8, tp=8, batch=64)   # shows the cards in Jupyter
    e.ttft_ms, e.fits, e.to_dict(), e.row()                                        # the API's figures
    explain("vllm serve meta-llama/Llama-3.1-8B-Instruct --max-model-len 32768")   # memory and start-up lines
    embed("dials", batch=64)                                                       # the live scene, in an iframe

Results render as HTML in a notebook (`_repr_html_`): the dials' five cards (time to first token, tokens/s per
user and in all, cost per million tokens, spare memory per GPU) and the memory per GPU. Nothing here needs
IPython; `embed` returns IPython's IFrame when IPython is importable, else an object that renders the iframe.
"""

from __future__ import annotations

import html
import os
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from .sim.cost import launch, serving, table
from .sim.hardware import catalog

DEFAULT_URL = "http://127.0.0.1:8000"  # `inside-llm serve`'s address; INSIDE_LLM_URL overrides it


def _td(label: str, value: str) -> str:
    return (
        f"<tr><th style='text-align:left;padding-right:1em'>{html.escape(label)}</th><td>{html.escape(value)}</td></tr>"
    )


@dataclass(frozen=True)
class Estimate:
    """One setup's estimate: the attributes of sim.cost.serving.ServingEstimate, `params`, and the API's dict."""

    params: serving.ServingParams
    result: serving.ServingEstimate

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)

    def to_dict(self) -> dict[str, Any]:
        """As GET /api/dials's figures (null time/rate/cost when it does not fit; then under `hypothetical`)."""
        return {"params": serving.params_dict(self.params), **self.result.to_dict()}

    def row(self) -> dict[str, Any]:
        """The flat row `format=csv` and `inside-llm estimate --csv` write."""
        return table.row(serving.params_dict(self.params), self.result.to_dict())

    def cards(self) -> list[tuple[str, str]]:
        """The dials' five cards as (label, figure) pairs."""
        r, m = self.result, self.result.memory
        if not r.fits:
            return [("Fits", f"no: each GPU is {m.shortfall_gb:,.1f} GB short")]
        return [
            ("Time to first token", f"{r.ttft_ms:,.0f} ms"),
            ("Tokens/s per user", f"{r.tokens_per_s_per_user:,.1f} tokens/s"),
            ("Tokens/s, all GPUs", f"{r.tokens_per_s_total:,.0f} tokens/s"),
            ("Cost per million tokens", f"${r.cost_per_million_tokens_usd:,.2f}"),
            ("Spare memory per GPU", f"{m.spare_gb:,.1f} GB of {m.capacity_gb:,.0f} GB"),
        ]

    def _repr_html_(self) -> str:
        p, m = self.params, self.result.memory
        head = (
            f"{p.model} on {p.gpus} × {p.gpu} (tp {p.tp}, pp {p.pp}, {p.precision}), batch {p.batch}, "
            f"{p.prompt_tokens} in / {p.output_tokens} out"
        )
        rows = "".join(_td(k, v) for k, v in self.cards())
        memory = "".join(
            _td(label, f"{getattr(m, key):,.1f} GB")
            for key, label in (
                ("weights_gb", "Weights"),
                ("kv_cache_gb", "KV cache"),
                ("activations_gb", "Activations"),
                ("reserve_gb", "Runtime reserve"),
            )
        )
        return (
            f"<div class='inside-llm-estimate'><p><b>{html.escape(head)}</b></p><table>{rows}</table>"
            f"<p>Memory per GPU</p><table>{memory}</table></div>"
        )

    def __repr__(self) -> str:
        return "Estimate(" + ", ".join(f"{k}={v}" for k, v in self.cards()) + ")"


def estimate(**params: Any) -> Estimate:
    """Estimate a setup: any field of sim.cost.serving.ServingParams (model, gpu, gpus, tp, pp, precision, kv_precision,
    batch, prompt_tokens, output_tokens, price_per_gpu_hour, throughput_mode). SimError names a bad field."""
    unknown = sorted(set(params) - set(serving.ServingParams.__dataclass_fields__))
    if unknown:
        raise TypeError(f"estimate() has no setting {', '.join(unknown)}; see sim.cost.serving.ServingParams")
    p = serving.ServingParams(**params)
    return Estimate(p, serving.estimate(p))


@dataclass(frozen=True)
class Explained:
    """A launch command explained (sim.cost.launch.Explanation's attributes), rendered as HTML in a notebook."""

    result: launch.Explanation

    def __getattr__(self, name: str) -> Any:
        return getattr(self.result, name)

    def to_dict(self) -> dict[str, Any]:
        return self.result.to_dict()

    def _repr_html_(self) -> str:
        e = self.result
        memory = "".join(_td(s.label, f"{s.gib:,.2f} GiB") for s in e.memory)
        tips = "".join(f"<li>{html.escape(s.goal)}: <code>{html.escape(s.change)}</code></li>" for s in e.suggestions)
        return (
            f"<div class='inside-llm-explain'><p><b>{html.escape(e.verdict)}</b></p><table>{memory}</table>"
            f"<pre>{html.escape(chr(10).join(e.log_lines))}</pre><ul>{tips}</ul></div>"
        )

    def __repr__(self) -> str:
        return f"Explained({self.result.engine}: {self.result.verdict})"


def explain(command: str, gpu: str = catalog.DEFAULT_GPU, model: str | None = None) -> Explained:
    """Explain a `vllm serve` / `llama-server` / SGLang launch command on a catalog GPU (see sim/cost/launch.py)."""
    return Explained(launch.explain(command, gpu, model))


@dataclass(frozen=True)
class EmbedFrame:
    """An iframe of a live scene, for a notebook without IPython's display module."""

    src: str
    width: int
    height: int

    def _repr_html_(self) -> str:
        return (
            f'<iframe src="{html.escape(self.src, quote=True)}" width="{self.width}" height="{self.height}" '
            'style="border:0" loading="lazy" title="Inside LLM Inference"></iframe>'
        )


def embed_url(slug: str, base_url: str | None = None, **state: Any) -> str:
    """The embed page of chapter `slug` with its dials set (the same query the tour's URL holds)."""
    from .scenes import load_scenes

    slugs = [s.slug for s in load_scenes()]
    if slug not in slugs:
        raise ValueError(f"slug must be one of {', '.join(slugs)}, not {slug!r}")
    base = (base_url or os.environ.get("INSIDE_LLM_URL") or DEFAULT_URL).rstrip("/")
    query = urlencode({k: (int(v) if isinstance(v, bool) else v) for k, v in state.items()})
    return f"{base}/embed/{slug}" + (f"?{query}" if query else "")


def embed(slug: str, base_url: str | None = None, width: int = 960, height: int = 600, **state: Any) -> Any:
    """A live scene in an iframe: IPython.display.IFrame when IPython is importable, else an EmbedFrame."""
    src = embed_url(slug, base_url, **state)
    try:
        from IPython.display import IFrame
    except ImportError:
        return EmbedFrame(src, width, height)
    return IFrame(src, width=width, height=height)
