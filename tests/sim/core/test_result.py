"""sim/core/result.py: a result dataclass's one conversion to plain data, as its fields' metadata says."""

from __future__ import annotations

from dataclasses import dataclass, field

from inside_llm.sim.core.derivation import derive, math_dict
from inside_llm.sim.core.result import about, as_json
from inside_llm.sim.cost.costmodel import EngineConfig, MemoryBreakdown, memory_per_gpu
from inside_llm.sim.hardware import catalog


def test_as_json_rounds_where_a_field_gives_digits_and_keeps_the_field_order():
    mem = memory_per_gpu(EngineConfig(catalog.model("llama-3.1-70b"), catalog.gpu("h100-sxm"), tp=8), 16, 1280)
    d = as_json(mem)
    assert list(d) == list(MemoryBreakdown.__dataclass_fields__)
    assert d["weights_gb"] == round(mem.weights_gb, 3) != mem.weights_gb
    assert d["fits"] is True and isinstance(d["shortfall_gb"], float)


def test_as_json_leaves_out_a_field_whose_exclude_if_holds_and_converts_nested_results():
    d = math_dict(x=derive(2.5, "ms", "a + b", {"a": (1, "ms"), "b": (1.5, "ms", "a datasheet"), "c": (0, "", "")}))
    assert d == {
        "x": {
            "value": 2.5,
            "unit": "ms",
            "formula": "a + b",
            "inputs": [
                {"name": "a", "value": 1, "unit": "ms"},
                {"name": "b", "value": 1.5, "unit": "ms", "source": "a datasheet"},
                {"name": "c", "value": 0, "unit": ""},
            ],
            "assumptions": [],
            "sources": [],
        }
    }


def test_about_is_plain_dataclass_metadata():
    @dataclass(frozen=True)
    class R:
        a: float = about("An a.", digits=1)
        b: tuple[int, ...] = field(default=(1, 2))

    assert R.__dataclass_fields__["a"].metadata == {"description": "An a.", "digits": 1}
    assert as_json(R(1.26)) == {"a": 1.3, "b": [1, 2]}
