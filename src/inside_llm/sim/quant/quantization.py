"""Quantization: weights stored in fewer bits, with real numeric quantizers on numpy arrays.

Formats (weights only; activations and the KV cache stay 16-bit here):
  bf16  1 sign, 8 exponent, 7 mantissa bits; float32 rounded to nearest-even on its top 16 bits.
  fp16  IEEE half (1, 5, 10); numpy's own float16 cast, which rounds to nearest-even.
  fp8   OCP/NVIDIA E4M3 ("fn"): 1 sign, 4 exponent bits (bias 7), 3 mantissa bits, no infinities,
        max 448, subnormals down to 2^-9; round-to-nearest-even, saturating at +-448. One fp32 scale per
        output channel (row): w ~= s * e4m3(w / s) with s = max|row| / 448, so each row fills the grid.
  int8, int4  integer codes with one fp16 scale per group of `group_size` consecutive weights along the
        input (reduction) axis, as GPTQ/AWQ do. Symmetric (default): codes in [-(2^(b-1)-1), 2^(b-1)-1],
        s = max|group| / (2^(b-1)-1), no zero point (int4 -> 15 levels). Asymmetric: codes in [0, 2^b-1]
        with an integer zero point per group in the same range, packed in b bits as GPTQ/AWQ checkpoints
        store it (qzeros: eight 4-bit zeros per int32), so int4 g128 costs 4 + (16 + 4)/128 bits (int4 ->
        16 levels). Scales are themselves rounded to fp16, because that is what is stored and counted.
  nvfp4 FP4 E2M1 values (1 sign, 2 exponent bits with bias 1, 1 mantissa bit: 0, 0.5, 1, 1.5, 2, 3, 4, 6) in
        blocks of 16 along the input axis, each block with an FP8 E4M3 scale, and one FP32 scale for the whole
        tensor: s_tensor = amax(tensor) / (6 x 448), s_block = e4m3(amax(block) / 6 / s_tensor), w ~= e2m1(w /
        (s_block s_tensor)) s_block s_tensor (NVIDIA's two-level recipe; a value over 6 after the scale's
        rounding saturates). 4 + 8/16 bits per weight + 32 bits per tensor.
  mxfp4 OCP Microscaling (MX) v1.0: E2M1 values in blocks of 32 with one E8M0 (power-of-two) shared scale,
        X = 2^(floor(log2 amax(block)) - 2), 2 being E2M1's largest exponent (6 = 1.5 x 2^2); values over 6
        after scaling clamp to 6 (the spec's section 6.3). 4 + 8/32 bits per weight.
  The FP4 block layouts (bits, scale bits, block size) are hardware.FORMATS', the cost model's own.
"""

from __future__ import annotations

import math
import tomllib
from collections.abc import Callable
from functools import lru_cache
from importlib import resources

import numpy as np

from inside_llm.sim.core.derivation import Derivation, derive
from inside_llm.sim.hardware.hardware import FORMATS

PRECISIONS = ("bf16", "fp16", "fp8", "int8", "int4", "nvfp4", "mxfp4")
FP4 = ("nvfp4", "mxfp4")  # E2M1 codes with micro-block scales (hardware.FORMATS gives block size and scale bits)
E2M1_MAX = 6.0            # 1.5 x 2^2: exponent field 11, mantissa 1
E2M1_EMAX = 2             # E2M1's largest exponent (OCP MX v1.0, emax_elem)
E2M1_GRID = (0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0)  # codes 000 ... 111 (the first bit is the sign)
E8M0_MIN_EXP, E8M0_MAX_EXP = -127, 127
INT_BITS = {"int8": 8, "int4": 4, "int3": 3, "int2": 2}   # int3/int2: for contrast only
E4M3_MAX = 448.0          # (1 + 6/8) * 2^(15 - 7): exponent field 1111 with mantissa 111 is NaN
E4M3_MIN_NORMAL_EXP = -6  # exponent field 0001 -> 2^(1 - 7)
E4M3_MANTISSA_BITS = 3
SCALE_BITS = 16           # int group scales are fp16; zero points are packed b-bit integers
FP8_SCALE_BITS = 32       # fp8 per-channel scale is fp32
FORMAT_SOURCES = (
    "OCP 8-bit Floating Point Specification (OFP8) rev 1.0, 2023: E4M3 encoding, max 448, NaN S.1111.111",
    "Micikevicius et al., FP8 Formats for Deep Learning, arXiv:2209.05433",
    "Frantar et al., GPTQ, arXiv:2210.17323; Lin et al., AWQ, arXiv:2306.00978 (group-wise int weights)",
)
FP4_SOURCES = {"nvfp4": FORMATS["nvfp4"].source, "mxfp4": FORMATS["mxfp4"].source}


def _check(precision: str) -> None:
    if precision not in PRECISIONS and precision not in INT_BITS:
        raise ValueError(f"precision must be one of {PRECISIONS + tuple(INT_BITS)}, got {precision!r}")


def bits_per_weight(precision: str, group_size: int = 128, symmetric: bool = True,
                    row_length: int = 8192, tensor_size: int | None = None) -> float:
    """Stored bits per weight INCLUDING scales/zero points.

    group_size: int formats; 0 means one scale per output row of `row_length` weights.
    row_length: weights per output row (8192 = hidden size of a 70B Llama), used by fp8's per-row
    scale and by int formats when group_size == 0.
    tensor_size: weights in the whole matrix (default row_length squared), for NVFP4's per-tensor FP32 scale.
    FP4 formats take their block size from hardware.FORMATS (group_size does not apply).
    """
    _check(precision)
    if precision in ("bf16", "fp16"):
        return 16.0
    if precision in FP4:
        return FORMATS[precision].bits_in_tensor(tensor_size or row_length * row_length)
    if precision == "fp8":
        return 8.0 + FP8_SCALE_BITS / row_length
    per = group_size if group_size > 0 else row_length
    extra = SCALE_BITS + (0 if symmetric else INT_BITS[precision])   # fp16 scale (+ packed b-bit zero point)
    return INT_BITS[precision] + extra / per


def bytes_per_weight(precision: str, group_size: int = 128, symmetric: bool = True,
                     row_length: int = 8192) -> float:
    """Bytes per weight including scales, e.g. int4 g128 symmetric: 4.125 bits = 0.515625 bytes."""
    return bits_per_weight(precision, group_size, symmetric, row_length) / 8.0


def bytes_per_weight_math(precision: str, group_size: int = 128, symmetric: bool = True,
                          row_length: int = 8192) -> Derivation:
    """The show-the-math for bytes_per_weight."""
    value = bytes_per_weight(precision, group_size, symmetric, row_length)
    if precision in ("bf16", "fp16"):
        return derive(value, "bytes/weight", "16 bits / 8", {"bits": (16, "bits")},
                      ["no scales: every weight stored as a 16-bit float"])
    if precision == "fp8":
        return derive(value, "bytes/weight", "(8 + scale_bits / row_length) / 8",
                      {"code_bits": (8, "bits"), "scale_bits": (FP8_SCALE_BITS, "bits"),
                       "row_length": (row_length, "weights")},
                      ["E4M3 code per weight, one fp32 scale per output row"], FORMAT_SOURCES[:2])
    if precision in FP4:
        f = FORMATS[precision]
        n = row_length * row_length
        return derive(value, "bytes/weight", "(code_bits + scale_bits / block + tensor_scale_bits / tensor_size) / 8",
                      {"code_bits": (f.bits, "bits"), "scale_bits": (f.scale_bits, "bits"), "block": (f.group, "weights"),
                       "tensor_scale_bits": (f.tensor_scale_bits, "bits"), "tensor_size": (n, "weights")},
                      ["FP4 E2M1 code per weight; " + ("an FP8 E4M3 scale per block of 16 and one FP32 scale per tensor"
                       if precision == "nvfp4" else "an E8M0 (power-of-two) scale per block of 32")],
                      [FP4_SOURCES[precision]])
    per = group_size if group_size > 0 else row_length
    zero_bits = 0 if symmetric else INT_BITS[precision]
    return derive(value, "bytes/weight", "(code_bits + (16 + zero_bits) / group_size) / 8",
                  {"code_bits": (INT_BITS[precision], "bits"), "zero_bits": (zero_bits, "bits per group"),
                   "group_size": (per, "weights")},
                  ["symmetric: one fp16 scale per group" if symmetric
                   else "asymmetric: an fp16 scale and a zero point packed in code_bits bits per group "
                        "(GPTQ/AWQ qzeros)",
                   "groups run along the input (reduction) dimension"], FORMAT_SOURCES[2:])


# ---- formats -------------------------------------------------------------------------------------

def round_bf16(x: np.ndarray) -> np.ndarray:
    """float32 -> nearest bfloat16 (ties to even), returned as float32. Relative error <= 2^-8."""
    u = np.ascontiguousarray(x, dtype=np.float32).view(np.uint32).astype(np.uint64)
    bias = 0x7FFF + ((u >> 16) & 1)                   # round-to-nearest-even on the dropped 16 bits
    r = ((u + bias) & 0xFFFF0000).astype(np.uint32)
    out = r.view(np.float32).reshape(np.shape(x))
    return np.where(np.isnan(x), np.float32(np.nan), out)


def round_fp16(x: np.ndarray) -> np.ndarray:
    """float32 -> IEEE half (numpy rounds to nearest-even) -> float32."""
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


def e4m3_grid() -> np.ndarray:
    """All 127 non-negative finite E4M3 values, ascending (0, subnormals m*2^-9, normals ... 448)."""
    codes = np.arange(0x7F)                           # 0x7F is NaN
    exp_field, mant = codes >> 3, codes & 7
    sub = mant * 2.0 ** (E4M3_MIN_NORMAL_EXP - E4M3_MANTISSA_BITS)
    norm = (1 + mant / 8.0) * 2.0 ** (exp_field - 7.0)
    return np.where(exp_field == 0, sub, norm)


def round_e4m3(x: np.ndarray) -> np.ndarray:
    """Round to the nearest E4M3 value (ties to even mantissa), saturating to +-448. float64 out."""
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), E4M3_MAX)
    _, e = np.frexp(a)                                # a = m * 2^e, m in [0.5, 1): binade exponent e-1
    binade = np.maximum(e - 1, E4M3_MIN_NORMAL_EXP)   # below 2^-6 the spacing is the subnormal one
    step = np.ldexp(1.0, binade - E4M3_MANTISSA_BITS)
    q = np.minimum(np.round(a / step) * step, E4M3_MAX)   # np.round is round-half-to-even
    return np.copysign(q, x)


def e4m3_fields(v: float) -> tuple[int, int, int]:
    """(sign, exponent field, mantissa field) of a value already on the E4M3 grid."""
    sign = int(math.copysign(1.0, v) < 0)
    a = abs(v)
    if a < 2.0 ** E4M3_MIN_NORMAL_EXP:
        return sign, 0, int(round(a / 2.0 ** (E4M3_MIN_NORMAL_EXP - 3)))
    m, e = math.frexp(a)
    return sign, e - 1 + 7, int(round((2 * m - 1) * 8))


def round_e2m1(x: np.ndarray) -> np.ndarray:
    """Round to the nearest FP4 E2M1 value (ties to the even mantissa), saturating to +-6. float64 out.

    Spacing 0.5 below 2 (the subnormal 0.5 and 1, 1.5), 1 in [2, 4), 2 in [4, 6]; np.round's half-to-even on
    the multiple picks the code whose mantissa bit is 0 at a tie (1.25 -> 1, 2.5 -> 2, 5 -> 4).
    """
    x = np.asarray(x, dtype=np.float64)
    a = np.minimum(np.abs(x), E2M1_MAX)
    step = np.where(a < 2, 0.5, np.where(a < 4, 1.0, 2.0))
    return np.copysign(np.minimum(np.round(a / step) * step, E2M1_MAX), x)


def e2m1_bits(v: float) -> str:
    """The 4 stored bits (sign, 2 exponent, 1 mantissa) of a value already on the E2M1 grid."""
    return ("1" if math.copysign(1.0, v) < 0 else "0") + format(E2M1_GRID.index(abs(float(v))), "03b")


def _blocks(w: np.ndarray, axis: int, block: int) -> tuple[np.ndarray, int]:
    """w with `axis` moved last and cut into blocks of `block` ([..., blocks, block], zero-padded), and its length."""
    x = np.moveaxis(np.asarray(w, dtype=np.float64), axis, -1)
    n = x.shape[-1]
    pad = -n % block
    if pad:
        x = np.concatenate([x, np.zeros((*x.shape[:-1], pad))], axis=-1)
    return x.reshape(*x.shape[:-1], -1, block), n


def fp4_quantize(w: np.ndarray, precision: str, axis: int = -1,
                 tensor_amax: float | None = None) -> tuple[np.ndarray, np.ndarray]:
    """FP4 codes (as E2M1 values, shaped like w) and each block's effective scale ([..., blocks, 1], axis last).

    nvfp4: the block scale is E4M3 and the tensor's FP32 scale is folded in (scale = e4m3 block x fp32 tensor);
    mxfp4: the block scale is a power of two (E8M0). Dequantize as codes x scale, broadcasting per block.
    tensor_amax: the largest |weight| of the whole tensor when w is a slice of it (NVFP4's tensor scale).
    """
    f = FORMATS[precision]
    grp, n = _blocks(w, axis, f.group)
    amax = np.max(np.abs(grp), axis=-1, keepdims=True)
    if precision == "nvfp4":
        top = tensor_amax if tensor_amax is not None else float(np.max(np.abs(w))) if np.size(w) else 0.0
        s_tensor = float(np.float32(top / (E2M1_MAX * E4M3_MAX))) or 1.0
        s_block = round_e4m3(amax / E2M1_MAX / s_tensor)
        scale = s_block * s_tensor
    else:
        with np.errstate(divide="ignore"):
            exp = np.floor(np.log2(np.where(amax > 0, amax, 1.0))) - E2M1_EMAX
        scale = np.exp2(np.clip(np.where(amax > 0, exp, E8M0_MIN_EXP), E8M0_MIN_EXP, E8M0_MAX_EXP))
    codes = round_e2m1(grp / np.where(scale > 0, scale, 1.0))
    codes = codes.reshape(*grp.shape[:-2], -1)[..., :n]
    return np.moveaxis(codes, -1, axis), scale


def _fp4_dequant(w: np.ndarray, precision: str, axis: int, tensor_amax: float | None = None) -> np.ndarray:
    codes, scale = fp4_quantize(w, precision, axis, tensor_amax)
    block = FORMATS[precision].group
    grp, n = _blocks(codes, axis, block)
    deq = (grp * scale).reshape(*grp.shape[:-2], -1)[..., :n]
    return np.moveaxis(deq, -1, axis).astype(np.float32)


# ---- quantizers ----------------------------------------------------------------------------------

def fp8_scale(w: np.ndarray, axis: int = -1) -> np.ndarray:
    """fp32 scale per output row: max|row| / 448, so the row's largest weight lands on E4M3's max."""
    amax = np.max(np.abs(w), axis=axis, keepdims=True)
    return np.where(amax > 0, amax / E4M3_MAX, 1.0).astype(np.float32)


def _fp8_dequant(w: np.ndarray, axis: int) -> np.ndarray:
    scale = fp8_scale(w, axis)
    return (round_e4m3(w / scale) * scale).astype(np.float32)


def int_quantize(w: np.ndarray, bits: int, group_size: int = 128, symmetric: bool = True,
                 axis: int = -1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group-wise integer codes. Returns (codes, scales, zeros) with codes shaped like w.

    Groups are `group_size` consecutive weights along `axis` (0 = whole axis). When the axis length is
    not a multiple of group_size, the last group of each row is shorter (576 = 4 x 128 + 64): it is
    padded with zeros, which change no group's max or min range. Dequantize with (codes - zeros) *
    scales, broadcasting per group (see _int_dequant).
    """
    x = np.moveaxis(np.asarray(w, dtype=np.float32), axis, -1)
    n = x.shape[-1]
    g = n if group_size <= 0 else group_size
    pad = -n % g
    xp = np.concatenate([x, np.zeros((*x.shape[:-1], pad), np.float32)], axis=-1) if pad else x
    grp = xp.reshape(*x.shape[:-1], -1, g)           # [..., groups, g]
    if symmetric:
        qmax = 2 ** (bits - 1) - 1
        scale = round_fp16(np.max(np.abs(grp), axis=-1, keepdims=True) / qmax)
        scale = np.where(scale > 0, scale, 1.0)
        zero = np.zeros_like(scale)
        codes = np.clip(np.round(grp / scale), -qmax, qmax)
    else:
        lo, hi = grp.min(axis=-1, keepdims=True), grp.max(axis=-1, keepdims=True)
        scale = round_fp16((hi - lo) / (2 ** bits - 1))
        scale = np.where(scale > 0, scale, 1.0)
        zero = round_fp16(np.round(-lo / scale))
        codes = np.clip(np.round(grp / scale) + zero, 0, 2 ** bits - 1)
    codes = codes.reshape(xp.shape)[..., :n]
    codes = np.moveaxis(codes, -1, axis).astype(np.int16)
    return codes, scale, zero


def _int_dequant(w: np.ndarray, bits: int, group_size: int, symmetric: bool, axis: int) -> np.ndarray:
    codes, scale, zero = int_quantize(w, bits, group_size, symmetric, axis)
    c = np.moveaxis(codes, axis, -1).astype(np.float32)
    n, groups = c.shape[-1], scale.shape[-2]
    g = n if group_size <= 0 else group_size
    cp = np.concatenate([c, np.zeros((*c.shape[:-1], groups * g - n), np.float32)], axis=-1)
    deq = ((cp.reshape(*c.shape[:-1], groups, g) - zero) * scale).reshape(cp.shape)[..., :n]
    return np.moveaxis(deq, -1, axis).astype(np.float32)


def quantize_dequantize(w: np.ndarray, precision: str, group_size: int = 128, symmetric: bool = True,
                        axis: int = -1) -> np.ndarray:
    """Round w to `precision` and back to float32 ("fake quantization"): what the model then computes with.

    axis: the input (reduction) dimension, along which int groups run and across which the fp8 scale
    is shared: -1 for PyTorch-style W[out, in]; 0 for W[in, out] used as x @ W.
    """
    _check(precision)
    w = np.asarray(w, dtype=np.float32)
    if precision == "bf16":
        return round_bf16(w)
    if precision == "fp16":
        return round_fp16(w)
    if precision == "fp8":
        return _fp8_dequant(w, axis)
    if precision in FP4:
        return _fp4_dequant(w, precision, axis)
    return _int_dequant(w, INT_BITS[precision], group_size, symmetric, axis)


DEFAULT_SKIP = ("norm", "embed", "emb", "lm_head", "bias")


def is_quantized_matrix(name: str, array: np.ndarray) -> bool:
    """Default rule: 2-D projection matrices inside the layers (attention q/k/v/o, MLP gate/up/down).

    Norm gains, biases, the token embedding and the output head stay 16-bit, as in GPTQ and AWQ, which
    quantize only the linear layers inside the transformer blocks.
    """
    return np.ndim(array) == 2 and not any(s in name.lower() for s in DEFAULT_SKIP)


def quantize_weights(weights: dict[str, np.ndarray], precision: str, group_size: int = 128,
                     symmetric: bool = True, axis: int = -1,
                     select: Callable[[str, np.ndarray], bool] = is_quantized_matrix,
                     ) -> dict[str, np.ndarray]:
    """A copy of `weights` with the selected matrices quantize-dequantized; the rest are passed through."""
    return {k: quantize_dequantize(v, precision, group_size, symmetric, axis) if select(k, v) else v
            for k, v in weights.items()}


def weight_error(w: np.ndarray, wq: np.ndarray) -> dict[str, float]:
    """RMS and max absolute error, and RMS error relative to the RMS weight (dimensionless)."""
    d = np.asarray(wq, np.float64) - np.asarray(w, np.float64)
    rms_w = float(np.sqrt(np.mean(np.square(w)))) or 1.0
    rms = float(np.sqrt(np.mean(d * d)))
    return {"rms": rms, "max_abs": float(np.max(np.abs(d))), "relative_rms": rms / rms_w}


# ---- perplexity ----------------------------------------------------------------------------------

def nll_from_logits(logits: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """Per-token negative log-likelihood in nats. logits [T, V], targets [T] (the NEXT token ids)."""
    z = np.asarray(logits, np.float64)
    z = z - z.max(axis=-1, keepdims=True)
    logz = np.log(np.exp(z).sum(axis=-1))
    return logz - z[np.arange(len(targets)), np.asarray(targets)]


def perplexity(nll_per_token: np.ndarray) -> float:
    """exp(mean NLL in nats): the effective number of equally likely next tokens the model hesitates between."""
    nll = np.asarray(nll_per_token, np.float64)
    if nll.size == 0:
        raise ValueError("need at least one token")
    return float(np.exp(nll.mean()))


def perplexity_math(nll_per_token: np.ndarray, label: str = "held-out text") -> Derivation:
    nll = np.asarray(nll_per_token, np.float64)
    return derive(perplexity(nll), "", "exp(mean(nll_per_token))",
                  {"mean_nll": (float(nll.mean()), "nats/token"), "tokens": (int(nll.size), "tokens")},
                  [f"teacher-forced next-token loss on {label}"])


# ---- the stage's tile: real weights, every stored bit ---------------------------------------------

TILE_FORMATS = ("fp16", "bf16", "fp8", "int8", "int4", "nvfp4", "mxfp4")
E2M1_FIELDS = [("sign", 1), ("exponent", 2), ("mantissa", 1)]
FIELDS = {"fp16": [("sign", 1), ("exponent", 5), ("mantissa", 10)], "bf16": [("sign", 1), ("exponent", 8), ("mantissa", 7)],
          "fp8": [("sign", 1), ("exponent", 4), ("mantissa", 3)], "int8": [("code", 8)], "int4": [("code", 4)],
          "nvfp4": E2M1_FIELDS, "mxfp4": E2M1_FIELDS}


def stored_bits(precision: str, w: np.ndarray, group_size: int = 128,
                tensor_amax: float | None = None) -> list[list[str]]:
    """Stored bit pattern of each weight of w [in, out], quantized along the input axis (axis 0)."""
    if precision == "fp16":
        return [[format(int(x), "016b") for x in row] for row in w.astype(np.float16).view(np.uint16)]
    if precision == "bf16":
        return [[format(int(x), "016b") for x in row] for row in round_bf16(w).view(np.uint32) >> 16]
    if precision == "fp8":
        codes = round_e4m3(w / fp8_scale(w, axis=0))
        return [["".join((str(s), format(e, "04b"), format(m, "03b"))) for s, e, m in map(e4m3_fields, row)]
                for row in codes]
    if precision in FP4:
        return [[e2m1_bits(c) for c in row] for row in fp4_quantize(w, precision, 0, tensor_amax)[0]]
    bits = INT_BITS[precision]
    codes, _, _ = int_quantize(w, bits, group_size, axis=0)
    return [[format(int(c) & (2 ** bits - 1), f"0{bits}b") for c in row] for row in codes]


def first_scales(precision: str, w: np.ndarray, group_size: int = 128,
                 tensor_amax: float | None = None) -> list[float] | None:
    """The scale each column of w [in, out] uses for its first rows (fp8: per column; int: per group)."""
    if precision == "fp8":
        return [float(s) for s in fp8_scale(w, axis=0)[0]]
    if precision in FP4:
        return [float(s) for s in fp4_quantize(w, precision, 0, tensor_amax)[1][:, 0, 0]]  # [out, blocks, 1]
    if precision in INT_BITS:
        _, scale, _ = int_quantize(w, INT_BITS[precision], group_size, axis=0)
        return [float(s) for s in scale[:, 0, 0]]                # scale [out, groups, 1]
    return None


def weight_tile(matrix: np.ndarray, tile: int = 8, group_size: int = 128) -> dict:
    """Top-left tile x tile of `matrix` [in, out] in each format: stored bits, values, scales, error.

    Whole columns are quantized (all input rows), so the scales and groups are those the full matrix
    gets (NVFP4's per-tensor scale from the whole matrix); `error` is over the whole matrix.
    """
    full = np.asarray(matrix, np.float32)
    cols = full[:, :tile]                                        # [in, tile]: whole columns
    top = float(np.max(np.abs(full)))
    rows = []
    for p in TILE_FORMATS:
        fp4 = p in FP4
        wq = _fp4_dequant(cols, p, 0, top) if fp4 else quantize_dequantize(cols, p, group_size, axis=0)
        amax = top if fp4 else None
        rows.append({"precision": p, "code_bits": sum(n for _, n in FIELDS[p]), "fields": FIELDS[p],
                     "bits_per_weight": bits_per_weight(p, group_size, row_length=full.shape[0], tensor_size=full.size),
                     "block": FORMATS[p].group if fp4 else None,
                     "values": wq[:tile].tolist(), "bits": stored_bits(p, cols, group_size, amax)[:tile],
                     "scales": first_scales(p, cols, group_size, amax),
                     "error": weight_error(full, quantize_dequantize(full, p, group_size, axis=0))})
    return {"shape": [tile, tile], "matrix_shape": list(full.shape), "group_size": group_size,
            "original": cols[:tile].tolist(), "precisions": rows}


@lru_cache(maxsize=1)
def _published() -> tuple[dict, ...]:
    text = resources.files("inside_llm.data").joinpath("quantization.toml").read_text(encoding="utf-8")
    return tuple(tomllib.loads(text)["entry"])


def published_perplexities(model: str | None = None) -> list[dict]:
    """Published WikiText-2 perplexities (data/quantization.toml), optionally for one model.

    Each dict: model, precision, method, group_size, perplexity, context_tokens, source_key, source,
    url, estimate. Compare an entry only with the FP16 baseline sharing its source_key.
    """
    return [dict(e) for e in _published() if model is None or e["model"] == model]
