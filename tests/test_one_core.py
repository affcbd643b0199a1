"""One serving core (issue 24): chapter 6's simulation, chapter 7's and the live engine import the one KV manager
(and chapters 7 and the live engine the one Scheduler) from sim/serve, and nothing else in the package defines
a scheduler, a KV manager or a block pool. Walks the source's imports and class definitions (ast, no import)."""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).parents[1] / "src" / "inside_llm"
SCHEDULER, KV = "inside_llm.sim.serve.scheduler.Scheduler", "inside_llm.sim.serve.kv.KVCacheManager"
CORE = {"sim/serve/scheduler.py", "sim/serve/kv.py"}


def module(name: str) -> Path:
    """The file of a module of the package (sim's files may sit in concept folders: found by name)."""
    found = [p for p in PKG.rglob(f"{name}.py")]
    assert len(found) == 1, (name, found)
    return found[0]


def imported(path: Path) -> set[str]:
    """Every `inside_llm.…` name the module imports (module.name for `from module import name`), relative
    imports resolved."""
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(parts[: len(parts) - node.level] + ([base] if base else []))
            if base.startswith("inside_llm"):
                out |= {base} | {f"{base}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("inside_llm")}
    return out


def is_scheduler_or_kv_manager(name: str) -> bool:
    n = name.lower()
    return n.endswith("scheduler") or n in {"blockpool", "kvpages", "pagecount"} or ("kv" in n and "manager" in n)


def test_the_three_drivers_import_the_one_scheduler_and_kv_manager():
    chapter6, chapter7 = imported(module("kvpolicies")), imported(module("simulate"))
    live = imported(PKG / "live" / "engine.py") | imported(PKG / "live" / "pages.py")
    assert KV in chapter6 and KV in chapter7 and KV in live
    assert SCHEDULER in chapter7 and SCHEDULER in live
    assert "inside_llm.sim.serve.fairshare.FairShare" in live, "the live engine's extras are the core's hooks"


def test_no_other_scheduler_or_kv_manager_class_exists():
    defined: dict[str, list[str]] = {}
    for path in PKG.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and is_scheduler_or_kv_manager(node.name):
                defined.setdefault(path.relative_to(PKG).as_posix(), []).append(node.name)
    assert set(defined) <= CORE, defined  # page pools of the one manager (BlockPool, PageCount) live in kv.py
    assert (
        defined["sim/serve/scheduler.py"] == ["Scheduler"] and defined["sim/serve/kv.py"].count("KVCacheManager") == 1
    )


def test_the_live_engine_plans_no_step_of_its_own():
    """No scheduling method left in live/: admission, planning and preemption are the Scheduler's."""
    for path in (PKG / "live").rglob("*.py"):
        names = {n.name for n in ast.walk(ast.parse(path.read_text())) if isinstance(n, ast.FunctionDef)}
        assert not names & {"_admit", "_plan", "_preempt", "schedule", "preempt"}, (path.name, names)
