"""Inside LLM Inference: a guided tour of how a GPU server runs a large language model.

From Python: `from inside_llm import estimate, explain, embed` (see notebook.py); imported on first use, so
`inside-llm --version` and the web app do not pay for them.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "embed", "estimate", "explain"]


def __getattr__(name: str) -> Any:
    if name in ("estimate", "explain", "embed"):
        from . import notebook

        return getattr(notebook, name)
    raise AttributeError(f"module 'inside_llm' has no attribute {name!r}")
