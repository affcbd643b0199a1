"""sim/ is pure: it imports only the standard library, numpy and itself (no web frameworks)."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import inside_llm

SIM = Path(inside_llm.__file__).parent / "sim"
ALLOWED = set(sys.stdlib_module_names) | {"numpy", "inside_llm"}
# The real model reads its own file: gguf (the file format), tokenizers (its BPE), threadpoolctl (BLAS
# threads; cpu_measure.py reads how many BLAS runs with), and jinja2's sandbox for the chat template the file carries
# (a Jinja template by definition).
MODEL_READERS = {"smollm.py": {"gguf", "tokenizers", "threadpoolctl", "jinja2"}, "cpu_measure.py": {"threadpoolctl"}}


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_sim_imports_no_web_framework():
    bad = {
        p.name: _imports(p) - ALLOWED - {"tiktoken", "tiktoken_ext"} - MODEL_READERS.get(p.name, set())
        for p in SIM.glob("*.py")
    }
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"sim/ must stay pure (numpy + stdlib): {bad}"


def test_sim_never_imports_fastapi_starlette_or_jinja():
    for p in SIM.glob("*.py"):
        web = {"fastapi", "starlette", "jinja2", "pydantic", "uvicorn"} - MODEL_READERS.get(p.name, set())
        assert not _imports(p) & web, p.name
