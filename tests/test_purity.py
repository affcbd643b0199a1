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
# q8.py compiles the served model's int8 kernels with numba.
MODEL_READERS = {
    "smollm.py": {"gguf", "tokenizers", "threadpoolctl", "jinja2"},
    "cpu_measure.py": {"threadpoolctl"},
    "q8.py": {"numba"},
}


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
        for p in SIM.rglob("*.py")
    }
    bad = {k: v for k, v in bad.items() if v}
    assert not bad, f"sim/ must stay pure (numpy + stdlib): {bad}"


def test_sim_never_imports_fastapi_starlette_or_jinja():
    for p in SIM.rglob("*.py"):
        web = {"fastapi", "starlette", "jinja2", "pydantic", "uvicorn"} - MODEL_READERS.get(p.name, set())
        assert not _imports(p) & web, p.name


# ---- no import cycle: not at module level, nor through an import inside a function ----------------

PACKAGE = Path(inside_llm.__file__).parent


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _runtime_imports(tree: ast.AST):
    """Every import statement, skipping those under `if TYPE_CHECKING:` (they never run)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", getattr(node.test, "attr", "")) == "TYPE_CHECKING":
            node.body = []
    return [n for n in ast.walk(tree) if isinstance(n, ast.Import | ast.ImportFrom)]


def import_graph() -> dict[str, set[str]]:
    """inside_llm module -> the inside_llm modules it imports (a `from pkg import name` counts pkg.name when
    that is a module, else pkg)."""
    paths = {_module_name(p): p for p in PACKAGE.rglob("*.py")}
    graph = {}
    for name, path in paths.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        deps = set()
        for node in _runtime_imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                deps |= {a.name for a in node.names}
                continue
            base = package.split(".")[: len(package.split(".")) - node.level + 1] if node.level else []
            module = ".".join(base + [node.module] if node.module else base)
            deps |= {f"{module}.{a.name}" if f"{module}.{a.name}" in paths else module for a in node.names}
        graph[name] = {d for d in deps if d in paths and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[str]:
    """Every circle a depth-first walk of the graph closes, as "a -> b -> a"."""
    state, path, found = {}, [], []

    def visit(u):
        state[u] = "open"
        path.append(u)
        for v in sorted(graph.get(u, ())):
            if state.get(v) == "open":
                found.append(" -> ".join(path[path.index(v) :] + [v]))
            elif v not in state:
                visit(v)
        path.pop()
        state[u] = "done"

    for u in sorted(graph):
        if u not in state:
            visit(u)
    return found


def test_the_package_has_no_import_cycle():
    graph = import_graph()
    # the graph sees absolute, relative and in-function imports
    assert "inside_llm.sim.serve.kv" in graph["inside_llm.sim.serve.kvpolicies"]
    assert "inside_llm.api.measured" in graph["inside_llm.api.roofline"]
    assert "inside_llm.api.demo_model" in graph["inside_llm.api.measured"]  # imported inside served()
    assert not cycles(graph), cycles(graph)


def test_sim_folders_import_downwards_only():
    """sim/'s concept folders (core, model, hardware, cost, serve, ...) form no circle between them either,
    and sim/ holds no module outside a folder (docs/design-as-built.md, "Shape")."""
    folders: dict[str, set[str]] = {}
    for module, deps in import_graph().items():
        parts = module.split(".")
        if parts[:2] != ["inside_llm", "sim"] or len(parts) < 3:
            continue
        assert len(parts) > 3 or (SIM / parts[2]).is_dir(), f"{module}: put it in a concept folder"
        folders.setdefault(parts[2], set()).update(
            d.split(".")[2] for d in deps if d.startswith("inside_llm.sim.") and d.split(".")[2] != parts[2]
        )
    assert {"core", "model", "hardware", "cost", "serve"} <= set(folders)
    assert not folders["core"], folders["core"]
    assert not cycles(folders), cycles(folders)
