"""GPUs: the same silicon has the same figure, and each vendor's cores carry the vendor's own names."""

import pytest

from inside_llm.sim.cost.gpu_layout import layout
from inside_llm.sim.hardware import catalog


def test_h100_and_h200_share_one_dense_figure():
    """Same GH100 die and clock: the Hopper whitepaper's 989.4 TFLOP/s (H200's datasheet rounds 1,978.9 up)."""
    h100, h200 = catalog.gpu("h100-sxm"), catalog.gpu("h200")
    for f in ("bf16_dense_tflops", "fp16_dense_tflops", "fp8_dense_tflops", "int8_dense_tops"):
        assert getattr(h100, f) == getattr(h200, f)
    assert h200.bf16_dense_tflops == pytest.approx(989.4)
    assert "989.4" in h200.source("bf16_dense_tflops")


@pytest.mark.parametrize("gid", ["mi300x", "mi325x"])
def test_amd_says_compute_units_and_matrix_cores(gid):
    g = catalog.gpu(gid)
    assert (g.unit_name, g.unit_abbr, g.matrix_unit_name) == ("compute unit", "CU", "Matrix Core")
    lay = layout(g)
    assert (lay["sm_label"], lay["matrix_unit"]) == ("CU", "Matrix Core")
    assert "compute_unit" in lay["sources"] and "matrix_unit" in lay["sources"]


def test_nvidia_keeps_sms_and_tensor_cores():
    g = catalog.gpu("h100-sxm")
    assert (g.unit_name, g.unit_abbr, g.matrix_unit_name) == ("streaming multiprocessor", "SM", "tensor core")
