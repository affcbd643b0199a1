"""Attach your server (issue 27): read a real serving engine's /metrics and hold the cost model against it.

- `exposition`: Prometheus exposition text -> a Scrape (prometheus_client's parser), histogram_quantile.
- `engines`: which engine wrote the page (vLLM v1 or older names, SGLang, llama.cpp, TGI, NIM) and its readings
  mapped onto one typed `Reading`, each figure naming the metric it came from.

Targets are set by the operator only (`inside-llm serve --attach NAME=URL`); nothing a visitor sends names a URL.
"""
