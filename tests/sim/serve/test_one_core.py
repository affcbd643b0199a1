"""The serving core is the one owner: chapters 6 and 7 import its KV manager, chapter 7 its scheduler,
nothing else defines either (tests/test_purity.py checks the package has no import circle). Plus the one
admission order and preemption rule, tested once."""

import ast
from pathlib import Path

import numpy as np

from inside_llm.sim.serve.clocks import Executor, UnitClock
from inside_llm.sim.serve.kv import BlockPool, KVCacheManager
from inside_llm.sim.serve.requests import Requests
from inside_llm.sim.serve.scheduler import Scheduler

SIM = Path(__file__).parents[3] / "src" / "inside_llm" / "sim"


def imports(path: Path) -> set[str]:
    """Every `inside_llm.…` name a module imports (module.name for `from module import name`)."""
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("inside_llm"):
            out |= {node.module} | {f"{node.module}.{a.name}" for a in node.names}
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.startswith("inside_llm")}
    return out


def test_chapters_6_and_7_import_the_one_kv_manager_and_scheduler():
    ch6, ch7 = imports(SIM / "serve" / "kvpolicies.py"), imports(SIM / "serve" / "simulate.py")
    assert "inside_llm.sim.serve.kv.KVCacheManager" in ch6 and "inside_llm.sim.serve.kv.ReservedManager" in ch6
    assert "inside_llm.sim.serve.kv.KVCacheManager" in ch7
    assert "inside_llm.sim.serve.scheduler.Scheduler" in ch7
    defined = {}
    for path in SIM.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and node.name in {"BlockPool", "KVCacheManager", "Scheduler", "KVPages"}:
                defined.setdefault(node.name, []).append(path.relative_to(SIM).as_posix())
    assert defined == {
        "BlockPool": ["serve/kv.py"],
        "KVCacheManager": ["serve/kv.py"],
        "Scheduler": ["serve/scheduler.py"],
    }


def test_one_admission_order_and_preemption_rule():
    """Three chats of 4-token prompts and 10-token answers arrive together on a pool of 6 pages of 4 tokens.
    All are admitted in order (1 page each, whole prompts). At 9 tokens each would need 3 pages (9 > 6):
    request 0 asks first, the newest admitted (2) is preempted to the queue's front and nobody is admitted
    in that step; at 13 tokens request 1 is preempted and goes in front of 2 (most recently preempted
    first); request 0 is never preempted; each comes back when memory frees and re-prefills prompt + output."""
    req = Requests.of(np.zeros(3), [4, 4, 4], [10, 10, 10])
    s = Scheduler("continuous", req, 3, KVCacheManager(BlockPool(6), 4, 3), 2048, fast_forward=False)
    clock = Executor(UnitClock())
    for _ in range(3):
        s.arrive()
    plans, now = [], 0.0
    while not s.done:
        plan = s.schedule(now)
        clock.execute(plan)
        plans.append((plan.ids.tolist(), plan.n.tolist(), s.preempted, list(s.front)))
        now = plan.end_s
        s.finish_step(plan, None, now)
    assert plans[0] == ([0, 1, 2], [4, 4, 4], False, [])
    assert plans[1:5] == [([0, 1, 2], [1, 1, 1], False, [])] * 4
    assert plans[5] == ([0, 1], [1, 1], True, [2])  # 8 tokens each computed: a 9th needs a third page
    assert plans[6:9] == [([0, 1], [1, 1], False, [2])] * 3  # 2 waits: memory is short
    assert plans[9] == ([0], [1], True, [1, 2])  # a 13th token needs a fourth page: the newest (1) goes
    assert plans[10] == ([1], [4 + 9], False, [2])  # 0 finished; 1 re-prefills its prompt and 9 output tokens
    assert plans[11] == ([2], [4 + 5], False, [])
    assert req.preemptions.tolist() == [0, 1, 1]
    assert req.output.tolist() == [10, 10, 10] and s.kv.pool.num_free_blocks == 6
