"""The demo transformer, in numpy: a miniature of Llama 3 70B's architecture, with a KV cache.

Pre-norm RMSNorm, rotary position embeddings (Meta's interleaved pairs), grouped-query attention
(query head h reads KV head h // (n_heads // n_kv_heads)), SwiGLU MLP, output head tied to the token
embedding. Weights are trained by scripts/train_demo_model.py (torch) and shipped as float16 in
inside_llm/demo/<name>.npz; here they are upcast once to float32 and all math is float32.

Attention is causal with a sliding window of max_seq_len tokens: a query at position p sees keys at
positions p - max_seq_len < j <= p. Training never saw longer windows, and RoPE only encodes relative
offsets, so text longer than the context keeps working with every offset inside the trained range.
Within max_seq_len tokens this is plain causal attention.

Notation: T new tokens, S keys attended (cached + new), H query heads, Hkv KV heads, hd head_dim,
V vocabulary, F ffn_dim. Numpy and stdlib only; no module-level random state.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

import numpy as np

from inside_llm.sim.model.demo_vocab import DemoVocab
from inside_llm.sim.model.transformer_ops import apply_rope, attend, log_softmax, rms_norm, rope_tables, sample, silu

DEMO_DIR = Path(__file__).parents[2] / "demo"
MODEL_NAMES = ("main", "draft")


@dataclass(frozen=True)
class DemoConfig:
    dim: int            # residual stream width (numbers per token)
    n_layers: int
    n_heads: int        # query heads
    n_kv_heads: int     # key/value heads (< n_heads: grouped-query attention)
    head_dim: int
    ffn_dim: int        # SwiGLU hidden width
    vocab_size: int
    max_seq_len: int    # trained context, tokens; also the attention window
    rope_theta: float
    norm_eps: float


@dataclass
class Layer:
    """One block's float32 weights; matrices are [in, out] so that y = x @ W."""

    attn_norm: np.ndarray  # [dim]
    wq: np.ndarray         # [dim, H*hd]
    wk: np.ndarray         # [dim, Hkv*hd]
    wv: np.ndarray         # [dim, Hkv*hd]
    wo: np.ndarray         # [H*hd, dim]
    mlp_norm: np.ndarray   # [dim]
    w1: np.ndarray         # [dim, F] gate
    w3: np.ndarray         # [dim, F] up
    w2: np.ndarray         # [F, dim] down


@dataclass
class LayerTrace:
    """What one layer computed for T new tokens (returned with intermediates=True)."""

    resid_in: np.ndarray      # [T, dim] residual stream entering the layer
    q: np.ndarray             # [H, T, hd] queries, after RoPE
    k: np.ndarray             # [Hkv, T, hd] keys of the new tokens, after RoPE
    v: np.ndarray             # [Hkv, T, hd] values of the new tokens
    attn: np.ndarray          # [H, T, S] attention weights; rows sum to 1, zero above the diagonal
    attn_out: np.ndarray      # [T, dim] what attention adds to the residual stream
    resid_mid: np.ndarray     # [T, dim] residual stream after attention
    mlp_gate: np.ndarray      # [T, F] gate pre-activation (x @ w1)
    mlp_up: np.ndarray        # [T, F] up projection (x @ w3)
    mlp_hidden: np.ndarray    # [T, F] silu(gate) * up, the "stretched wide" vector
    mlp_out: np.ndarray       # [T, dim] what the MLP adds to the residual stream
    resid_out: np.ndarray     # [T, dim] residual stream leaving the layer


@dataclass
class Forward:
    logits: np.ndarray                      # [T, V] next-token scores (natural-log units)
    embeddings: np.ndarray | None = None    # [T, dim] token embedding rows (intermediates only)
    layers: list[LayerTrace] = field(default_factory=list)


class KVCache:
    """Keys and values of every token seen so far, per layer; grows as tokens are appended.

    k[l], v[l]: [Hkv, capacity, hd] float32 buffers, of which the first num_tokens positions hold
    data (capacity doubles as needed). truncate() drops the newest tokens, e.g. rejected drafts.
    """

    def __init__(self, config: DemoConfig, capacity: int = 64):
        shape = (config.n_kv_heads, capacity, config.head_dim)
        self.k = [np.zeros(shape, np.float32) for _ in range(config.n_layers)]
        self.v = [np.zeros(shape, np.float32) for _ in range(config.n_layers)]
        self.num_tokens = 0  # tokens cached == position of the next token

    @property
    def nbytes(self) -> int:
        """Bytes of keys and values actually held (num_tokens of them), float32."""
        per_token = sum(a.shape[0] * a.shape[2] * a.itemsize for a in self.k + self.v)
        return self.num_tokens * per_token

    def reserve(self, num_tokens: int) -> None:
        """Grow the buffers (doubling) so they hold at least num_tokens positions."""
        cap = self.k[0].shape[1]
        if num_tokens > cap:
            new = max(num_tokens, 2 * cap)
            pad = ((0, 0), (0, new - cap), (0, 0))
            self.k = [np.pad(a, pad) for a in self.k]
            self.v = [np.pad(a, pad) for a in self.v]

    def truncate(self, num_tokens: int) -> None:
        """Forget all but the first num_tokens tokens (e.g. draft tokens the target rejected)."""
        if not 0 <= num_tokens <= self.num_tokens:
            raise ValueError(f"cannot truncate {self.num_tokens} cached tokens to {num_tokens}")
        self.num_tokens = num_tokens

    def write(self, layer: int, start: int, k: np.ndarray, v: np.ndarray) -> None:
        """Store keys/values k, v [Hkv, T, hd] of layer `layer` at positions start..start+T-1."""
        end = start + k.shape[1]
        self.k[layer][:, start:end], self.v[layer][:, start:end] = k, v

    def read(self, layer: int, lo: int, end: int) -> tuple[np.ndarray, np.ndarray]:
        """Keys and values [Hkv, end-lo, hd] of layer `layer` at positions lo..end-1."""
        return self.k[layer][:, lo:end], self.v[layer][:, lo:end]

    def pages(self, layer: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
        """Layer `layer`'s keys and values where they lie, as one page: (k, v [1, Hkv, capacity, hd], the page
        table [0], the page size): what sim/model/q8.attend_one reads (engine.PagedKV gives its real pages)."""
        return self.k[layer][None], self.v[layer][None], np.zeros(1, np.int64), self.k[layer].shape[1]


class DemoModel:
    """The shipped demo transformer: float32 weights, its vocabulary, forward/generate with a KV cache."""

    def __init__(self, name: str, config: DemoConfig, tok_emb: np.ndarray, layers: list[Layer],
                 norm: np.ndarray, vocab: DemoVocab):
        self.name, self.config, self.vocab = name, config, vocab
        self.tok_emb = tok_emb                           # [V, dim] embedding rows
        self.unembed = np.ascontiguousarray(tok_emb.T)   # [dim, V] the tied output head
        self.layers, self.norm = layers, norm            # norm [dim] final RMSNorm gain

    @classmethod
    def from_npz(cls, path: Path, name: str = "") -> DemoModel:
        with np.load(path, allow_pickle=False) as z:
            a = {k: z[k].astype(np.float32) for k in z.files if k not in ("config_json", "vocab_cl100k")}
            config = DemoConfig(**json.loads(str(z["config_json"])))
            vocab = DemoVocab(z["vocab_cl100k"])
        layers = [Layer(**{f: a[f"layers.{i}.{f}"] for f in Layer.__dataclass_fields__})
                  for i in range(config.n_layers)]
        return cls(name or path.stem, config, a["tok_emb"], layers, a["norm"], vocab)

    @property
    def num_params(self) -> int:
        """Stored parameters; the tied embedding counts once."""
        per_layer = sum(getattr(w, f).size for w in self.layers for f in Layer.__dataclass_fields__)
        return self.tok_emb.size + per_layer + self.norm.size

    def encode(self, text: str) -> list[int]:
        return self.vocab.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.vocab.decode(ids)

    def cl100k_ids(self, ids: Sequence[int]) -> list[int]:
        return self.vocab.cl100k_ids(ids)

    def piece(self, model_id: int) -> bytes:
        return self.vocab.piece(model_id)

    def head(self, x: np.ndarray) -> np.ndarray:
        """Logits [N, V] for residual rows x [N, dim]: final RMSNorm, then the tied unembedding.

        Applied to any layer's residual stream this is the "logit lens": what the model would
        predict if it stopped there.
        """
        return rms_norm(x, self.norm, self.config.norm_eps) @ self.unembed

    def nll(self, ids: Sequence[int]) -> float:
        """Mean negative log-likelihood of ids[1:] given the tokens before each (nats per token).

        exp(nll) is the perplexity per token; ids longer than max_seq_len use the sliding window.
        """
        ids = self._check_ids(ids)
        if len(ids) < 2:
            raise ValueError("nll needs at least two tokens")
        logp = log_softmax(self.forward(ids[:-1]).logits)  # [T-1, V]
        return float(-np.mean(logp[np.arange(len(ids) - 1), ids[1:]]))

    def map_weights(self, fn: Callable[[str, np.ndarray], np.ndarray], name: str = "") -> DemoModel:
        """A copy whose layer matrices are fn(field, W), e.g. quantized and dequantized.

        field is the Layer field ("wq", "w1", ...); norms and the embedding are kept as they are.
        """
        layers = [Layer(**{f: fn(f, getattr(w, f)).astype(np.float32) if getattr(w, f).ndim == 2
                           else getattr(w, f) for f in Layer.__dataclass_fields__}) for w in self.layers]
        return DemoModel(name or self.name, self.config, self.tok_emb, layers, self.norm, self.vocab)

    def _check_ids(self, ids) -> np.ndarray:
        ids = np.asarray(ids, dtype=np.int64)  # [T]
        if ids.ndim != 1 or len(ids) == 0:
            raise ValueError("ids must be a non-empty 1-D sequence of model ids")
        if ids.min() < 0 or ids.max() >= self.config.vocab_size:
            raise ValueError(f"model ids must lie in [0, {self.config.vocab_size})")
        return ids

    def forward(self, ids: Sequence[int], cache: KVCache | None = None,
                intermediates: bool = False, last_only: bool = False, upto: int | None = None) -> Forward:
        """Logits [T, V] for T new tokens that follow the cache's tokens (positions continue from it).

        With a cache, the new tokens' keys/values are appended to it; without, a fresh one is used.
        Feeding tokens all at once or in pieces gives the same logits (up to float rounding).
        last_only: logits [1, V] of the last token only (what generation needs; skips T-1 head rows).
        upto: run layers 0..upto-1 only and skip the output head (logits empty): what a view of the
        inside needs (chapter 3 opens one layer; chapter 2 applies the head itself, as the logit lens).
        The cache is then only partly written: use a fresh one.
        """
        ids = self._check_ids(ids)
        cache = cache if cache is not None else KVCache(self.config, capacity=len(ids))
        p0 = cache.num_tokens
        cache.reserve(p0 + len(ids))
        pos = np.arange(p0, p0 + len(ids))  # [T] absolute positions
        x = self.tok_emb[ids]                # [T, dim]
        out = Forward(logits=np.empty(0), embeddings=x.copy() if intermediates else None)
        n = self.config.n_layers if upto is None else min(max(0, upto), self.config.n_layers)
        for i in range(n):
            x, trace = self._block(i, x, pos, [(cache, slice(0, len(ids)))], intermediates)
            if trace is not None:
                out.layers.append(trace)
        cache.num_tokens = p0 + len(ids)
        if upto is None:
            out.logits = self.head(x[-1:] if last_only else x)
        return out

    def forward_rows(self, ids: Sequence[int], cache: KVCache) -> tuple[np.ndarray, np.ndarray]:
        """forward(ids, cache) keeping only the residual after every layer: (logits [T, V], rows [L, T, dim])."""
        ids = self._check_ids(ids)
        p0 = cache.num_tokens
        cache.reserve(p0 + len(ids))
        pos, x, rows = np.arange(p0, p0 + len(ids)), self.tok_emb[ids], []
        for i in range(self.config.n_layers):
            x, _ = self._block(i, x, pos, [(cache, slice(0, len(ids)))], False)
            rows.append(x)
        cache.num_tokens = p0 + len(ids)
        return self.head(x), np.stack(rows)

    def decode_step_batch(self, ids: Sequence[int], caches: Sequence[KVCache]) -> np.ndarray:
        """One decode step for B sequences: ids [B] (one new token each), caches [B] -> logits [B, V]."""
        return self.step([(c, [t]) for c, t in zip(caches, self._check_ids(ids), strict=True)])

    def step(self, batch: Sequence[tuple[KVCache, Sequence[int]]]) -> np.ndarray:
        """One forward pass over several sequences at once -> logits [B, V] of each one's last new token.

        batch: (cache, new ids) per sequence: one id for a sequence that is decoding, a piece of its
        prompt for one that is being read (prefill), mixed freely. The weight matmuls run once on all
        N = sum of new ids rows (every weight read serves N tokens); only attention runs per sequence,
        against that sequence's own cache. This is the step a continuously batching engine takes.
        """
        x, pos, spans, ends = self._batch_rows(batch)
        for i in range(self.config.n_layers):
            x, _ = self._block(i, x, pos, spans, False)
        self._advance(spans)
        return self.head(x[ends - 1])                                  # [B, V]

    def _batch_rows(self, batch: Sequence[tuple[KVCache, Sequence[int]]]):
        """One pass's rows for several sequences (batch as in step()): the embedding rows [N, dim] (a copy:
        fancy indexing), each row's position [N], each sequence's (cache, rows) and the row after each
        sequence's rows [B]; every cache is reserved for its new ids (advance them after the pass)."""
        if len({id(c) for c, _ in batch}) != len(batch):
            raise ValueError("need one distinct cache per sequence")
        pieces = [self._check_ids(ids) for _, ids in batch]
        sizes = [len(p) for p in pieces]
        pos = np.concatenate([np.arange(c.num_tokens, c.num_tokens + n) for (c, _), n in zip(batch, sizes)])  # [N]
        for (c, _), n in zip(batch, sizes):
            c.reserve(c.num_tokens + n)
        ends = np.cumsum(sizes)                                        # [B] row after each sequence's rows
        spans = [(c, slice(e - n, e)) for (c, _), n, e in zip(batch, sizes, ends)]
        return self.tok_emb[np.concatenate(pieces)], pos, spans, ends

    @staticmethod
    def _advance(spans: list[tuple[KVCache, slice]]) -> None:
        for c, rows in spans:
            c.num_tokens += rows.stop - rows.start

    def residuals(self, batch: Sequence[tuple[KVCache, Sequence[int]]]) -> list[np.ndarray]:
        """The residual stream of one pass over several sequences at once (batch as in step(); no output
        head): [N, dim] entering layer 0 (the embedding rows), then after each layer; N = every sequence's new
        ids, in order. Chapter 2 reads its prompt and the chat question's continuation in one read of the
        weights, then applies the head itself (the logit lens)."""
        x, pos, spans, _ = self._batch_rows(batch)
        out = [x]                                                      # [N, dim]
        for i in range(self.config.n_layers):
            out.append(self._block(i, out[-1], pos, spans, False)[0])
        self._advance(spans)
        return out

    def _block(self, i: int, x: np.ndarray, pos: np.ndarray, spans: list[tuple[KVCache, slice]],
               keep: bool) -> tuple[np.ndarray, LayerTrace | None]:
        """Layer i on rows x [N, dim] at positions pos [N]; spans: (cache, rows) per sequence."""
        w, c, N = self.layers[i], self.config, len(x)
        h = rms_norm(x, w.attn_norm, c.norm_eps)                                       # [N, dim]
        cos, sin = rope_tables(pos, c.head_dim, c.rope_theta)                          # [N, hd/2]
        q = apply_rope((h @ w.wq).reshape(N, c.n_heads, c.head_dim).transpose(1, 0, 2), cos, sin)
        k = apply_rope((h @ w.wk).reshape(N, c.n_kv_heads, c.head_dim).transpose(1, 0, 2), cos, sin)
        v = (h @ w.wv).reshape(N, c.n_kv_heads, c.head_dim).transpose(1, 0, 2)        # [Hkv, N, hd]
        o = np.empty((N, c.n_heads * c.head_dim), np.float32)                          # [N, H*hd]
        for seq_cache, rows in spans:
            o[rows], att = self._attend_cached(i, seq_cache, q[:, rows], k[:, rows], v[:, rows], pos[rows])
        attn_out = o @ w.wo                                                            # [N, dim]
        mid = x + attn_out
        h2 = rms_norm(mid, w.mlp_norm, c.norm_eps)
        gate, up = h2 @ w.w1, h2 @ w.w3                                                # [N, F]
        hidden = silu(gate) * up
        mlp_out = hidden @ w.w2                                                        # [N, dim]
        out = mid + mlp_out
        if not keep:
            return out, None
        return out, LayerTrace(x, q, k, v, att, attn_out, mid, gate, up, hidden, mlp_out, out)

    def _attend_cached(self, i: int, cache: KVCache, q, k, v, pos) -> tuple[np.ndarray, np.ndarray]:
        """Write k/v [Hkv, T, hd] at pos [T] into layer i of cache; attend q [H, T, hd] over the window."""
        p0, end, window = int(pos[0]), int(pos[-1]) + 1, self.config.max_seq_len
        cache.write(i, p0, k, v)
        lo = max(0, p0 + 1 - window)  # older keys are outside every new query's window
        keys, values = cache.read(i, lo, end)
        return attend(q, keys, values, pos, np.arange(lo, end), window)

    def generate(self, prompt_ids: Sequence[int], max_new_tokens: int, temperature: float = 0.0,
                 top_k: int | None = None, seed: int = 0, prefill_chunk: int | None = None
                 ) -> Iterator[int | None]:
        """Yields up to max_new_tokens new model ids, one forward pass of one token each (KV cache).

        Greedy when temperature == 0; otherwise sampled with numpy's Generator(seed), so the same
        arguments always give the same tokens. prefill_chunk: read the prompt in pieces of that many
        tokens and yield None after each piece but the last, a point where a caller may stop (a server
        whose client left); the tokens are the same (up to float rounding for longer prompts).
        """
        if max_new_tokens < 0:
            raise ValueError("max_new_tokens must be >= 0")
        rng, cache = np.random.default_rng(seed), KVCache(self.config)
        step = prefill_chunk or len(prompt_ids)
        for i in range(0, len(prompt_ids), step):
            logits = self.forward(prompt_ids[i:i + step], cache, last_only=True).logits[-1]  # [V]
            if i + step < len(prompt_ids):
                yield None
        for n in range(max_new_tokens):
            token = sample(logits, temperature, top_k, rng)
            yield token
            if n + 1 < max_new_tokens:
                logits = self.forward([token], cache, last_only=True).logits[-1]


@cache
def load_model(name: str = "main") -> DemoModel:
    """The shipped model `name` ("main" or "draft"), loaded once per process."""
    if name not in MODEL_NAMES:
        raise ValueError(f"unknown demo model {name!r}; valid: {', '.join(MODEL_NAMES)}")
    return DemoModel.from_npz(DEMO_DIR / f"{name}.npz", name)


@cache
def model_card() -> dict:
    """The numbers of demo/model_card.json (sizes, training, validation loss), as written by training."""
    return json.loads((DEMO_DIR / "model_card.json").read_text())
