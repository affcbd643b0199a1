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
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

REQUIRED_HF_FIELDS = ("hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size",
                      "vocab_size")


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
    source: str = ""
    published_params_b: float | None = None
    published_active_params_b: float | None = None
    published_source: str = ""

    def __post_init__(self) -> None:
        for name in ("hidden_size", "num_hidden_layers", "num_attention_heads", "num_key_value_heads",
                     "head_dim", "intermediate_size", "vocab_size", "max_position_embeddings",
                     "num_local_experts", "num_experts_per_tok"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer; got {value!r}")
        if self.num_attention_heads % self.num_key_value_heads:
            raise ValueError("num_key_value_heads must divide num_attention_heads; got "
                             f"{self.num_key_value_heads} and {self.num_attention_heads}")
        if self.num_experts_per_tok > self.num_local_experts:
            raise ValueError("num_experts_per_tok must be <= num_local_experts; got "
                             f"{self.num_experts_per_tok} > {self.num_local_experts}")

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


@dataclass(frozen=True)
class ParamCounts:
    """Parameter counts (numbers of weights, not bytes)."""

    embedding: int
    attention_per_layer: int
    mlp_per_layer: int  # all experts
    expert_per_layer: int  # one expert (== mlp_per_layer for a dense model)
    router_per_layer: int
    norms_per_layer: int
    final_norm: int
    lm_head: int  # 0 when tied to the embedding
    layers: int
    total: int
    active: int  # used per token: top-k experts only
    non_embedding: int  # total minus the embedding table (lm_head kept)


def param_counts(m: ModelSpec) -> ParamCounts:
    """Count every weight from the shape (see the module docstring for the formulas)."""
    d, q, kv, f = m.hidden_size, m.q_dim, m.kv_dim, m.intermediate_size
    attention = d * q + 2 * d * kv + q * d + ((q + 2 * kv) if m.attention_bias else 0)
    expert = 3 * d * f
    router = d * m.num_local_experts if m.is_moe else 0
    norms = 2 * d
    embedding = m.vocab_size * d
    lm_head = 0 if m.tie_word_embeddings else m.vocab_size * d
    per_layer_total = attention + expert * m.num_local_experts + router + norms
    per_layer_active = attention + expert * m.num_experts_per_tok + router + norms
    shared = embedding + d + lm_head
    total = m.num_hidden_layers * per_layer_total + shared
    active = m.num_hidden_layers * per_layer_active + shared
    return ParamCounts(embedding, attention, expert * m.num_local_experts, expert, router, norms, d,
                       lm_head, m.num_hidden_layers, total, active, total - embedding)


def kv_bytes_per_token(m: ModelSpec, kv_bytes_per_value: float, *, kv_heads: int | None = None,
                       layers: int | None = None) -> float:
    """KV-cache bytes one token occupies: 2 (K and V) * layers * kv_heads * head_dim * bytes.

    `kv_heads`/`layers` override the model's (a GPU's share under tensor/pipeline parallelism).
    Llama 3.1 70B in BF16: 2 * 80 * 8 * 128 * 2 = 327,680 bytes = 320 KiB per token.
    """
    heads = m.num_key_value_heads if kv_heads is None else kv_heads
    n_layers = m.num_hidden_layers if layers is None else layers
    return 2.0 * n_layers * heads * m.head_dim * kv_bytes_per_value


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
        raise ValueError(f"config.json is missing the field {key!r}")
    if isinstance(value, bool) or not isinstance(value, (int, float)) or int(value) != value or value < 1:
        raise ValueError(f"config.json field {key!r} must be a positive integer; got {value!r}")
    return int(value)


def from_hf_config(cfg: Mapping[str, Any], *, model_id: str = "custom", name: str | None = None,
                   source: str = "user-supplied config.json") -> ModelSpec:
    """Build a ModelSpec from a Hugging Face config.json dict; ValueError names a missing/bad field.

    head_dim defaults to hidden_size / num_attention_heads; num_key_value_heads to the head count
    (plain multi-head attention); MoE fields to a dense model. Qwen2 architectures get q/k/v biases.
    """
    if not isinstance(cfg, Mapping):
        raise ValueError("config.json must be a JSON object")
    for key in REQUIRED_HF_FIELDS:
        if key not in cfg:
            raise ValueError(f"config.json is missing the field {key!r}")
    heads = _hf_int(cfg, "num_attention_heads")
    hidden = _hf_int(cfg, "hidden_size")
    if cfg.get("head_dim") is None and hidden % heads:
        raise ValueError("config.json field 'head_dim' is needed: hidden_size is not a multiple of heads")
    archs = cfg.get("architectures") or []
    bias = bool(cfg.get("attention_bias", any(str(a).startswith("Qwen2") for a in archs)))
    experts = _hf_int(cfg, "num_local_experts", cfg.get("num_experts") or 1)
    return ModelSpec(
        id=model_id, name=name or str(cfg.get("_name_or_path") or model_id),
        hidden_size=hidden, num_hidden_layers=_hf_int(cfg, "num_hidden_layers"),
        num_attention_heads=heads, num_key_value_heads=_hf_int(cfg, "num_key_value_heads", heads),
        head_dim=_hf_int(cfg, "head_dim", hidden // heads),
        intermediate_size=_hf_int(cfg, "intermediate_size"), vocab_size=_hf_int(cfg, "vocab_size"),
        max_position_embeddings=_hf_int(cfg, "max_position_embeddings", 4096),
        tie_word_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        num_local_experts=experts,
        num_experts_per_tok=_hf_int(cfg, "num_experts_per_tok", 1) if experts > 1 else 1,
        attention_bias=bias, source=source)
