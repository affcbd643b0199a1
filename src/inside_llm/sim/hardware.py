"""GPUs and number formats: the hardware half of the cost model.

A GPU is a frozen dataclass whose fields carry units in their names (catalog: data/gpus.toml).
Tensor throughput is dense (not the 2:4-sparsity headline). A precision the chip has no tensor
path for is None, and `math_rate` says what the engine falls back to.

Precisions are named by the storage format of the weights (`precision`) and of the KV cache
(`kv_precision`); activations between layers stay 16-bit in every case (residual stream in BF16).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

WEIGHT_PRECISIONS = ("bf16", "fp16", "fp8", "int8", "int4")
KV_PRECISIONS = ("bf16", "fp8", "int8", "int4")

# Group-wise quantization: every `INT_GROUP_SIZE` values share one FP16 scale (AWQ/GPTQ use 128).
INT_GROUP_SIZE = 128
SCALE_BITS = 16
ACTIVATION_BYTES = 2.0  # bytes per activation value: BF16 residual stream and GEMM outputs


@dataclass(frozen=True)
class NumberFormat:
    """How a precision is stored and which tensor-core path multiplies it."""

    name: str
    bits: float  # payload bits per value
    grouped_scale: bool  # True: one FP16 scale per INT_GROUP_SIZE values is stored too
    math: str  # tensor-core format the GEMMs run in: "bf16", "fp8" or "int8"
    note: str

    @property
    def bytes_per_value(self) -> float:
        """Bytes per stored value, scales included (INT4 with group 128: 4.125 bits = 0.515625 B)."""
        scale = SCALE_BITS / INT_GROUP_SIZE if self.grouped_scale else 0.0
        return (self.bits + scale) / 8.0


FORMATS: Mapping[str, NumberFormat] = MappingProxyType({
    "bf16": NumberFormat("bf16", 16, False, "bf16", "BF16 weights, BF16 math"),
    "fp16": NumberFormat("fp16", 16, False, "bf16", "FP16 weights, FP16 math (same rate as BF16)"),
    "fp8": NumberFormat("fp8", 8, False, "fp8", "FP8 E4M3 weights and activations (W8A8), per-tensor scales"),
    "int8": NumberFormat("int8", 8, True, "int8", "INT8 weights and activations (W8A8, SmoothQuant-style)"),
    "int4": NumberFormat("int4", 4, True, "bf16",
                         "INT4 weights, group 128 with FP16 scales (AWQ/GPTQ W4A16): dequantised, BF16 math"),
})


def number_format(precision: str, *, kv: bool = False) -> NumberFormat:
    """The NumberFormat of a weight (or, with kv=True, KV-cache) precision; ValueError names the field."""
    allowed = KV_PRECISIONS if kv else WEIGHT_PRECISIONS
    field_name = "kv_precision" if kv else "precision"
    if precision not in allowed:
        raise ValueError(f"{field_name} must be one of {', '.join(allowed)}; got {precision!r}")
    return FORMATS[precision]


def weight_bytes_per_param(precision: str) -> float:
    """Bytes per stored weight: bf16/fp16 2, fp8 1, int8 1.0156, int4 0.5156 (scales included)."""
    return number_format(precision).bytes_per_value


def kv_bytes_per_value(kv_precision: str) -> float:
    """Bytes per cached K or V value: bf16 2, fp8 1, int8/int4 with a group-128 FP16 scale."""
    return number_format(kv_precision, kv=True).bytes_per_value


_GPU_NUMBERS = ("bf16_dense_tflops", "hbm_capacity_gb", "hbm_bandwidth_tb_s", "interconnect_bandwidth_gb_s",
                "sm_count", "tensor_cores_per_sm", "l2_cache_mb", "tdp_w")


@dataclass(frozen=True)
class GPU:
    """One accelerator. Throughput dense, bandwidth per GPU, interconnect both directions."""

    id: str
    name: str
    bf16_dense_tflops: float
    hbm_capacity_gb: float
    hbm_bandwidth_tb_s: float
    interconnect_bandwidth_gb_s: float  # per GPU, both directions added (H100 NVLink: 900)
    vendor: str = "custom"
    architecture: str = ""
    fp16_dense_tflops: float | None = None
    fp8_dense_tflops: float | None = None
    int8_dense_tops: float | None = None
    int4_dense_tops: float | None = None
    fp4_dense_tflops: float | None = None
    memory_type: str = "HBM"
    hbm_stacks: int = 0
    l2_cache_mb: float = 0.0
    infinity_cache_mb: float | None = None
    sm_count: int = 0
    gpc_count: int | None = None
    tensor_cores_per_sm: int = 4
    die_count: int = 1
    interconnect: str = ""
    tdp_w: float = 0.0
    sources: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        for name in _GPU_NUMBERS:
            value = getattr(self, name)
            if value is None or value < 0:
                raise ValueError(f"{name} must be >= 0; got {value!r}")
        for name in ("bf16_dense_tflops", "hbm_capacity_gb", "hbm_bandwidth_tb_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0; got {getattr(self, name)!r}")

    def source(self, field_name: str) -> str:
        """Where a figure comes from ('user input' for a custom GPU without sources)."""
        return self.sources.get(field_name, "user input" if self.vendor == "custom" else "")

    @property
    def hbm_bytes_per_s(self) -> float:
        """Peak memory bandwidth in bytes/s."""
        return self.hbm_bandwidth_tb_s * 1e12

    @property
    def link_one_direction_bytes_per_s(self) -> float:
        """Interconnect bandwidth one way, bytes/s (half the vendor's both-directions figure)."""
        return self.interconnect_bandwidth_gb_s * 1e9 / 2.0


@dataclass(frozen=True)
class MathRate:
    """Peak dense tensor throughput a precision's GEMMs actually run at on a GPU."""

    flops_per_s: float
    math: str  # "bf16", "fp8" or "int8": the tensor path used
    field: str  # catalog field the figure came from
    note: str


def math_rate(gpu: GPU, precision: str) -> MathRate:
    """Peak FLOP/s for the GEMMs of `precision` on `gpu`, with the fallback stated.

    fp8 on a GPU without FP8 tensor cores (A100) runs as weight-only FP8 with BF16 math (as vLLM's
    Marlin kernels do); int8 without INT8 tensor cores falls back the same way; int4 is always
    W4A16 (dequantise to BF16), the format AWQ/GPTQ checkpoints use.
    """
    fmt = number_format(precision)
    bf16 = MathRate(gpu.bf16_dense_tflops * 1e12, "bf16", "bf16_dense_tflops", fmt.note)
    if fmt.math == "fp8":
        if gpu.fp8_dense_tflops:
            return MathRate(gpu.fp8_dense_tflops * 1e12, "fp8", "fp8_dense_tflops", fmt.note)
        return MathRate(bf16.flops_per_s, "bf16", "bf16_dense_tflops",
                        f"{gpu.name} has no FP8 tensor cores: FP8 weights are dequantised, BF16 math")
    if fmt.math == "int8":
        if gpu.int8_dense_tops:
            return MathRate(gpu.int8_dense_tops * 1e12, "int8", "int8_dense_tops", fmt.note)
        return MathRate(bf16.flops_per_s, "bf16", "bf16_dense_tflops",
                        f"{gpu.name} has no INT8 tensor cores: INT8 weights are dequantised, BF16 math")
    return bf16


def gpu_from_fields(fields: Mapping[str, object], *, gpu_id: str = "custom") -> GPU:
    """A custom GPU from plain fields (the router parses query fields into this); ValueError names the field."""
    known = set(GPU.__dataclass_fields__) - {"id", "sources"}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"unknown GPU field(s): {', '.join(unknown)}")
    for name in ("bf16_dense_tflops", "hbm_capacity_gb", "hbm_bandwidth_tb_s", "interconnect_bandwidth_gb_s"):
        if name not in fields:
            raise ValueError(f"{name} is required for a custom GPU")
    values = dict(fields)
    values.setdefault("name", gpu_id)
    return GPU(id=gpu_id, **values)  # type: ignore[arg-type]
