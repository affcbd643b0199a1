"""The Python API: `from inside_llm import estimate, explain, embed`; results render the cards' figures as HTML."""

from __future__ import annotations

import pytest

import inside_llm
from inside_llm import embed, estimate, explain
from inside_llm.notebook import EmbedFrame
from inside_llm.sim.cost import serving


def test_estimate_is_the_dials_estimate_and_renders_its_cards():
    e = estimate(model="llama-3.1-70b", gpu="h100-sxm", gpus=8, tp=8, batch=64)
    ref = serving.estimate(serving.ServingParams(batch=64))
    assert e.ttft_ms == ref.ttft_ms and e.fits
    page = e._repr_html_()
    for figure in (
        f"{ref.ttft_ms:,.0f} ms",
        f"{ref.tokens_per_s_per_user:,.1f} tokens/s",
        f"{ref.tokens_per_s_total:,.0f} tokens/s",
        f"${ref.cost_per_million_tokens_usd:,.2f}",
        f"{ref.memory.spare_gb:,.1f} GB of 80 GB",
    ):
        assert figure in page
    assert e.to_dict()["params"]["batch"] == 64 and e.row()["batch"] == 64


def test_a_setup_that_does_not_fit_says_so():
    e = estimate(gpus=1, tp=1)
    assert not e.fits and "GB short" in e._repr_html_() and e.to_dict()["ttft_ms"] is None


def test_estimate_refuses_unknown_settings():
    with pytest.raises(TypeError, match="no setting colour"):
        estimate(colour="red")


def test_explain_renders_the_log_lines():
    x = explain("vllm serve meta-llama/Meta-Llama-3-8B")
    page = x._repr_html_()
    assert "GPU KV cache size: " in page and x.verdict in page.replace("&#x27;", "'")
    assert x.to_dict()["engine"] == "vllm"


def test_embed_without_ipython_is_an_iframe(monkeypatch):
    import builtins

    real = builtins.__import__

    def no_ipython(name, *a, **k):
        if name.startswith("IPython"):
            raise ImportError(name)
        return real(name, *a, **k)

    monkeypatch.setattr(builtins, "__import__", no_ipython)
    f = embed("dials", base_url="http://example.org/", batch=64)
    assert isinstance(f, EmbedFrame) and f.src == "http://example.org/embed/dials?batch=64"
    assert f._repr_html_().startswith('<iframe src="http://example.org/embed/dials?batch=64"')
    with pytest.raises(ValueError, match="slug must be one of"):
        embed("nope")


def test_the_package_imports_them_lazily():
    assert set(inside_llm.__all__) >= {"estimate", "explain", "embed"}
    with pytest.raises(AttributeError):
        inside_llm.nothing  # noqa: B018
