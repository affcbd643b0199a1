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

from ..core.errors import SimError

WEIGHT_PRECISIONS = ("bf16", "fp16", "fp8", "int8", "int4", "nvfp4", "mxfp4")
KV_PRECISIONS = ("bf16", "fp8", "int8", "int4")

# Group-wise integer quantization: every `INT_GROUP_SIZE` values share one FP16 scale (AWQ/GPTQ use 128).
INT_GROUP_SIZE = 128
SCALE_BITS = 16
ACTIVATION_BYTES = 2.0  # bytes per activation value: BF16 residual stream and GEMM outputs


@dataclass(frozen=True)
class NumberFormat:
    """How a precision is stored and which tensor-core path multiplies it.

    Stored bits per value = bits + scale_bits / group (group 0: one scale per tensor or per output
    channel, a negligible share of a large matrix).
    """

    name: str
    bits: float  # payload bits per value
    scale_bits: float  # bits of one shared scale (0: none stored per group)
    group: int  # values sharing one scale (0: per tensor / per channel)
    math: str  # tensor-core format the GEMMs run in: "bf16", "fp8", "int8" or "fp4"
    note: str  # what the format is, with its scale layout
    source: str = ""
    tensor_scale_bits: float = 0  # bits of one scale shared by a whole tensor (NVFP4's second-level FP32)

    @property
    def bytes_per_value(self) -> float:
        """Bytes per stored value, scales included (INT4 with group 128: 4.125 bits = 0.515625 B). A per-tensor
        scale is left out here (32 bits over millions of weights); `bits_in_tensor` counts it."""
        scale = self.scale_bits / self.group if self.group else 0.0
        return (self.bits + scale) / 8.0

    @property
    def bits_per_value(self) -> float:
        return self.bytes_per_value * 8.0

    def bits_in_tensor(self, values: int) -> float:
        """Stored bits per value in one tensor of `values` weights: payload, block scales and the tensor's own."""
        return self.bits_per_value + self.tensor_scale_bits / values


FORMATS: Mapping[str, NumberFormat] = MappingProxyType(
    {
        "bf16": NumberFormat("bf16", 16, 0, 0, "bf16", "BF16 weights, BF16 math"),
        "fp16": NumberFormat("fp16", 16, 0, 0, "bf16", "FP16 weights, FP16 math (same rate as BF16)"),
        "fp8": NumberFormat("fp8", 8, 0, 0, "fp8", "FP8 E4M3 weights and activations (W8A8), per-tensor scales"),
        "int8": NumberFormat(
            "int8",
            8,
            0,
            0,
            "int8",
            "INT8 weights and activations (W8A8, SmoothQuant): one scale per output channel, ~8.0 bits",
            "Xiao et al., SmoothQuant, arXiv:2211.10438, Section 3 (per-channel weight scales)",
        ),
        "int4": NumberFormat(
            "int4",
            4,
            SCALE_BITS,
            INT_GROUP_SIZE,
            "bf16",
            "INT4 weights, one FP16 scale per 128 weights (AWQ/GPTQ W4A16, 4.125 bits): "
            "dequantised to BF16 for the math",
            "Lin et al., AWQ, arXiv:2306.00978 (group size 128)",
        ),
        "nvfp4": NumberFormat(
            "nvfp4",
            4,
            8,
            16,
            "fp4",
            "NVFP4: FP4 E2M1 values with one FP8 E4M3 scale per 16 (4.5 bits), W4A4 on Blackwell FP4 tensor cores",
            "NVIDIA Technical Blog, 'Introducing NVFP4 for Efficient and Accurate Low-Precision "
            "Inference' (2025): 16-value micro-blocks, E4M3 scale per block, plus one FP32 per-tensor scale",
            tensor_scale_bits=32,
        ),
        "mxfp4": NumberFormat(
            "mxfp4",
            4,
            8,
            32,
            "fp4",
            "MXFP4 (OCP microscaling): FP4 E2M1 values with one 8-bit power-of-two scale per 32 "
            "(4.25 bits); gpt-oss ships its expert weights this way",
            "Open Compute Project, OCP Microscaling Formats (MX) v1.0 Specification, Table 1: "
            "MXFP4 block size 32, E8M0 shared scale",
        ),
    }
)


def number_format(precision: str, *, kv: bool = False) -> NumberFormat:
    """The NumberFormat of a weight (or, with kv=True, KV-cache) precision; ValueError names the field."""
    allowed = KV_PRECISIONS if kv else WEIGHT_PRECISIONS
    field_name = "kv_precision" if kv else "precision"
    if precision not in allowed:
        raise SimError(field_name, f"{field_name} must be one of {', '.join(allowed)}, not '{precision}'.")
    return FORMATS[precision]


def weight_bytes_per_param(precision: str) -> float:
    """Bytes per stored weight: bf16/fp16 2, fp8/int8 1, int4 0.5156, nvfp4 0.5625, mxfp4 0.53125."""
    return number_format(precision).bytes_per_value


def kv_bytes_per_value(kv_precision: str) -> float:
    """Bytes per cached K or V value: bf16 2, fp8 and int8 1, int4 with a group-128 FP16 scale."""
    return number_format(kv_precision, kv=True).bytes_per_value


_GPU_NUMBERS = (
    "bf16_dense_tflops",
    "hbm_capacity_gb",
    "hbm_bandwidth_tb_s",
    "interconnect_bandwidth_gb_s",
    "sm_count",
    "tensor_cores_per_sm",
    "l2_cache_mb",
    "tdp_w",
    "scaleout_bandwidth_gb_s",
)


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
    # The vendor's words for its cores (None: NVIDIA's; AMD says compute units and Matrix Cores)
    compute_unit: str | None = None
    compute_unit_abbr: str | None = None
    matrix_unit: str | None = None
    die_count: int = 1
    interconnect: str = ""
    tdp_w: float = 0.0
    # Scale-up vs scale-out: GPUs sharing one NVLink (or Infinity Fabric) domain, i.e. one HGX node
    # (72 on a GB200 NVL72 rack); beyond it traffic crosses the scale-out network, whose bandwidth is
    # per GPU, ONE direction (one 400 Gb/s NIC per GPU = 50 GB/s).
    node_gpus: int = 8
    scaleout_bandwidth_gb_s: float = 50.0
    sources: Mapping[str, str] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        for name in _GPU_NUMBERS:
            value = getattr(self, name)
            if value is None or value < 0:
                raise SimError(name, f"{name} must be at least 0, not {value!r}.")
        if not isinstance(self.node_gpus, int) or self.node_gpus < 1:
            raise SimError("node_gpus", f"node_gpus must be a whole number of at least 1, not {self.node_gpus!r}.")
        for name in ("bf16_dense_tflops", "hbm_capacity_gb", "hbm_bandwidth_tb_s", "scaleout_bandwidth_gb_s"):
            if getattr(self, name) <= 0:
                raise SimError(name, f"{name} must be more than 0, not {getattr(self, name)!r}.")

    @property
    def unit_name(self) -> str:
        """The vendor's name for one core: "streaming multiprocessor" (NVIDIA), "compute unit" (AMD)."""
        return self.compute_unit or "streaming multiprocessor"

    @property
    def unit_abbr(self) -> str:
        """Short name of one core: "SM" or "CU"."""
        return self.compute_unit_abbr or "SM"

    @property
    def matrix_unit_name(self) -> str:
        """The vendor's name for a matrix-multiply unit: "tensor core" (NVIDIA), "Matrix Core" (AMD)."""
        return self.matrix_unit or "tensor core"

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

    @property
    def scaleout_bytes_per_s(self) -> float:
        """Scale-out network bandwidth per GPU, one direction, bytes/s."""
        return self.scaleout_bandwidth_gb_s * 1e9


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
    Marlin kernels do); int8 without INT8 tensor cores and nvfp4/mxfp4 without FP4 tensor cores
    (anything before Blackwell) fall back the same way; int4 is always W4A16 (dequantise to BF16),
    the format AWQ/GPTQ checkpoints use.
    """
    fmt = number_format(precision)
    bf16 = MathRate(gpu.bf16_dense_tflops * 1e12, "bf16", "bf16_dense_tflops", fmt.note)
    paths = {
        "fp8": ("fp8_dense_tflops", "FP8"),
        "int8": ("int8_dense_tops", "INT8"),
        "fp4": ("fp4_dense_tflops", "FP4"),
    }
    if fmt.math not in paths:
        return bf16
    field_name, label = paths[fmt.math]
    peak = getattr(gpu, field_name)
    if peak:
        return MathRate(peak * 1e12, fmt.math, field_name, fmt.note)
    return MathRate(
        bf16.flops_per_s,
        "bf16",
        "bf16_dense_tflops",
        f"{gpu.name} has no {label} tensor cores: {precision.upper()} weights are dequantised "
        "and multiplied in BF16 (weight-only)",
    )


def gpu_from_fields(fields: Mapping[str, object], *, gpu_id: str = "custom") -> GPU:
    """A custom GPU from plain fields (the router parses query fields into this); ValueError names the field."""
    known = set(GPU.__dataclass_fields__) - {"id", "sources"}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise SimError(unknown[0], f"A GPU has no field {', '.join(unknown)}.", also=tuple(unknown))
    for name in ("bf16_dense_tflops", "hbm_capacity_gb", "hbm_bandwidth_tb_s", "interconnect_bandwidth_gb_s"):
        if name not in fields:
            raise SimError(name, f"{name} is required for a custom GPU.")
    values = dict(fields)
    values.setdefault("name", gpu_id)
    return GPU(id=gpu_id, **values)  # type: ignore[arg-type]
