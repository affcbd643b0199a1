"""Transformer architecture formulas: parameters, FLOPs and KV bytes from a model's shape.

Shapes follow Hugging Face config.json names (hidden_size, num_key_value_heads, ...). The family
covered is the Llama-style decoder: RMSNorm, rotary positions (no position embedding table),
grouped-query attention, SwiGLU MLP (gate, up, down), optional top-k mixture of experts,
optional q/k/v biases (Qwen2), untied or tied lm_head.

Per layer, with d = hidden, q = heads*head_dim, kv = kv_heads*head_dim, f = intermediate:
    attention weights   d*q (Wq) + 2*d*kv (Wk, Wv) + q*d (Wo)   [+ q + 2*kv biases]
    MLP weights         3*d*f per expert (gate, up, down); router d*E when E > 1
    norms               2*d
Model: embedding V*d, final norm d, lm_head V*d unless tied.

Features of 2025 models that change the cost, each optional (0 = absent):
- MoE with `moe_intermediate_size` experts, `n_shared_experts` always-on shared experts (DeepSeek-V3,
  Llama 4: shared width `shared_expert_intermediate_size`, default n_shared x moe width), and the
  first `first_k_dense_replace` layers dense with width `intermediate_size` (DeepSeek-V3: 3).
- Multi-head latent attention (DeepSeek-V2/V3, `kv_lora_rank` > 0): Q through a rank-`q_lora_rank`
  bottleneck, K and V rebuilt from one cached latent of kv_lora_rank + qk_rope_head_dim values per token
  per layer (576 for V3, against 2 x 128 heads x 128 = 32,768 for plain multi-head attention).
    attention weights   d*r_q + r_q*H*(nope+rope) + d*(r_kv+rope) + r_kv*H*(nope+v) + H*v*d + r_q + r_kv
- Sliding-window attention on `sliding_window_layers` of the layers (gpt-oss: every other layer,
  128 tokens): those layers cache at most `sliding_window` tokens per sequence.
- A checkpoint that quantizes only its routed experts (`expert_only_precision`, gpt-oss: "mxfp4"): in that
  format attention, router, norms, embedding and lm_head stay BF16 (gpt-oss-120b: 65.2 GB, not 63.75).

Active parameters are the weights one token multiplies: attention, norms, router, the top-k routed and
the shared experts, and the lm_head; the input embedding is a table lookup, not a multiply, so it is not
counted (OpenAI's gpt-oss model card counts this way: gpt-oss-120b 5.13 B active).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..core.errors import SimError

REQUIRED_HF_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size", "vocab_size")
# Every model's shape, each a whole number of at least 1 (with tie_word_embeddings, what the dials' model=custom takes).
SHAPE_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
    "vocab_size",
    "max_position_embeddings",
    "num_local_experts",
    "num_experts_per_tok",
)
# The optional features (MoE widths, latent attention, sliding windows), each a whole number, 0 when absent.
FEATURE_FIELDS = (
    "moe_intermediate_size",
    "n_shared_experts",
    "shared_expert_intermediate_size",
    "first_k_dense_replace",
    "kv_lora_rank",
    "q_lora_rank",
    "qk_rope_head_dim",
    "qk_nope_head_dim",
    "v_head_dim",
    "sliding_window",
    "sliding_window_layers",
)


@dataclass(frozen=True)
class ModelSpec:
    """A decoder-only transformer's shape. Invariant: heads % kv_heads == 0."""

    id: str
    name: str
    hidden_size: int
    num_hidden_layers: int
    num_attention_heads: int
    num_key_value_heads: int
    head_dim: int
    intermediate_size: int
    vocab_size: int
    max_position_embeddings: int = 4096
    tie_word_embeddings: bool = False
    num_local_experts: int = 1
    num_experts_per_tok: int = 1
    attention_bias: bool = False
    moe_intermediate_size: int = 0  # routed expert width (0: intermediate_size)
    n_shared_experts: int = 0
    shared_expert_intermediate_size: int = 0  # width of the shared expert(s) together (0: n_shared x moe width)
    first_k_dense_replace: int = 0  # leading dense layers of a MoE model
    kv_lora_rank: int = 0  # multi-head latent attention when > 0
    q_lora_rank: int = 0
    qk_rope_head_dim: int = 0
    qk_nope_head_dim: int = 0
    v_head_dim: int = 0
    sliding_window: int = 0
    sliding_window_layers: int = 0
    # weight format in which the published checkpoint quantizes only the routed experts ("" if none)
    expert_only_precision: str = ""
    source: str = ""
    published_params_b: float | None = None
    published_active_params_b: float | None = None
    # the publisher's active count includes the input embedding (Mistral, Qwen, Meta do; OpenAI does not)
    published_active_includes_embedding: bool = False
    published_source: str = ""

    def __post_init__(self) -> None:
        for name in SHAPE_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise SimError(name, f"{name} must be a whole number of at least 1, not {value!r}.")
        if self.num_attention_heads % self.num_key_value_heads:
            raise SimError(
                "num_key_value_heads",
                f"The key/value heads (num_key_value_heads, {self.num_key_value_heads}) "
                f"must divide the query heads (num_attention_heads, {self.num_attention_heads}).",
                also=("num_attention_heads",),
            )
        if self.num_experts_per_tok > self.num_local_experts:
            raise SimError(
                "num_experts_per_tok",
                f"Experts per token (num_experts_per_tok, {self.num_experts_per_tok}) "
                f"must be at most the experts per layer (num_local_experts, {self.num_local_experts}).",
                also=("num_local_experts",),
            )
        for name in FEATURE_FIELDS:
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise SimError(name, f"{name} must be a whole number of at least 0, not {value!r}.")
        if self.first_k_dense_replace >= self.num_hidden_layers or self.sliding_window_layers > self.num_hidden_layers:
            raise SimError(
                "first_k_dense_replace",
                "first_k_dense_replace and sliding_window_layers must be below "
                f"the number of layers (num_hidden_layers, {self.num_hidden_layers}).",
                also=("sliding_window_layers", "num_hidden_layers"),
            )

    @property
    def is_moe(self) -> bool:
        return self.num_local_experts > 1

    @property
    def q_dim(self) -> int:
        """Width of all query heads together: heads * head_dim (may differ from hidden_size)."""
        return self.num_attention_heads * self.head_dim

    @property
    def kv_dim(self) -> int:
        """Width of all K (or V) heads together: kv_heads * head_dim."""
        return self.num_key_value_heads * self.head_dim

    @property
    def is_mla(self) -> bool:
        return self.kv_lora_rank > 0

    @property
    def expert_width(self) -> int:
        """One routed expert's MLP width (the dense MLP's for a dense model)."""
        return self.moe_intermediate_size or self.intermediate_size

    @property
    def shared_width(self) -> int:
        """Width of the always-on shared expert(s) of a MoE layer (0 without)."""
        return self.shared_expert_intermediate_size or self.n_shared_experts * self.expert_width

    @property
    def full_attention_layers(self) -> int:
        """Layers whose cache grows with the whole context (the rest keep a sliding window)."""
        return self.num_hidden_layers - (self.sliding_window_layers if self.sliding_window else 0)

    def kv_values_per_token_layer(self, tp: int = 1) -> int:
        """Cached values one token adds to one layer on one of `tp` GPUs.

        Grouped-query attention: K and V of this GPU's heads, 2 * max(1, kv_heads / tp) * head_dim
        (a GPU keeps a copy of one head when tp > kv_heads). Latent attention: the latent and the
        rotary key, kv_lora_rank + qk_rope_head_dim, which every tensor-parallel GPU keeps whole.
        """
        if self.is_mla:
            return self.kv_lora_rank + self.qk_rope_head_dim
        return 2 * max(1, self.num_key_value_heads // tp) * self.head_dim

    @property
    def attention_width(self) -> float:
        """FLOPs per cached key per layer / 4: heads * head_dim (QK^T and PV, 2 FLOPs each).

        Latent attention computed in the absorbed form multiplies each query head against the
        576-wide latent for QK^T and the 512-wide latent for PV: heads * (2 * r_kv + rope) / 2.
        """
        if self.is_mla:
            return self.num_attention_heads * (2 * self.kv_lora_rank + self.qk_rope_head_dim) / 2
        return float(self.q_dim)


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts (numbers of weights, not bytes). *_per_layer: averaged over all layers."""

    embedding: int
    attention_per_layer: int
    mlp_per_layer: float  # all experts (and shared experts, and dense layers' MLPs), per layer on average
    expert_per_layer: int  # one routed expert (== mlp_per_layer for a dense model)
    router_per_layer: float
    norms_per_layer: int
    final_norm: int
    lm_head: int  # 0 when tied to the embedding
    layers: int
    total: int
    active: int  # multiplied per token: top-k experts only, the input embedding (a lookup) not counted
    non_embedding: int  # total minus the embedding table (lm_head kept)
    always_on_mlp_per_layer: float = 0.0  # MoE: shared experts + leading dense MLPs, per layer on average
    moe_layer_fraction: float = 1.0  # share of layers whose MLP is routed experts


def attention_params(m: ModelSpec) -> int:
    """Weights of one attention block (see the module docstring; latent attention when kv_lora_rank > 0)."""
    d = m.hidden_size
    if m.is_mla:
        h, rq, rkv = m.num_attention_heads, m.q_lora_rank, m.kv_lora_rank
        qk = m.qk_nope_head_dim + m.qk_rope_head_dim
        v = m.v_head_dim or m.head_dim
        q = (d * rq + rq * h * qk + rq) if rq else d * h * qk
        return q + d * (rkv + m.qk_rope_head_dim) + rkv * h * (m.qk_nope_head_dim + v) + rkv + h * v * d
    q, kv = m.q_dim, m.kv_dim
    return d * q + 2 * d * kv + q * d + ((q + 2 * kv) if m.attention_bias else 0)


def param_counts(m: ModelSpec) -> ParamCounts:
    """Count every weight from the shape (see the module docstring for the formulas)."""
    d, L = m.hidden_size, m.num_hidden_layers
    attention = attention_params(m)
    norms = 2 * d
    embedding = m.vocab_size * d
    lm_head = 0 if m.tie_word_embeddings else m.vocab_size * d
    shared = embedding + d + lm_head
    if not m.is_moe:
        mlp = 3 * d * m.intermediate_size
        total = L * (attention + mlp + norms) + shared
        active = total - (embedding if lm_head else 0)  # a tied table is multiplied as the lm_head
        return ParamCounts(embedding, attention, mlp, mlp, 0, norms, d, lm_head, L, total, active, total - embedding)
    expert = 3 * d * m.expert_width
    dense_layers = m.first_k_dense_replace
    moe_layers = L - dense_layers
    always_on = dense_layers * 3 * d * m.intermediate_size + moe_layers * 3 * d * m.shared_width
    routed = moe_layers * expert * m.num_local_experts
    router = moe_layers * d * m.num_local_experts
    total = L * (attention + norms) + always_on + routed + router + shared
    active = L * (attention + norms) + always_on + moe_layers * expert * m.num_experts_per_tok + router + d
    active += lm_head or embedding  # the output projection; the input lookup is not a multiply
    return ParamCounts(
        embedding,
        attention,
        (always_on + routed) / L,
        expert,
        router / L,
        norms,
        d,
        lm_head,
        L,
        total,
        active,
        total - embedding,
        always_on / L,
        moe_layers / L,
    )


def kv_bytes_per_token(
    m: ModelSpec, kv_bytes_per_value: float, *, kv_heads: int | None = None, layers: int | None = None
) -> float:
    """KV-cache bytes one token occupies: 2 (K and V) * layers * kv_heads * head_dim * bytes.

    `kv_heads`/`layers` override the model's (a GPU's share under tensor/pipeline parallelism).
    Llama 3.1 70B in BF16: 2 * 80 * 8 * 128 * 2 = 327,680 bytes = 320 KiB per token.
    """
    n_layers = m.full_attention_layers if layers is None else layers
    if m.is_mla:
        return float(n_layers * m.kv_values_per_token_layer() * kv_bytes_per_value)
    heads = m.num_key_value_heads if kv_heads is None else kv_heads
    return 2.0 * n_layers * heads * m.head_dim * kv_bytes_per_value


def kv_formula(m: ModelSpec, *, per: str = "batch x context x ") -> tuple[str, list[str]]:
    """The KV cache's formula in words, and its notes, for this model's attention (latent, grouped, windowed)."""
    if m.is_mla:
        return (
            f"{per}layers/pp x (kv_lora_rank {m.kv_lora_rank} + rotary key {m.qk_rope_head_dim}) x kv bytes",
            [
                "multi-head latent attention caches one latent per token and layer, shared by all heads, "
                "instead of K and V for every head; every tensor-parallel GPU keeps the whole latent"
            ],
        )
    notes = ["when tp > kv_heads each GPU keeps a copy of one KV head"]
    if m.full_attention_layers < m.num_hidden_layers:
        notes.append(
            f"{m.num_hidden_layers - m.full_attention_layers} sliding-window layers keep at most "
            f"{m.sliding_window} tokens each"
        )
    return f"{per}2 (K and V) x layers/pp x kv_heads/tp x head_dim x kv bytes", notes


def expected_experts_touched(m: ModelSpec, num_tokens: float) -> float:
    """Expected number of distinct experts a layer reads for `num_tokens` tokens.

    Assumes each token picks its top-k experts uniformly and independently (routers are trained
    towards balance): E * (1 - C(E-1,k)/C(E,k) ** n) = E * (1 - (1 - k/E) ** n). One token reads k
    experts; Mixtral (E=8, k=2) at batch 8 reads 7.2 of 8.
    """
    if not m.is_moe:
        return 1.0
    if num_tokens <= 0:
        return 0.0
    e, k = m.num_local_experts, m.num_experts_per_tok
    return e * (1.0 - (1.0 - k / e) ** num_tokens)


def prefill_attention_keys(prompt_lengths: list[int] | tuple[int, ...]) -> int:
    """Sum over prompt tokens of the keys each attends to (causal): sum n(n+1)/2 over prompts."""
    return sum(n * (n + 1) // 2 for n in prompt_lengths)


def _hf_int(cfg: Mapping[str, Any], key: str, default: int | None = None) -> int:
    value = cfg.get(key)
    if value is None:
        value = default
    if value is None:
        raise SimError(key, f"config.json is missing the field '{key}'.")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 1:
        raise SimError(key, f"config.json field '{key}' must be a whole number of at least 1, not {value!r}.")
    return int(value)


def from_hf_config(
    cfg: Mapping[str, Any],
    *,
    model_id: str = "custom",
    name: str | None = None,
    source: str = "user-supplied config.json",
) -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config.json dict; ValueError names a missing/bad field.

    head_dim defaults to hidden_size / num_attention_heads; num_key_value_heads to the head count
    (plain multi-head attention); MoE fields to a dense model. Qwen2 architectures get q/k/v biases.
    """
    if not isinstance(cfg, Mapping):
        raise SimError("", "config.json must be a JSON object.")
    if isinstance(cfg.get("text_config"), Mapping):  # Llama 4 and other multimodal configs nest the LM
        cfg = {**cfg, **cfg["text_config"]}
    for key in REQUIRED_HF_FIELDS:
        if key not in cfg:
            raise SimError(key, f"config.json is missing the field '{key}'.")
    heads = _hf_int(cfg, "num_attention_heads")
    hidden = _hf_int(cfg, "hidden_size")
    if cfg.get("head_dim") is None and hidden % heads:
        raise SimError(
            "head_dim", "config.json needs the field 'head_dim': hidden_size is not a multiple of num_attention_heads."
        )
    archs = cfg.get("architectures") or []
    bias = bool(cfg.get("attention_bias", any(str(a).startswith("Qwen2") for a in archs)))
    experts = _hf_int(cfg, "num_local_experts", cfg.get("num_experts") or cfg.get("n_routed_experts") or 1)
    extra = _hf_2025_fields(cfg, experts > 1)
    if extra.get("qk_nope_head_dim") and cfg.get("head_dim") is None:
        extra["head_dim"] = extra["qk_nope_head_dim"] + extra.get("qk_rope_head_dim", 0)
    return ModelSpec(
        id=model_id,
        name=name or str(cfg.get("_name_or_path") or model_id),
        hidden_size=hidden,
        num_hidden_layers=_hf_int(cfg, "num_hidden_layers"),
        num_attention_heads=heads,
        num_key_value_heads=_hf_int(cfg, "num_key_value_heads", heads),
        head_dim=extra.pop("head_dim", None) or _hf_int(cfg, "head_dim", hidden // heads),
        intermediate_size=_hf_int(cfg, "intermediate_size"),
        vocab_size=_hf_int(cfg, "vocab_size"),
        max_position_embeddings=_hf_int(cfg, "max_position_embeddings", 4096),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        num_local_experts=experts,
        num_experts_per_tok=_hf_int(cfg, "num_experts_per_tok", 1) if experts > 1 else 1,
        attention_bias=bias,
        source=source,
        **extra,
    )


def _hf_nonneg(cfg: Mapping[str, Any], key: str) -> int:
    value = cfg.get(key) or 0
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 0:
        raise SimError(key, f"config.json field '{key}' must be a non-negative integer; got {value!r}.")
    return int(value)


def _hf_2025_fields(cfg: Mapping[str, Any], moe: bool) -> dict[str, int]:
    """Shared experts, leading dense layers, latent attention and sliding windows, when the config has them.

    DeepSeek-V3: n_routed_experts, n_shared_experts, moe_intermediate_size, first_k_dense_replace,
    kv_lora_rank, q_lora_rank, qk_*_head_dim, v_head_dim. Qwen3-MoE: moe_intermediate_size.
    gpt-oss: sliding_window with layer_types listing 'sliding_attention' layers. Llama 4 (text_config):
    one shared expert of intermediate_size.
    """
    out = {
        k: _hf_nonneg(cfg, k)
        for k in ("kv_lora_rank", "q_lora_rank", "qk_rope_head_dim", "qk_nope_head_dim", "v_head_dim")
        if cfg.get(k)
    }
    if moe:
        for k in (
            "moe_intermediate_size",
            "n_shared_experts",
            "shared_expert_intermediate_size",
            "first_k_dense_replace",
        ):
            if cfg.get(k):
                out[k] = _hf_nonneg(cfg, k)
        if str(cfg.get("model_type", "")).startswith("llama4") and not out.get("n_shared_experts"):
            out["n_shared_experts"] = 1
    types = cfg.get("layer_types")
    if cfg.get("sliding_window") and isinstance(types, (list, tuple)):
        windowed = sum(1 for t in types if t == "sliding_attention")
        if windowed:
            out["sliding_window"] = _hf_nonneg(cfg, "sliding_window")
            out["sliding_window_layers"] = windowed
    return out
