"""Train the demo transformer (a miniature of Llama 3 70B) on Tiny Shakespeare, with torch on the CPU.

    python scripts/train_demo_model.py --model main     # ~6M parameters
    python scripts/train_demo_model.py --model draft    # ~2M, the speculative-decoding draft

Architecture, as in Llama 3: pre-norm RMSNorm, rotary position embeddings (Meta's interleaved
pairs), grouped-query attention (fewer KV heads than query heads, head_dim set explicitly), SwiGLU
MLP, no biases. One deliberate difference: the output head is tied to the token embedding (Llama 3
70B unties them; Llama 3.2 1B/3B tie them) because at this size the 256-wide embedding of an
11.8k-piece vocabulary is half of the model, and tying halves the shipped file.
Another: rope_theta is 10,000 (Llama 1/2) rather than 500,000 because the context is 256, not 128k.

Data: the first 90% of the text trains, the last 10% validates (split by characters, each part
tokenized on its own). Tokens are cl100k_base pieces restricted to the training text's pieces plus
256 byte tokens (inside_llm.sim.model.demo_vocab). Everything is seeded: the same command gives the same
weights on the same torch build and thread count.

Writes src/inside_llm/demo/<model>.npz (float16 weights laid out for numpy `x @ W`, the config and
the vocabulary map), and updates model_card.json and MODEL_CARD.md beside it.
Torch is a dev-only dependency (the `train` extra); inference is numpy (inside_llm.sim.model.transformer).
"""

from __future__ import annotations

import argparse
import json
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from inside_llm.sim.model.demo_vocab import DemoVocab, build_vocab

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = Path(__file__).resolve().parents[2] / "shared/data/tinyshakespeare.txt"
OUT_DIR = REPO / "src/inside_llm/demo"
VAL_FRACTION = 0.1
CHECK_SLICE_TOKENS = 257  # the numpy test recomputes the loss on the first 257 held-out tokens
SAMPLE = {"prompt": "ROMEO:\n", "max_new_tokens": 60, "temperature": 0.8, "top_k": 40, "seed": 1}


@dataclass
class ModelConfig:
    dim: int = 256            # width of the residual stream (numbers per token)
    n_layers: int = 4
    n_heads: int = 8          # query heads
    n_kv_heads: int = 2       # key/value heads; each serves n_heads // n_kv_heads query heads
    head_dim: int = 32        # explicit, as in Llama configs (here dim == n_heads * head_dim)
    ffn_dim: int = 768        # SwiGLU hidden width
    vocab_size: int = 0       # set from the data
    max_seq_len: int = 256    # tokens of context
    rope_theta: float = 10000.0
    norm_eps: float = 1e-5


@dataclass
class TrainConfig:
    steps: int
    batch_size: int           # sequences per step, each max_seq_len tokens
    lr: float                 # peak AdamW learning rate
    warmup_steps: int
    weight_decay: float = 0.1
    dropout: float = 0.1      # residual dropout, training only; inference has none
    attn_dropout: float = 0.0 # dropout on attention weights (slow on CPU: disables fused attention)
    eval_every: int = 50
    eval_windows: int = 24    # held-out windows per progress eval (the final eval uses all)
    seed: int = 1337


CONFIGS = {  # sized so both train in about half an hour on 2 CPU cores
    "main": (ModelConfig(dim=256, n_layers=4, n_heads=8, n_kv_heads=2, head_dim=32, ffn_dim=768),
             TrainConfig(steps=450, batch_size=12, lr=1.5e-3, warmup_steps=50, dropout=0.2)),
    "draft": (ModelConfig(dim=128, n_layers=2, n_heads=4, n_kv_heads=1, head_dim=32, ffn_dim=384),
              TrainConfig(steps=600, batch_size=12, lr=3e-3, warmup_steps=50, attn_dropout=0.1)),
}


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):  # x [..., dim]
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(head_dim: int, seq_len: int, theta: float):
    """cos, sin [seq_len, head_dim // 2]: angle of pair i at position p is p * theta^(-2i/head_dim)."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    angles = torch.outer(torch.arange(seq_len, dtype=torch.float64), inv_freq)
    return angles.cos().float(), angles.sin().float()


def apply_rope(x, cos, sin):
    """Rotate interleaved pairs (x[2i], x[2i+1]) of x [B, H, T, hd] by the angles in cos/sin [T, hd/2]."""
    x0, x1 = x[..., 0::2], x[..., 1::2]                       # [B, H, T, hd/2] each
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)  # [B, H, T, hd/2, 2]
    return out.flatten(-2)                                    # [B, H, T, hd]


class Attention(nn.Module):
    def __init__(self, c: ModelConfig, dropout: float):
        super().__init__()
        self.c = c
        self.wq = nn.Linear(c.dim, c.n_heads * c.head_dim, bias=False)
        self.wk = nn.Linear(c.dim, c.n_kv_heads * c.head_dim, bias=False)
        self.wv = nn.Linear(c.dim, c.n_kv_heads * c.head_dim, bias=False)
        self.wo = nn.Linear(c.n_heads * c.head_dim, c.dim, bias=False)
        self.dropout = dropout

    def forward(self, x, cos, sin):  # x [B, T, dim]
        c, (B, T, _) = self.c, x.shape
        q = self.wq(x).view(B, T, c.n_heads, c.head_dim).transpose(1, 2)     # [B, H, T, hd]
        k = self.wk(x).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)  # [B, Hkv, T, hd]
        v = self.wv(x).view(B, T, c.n_kv_heads, c.head_dim).transpose(1, 2)  # [B, Hkv, T, hd]
        q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
        group = c.n_heads // c.n_kv_heads  # query head h reads KV head h // group
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)  # [B, H, T, hd]
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)
        return self.wo(y.transpose(1, 2).reshape(B, T, c.n_heads * c.head_dim))  # [B, T, dim]


class SwiGLU(nn.Module):
    def __init__(self, c: ModelConfig):
        super().__init__()
        self.w1 = nn.Linear(c.dim, c.ffn_dim, bias=False)  # gate
        self.w3 = nn.Linear(c.dim, c.ffn_dim, bias=False)  # up
        self.w2 = nn.Linear(c.ffn_dim, c.dim, bias=False)  # down

    def forward(self, x):  # x [B, T, dim] -> [B, T, dim]
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, c: ModelConfig, dropout: float, attn_dropout: float):
        super().__init__()
        self.attn_norm, self.attn = RMSNorm(c.dim, c.norm_eps), Attention(c, attn_dropout)
        self.mlp_norm, self.mlp = RMSNorm(c.dim, c.norm_eps), SwiGLU(c)
        self.drop = nn.Dropout(dropout)

    def forward(self, x, cos, sin):
        x = x + self.drop(self.attn(self.attn_norm(x), cos, sin))
        return x + self.drop(self.mlp(self.mlp_norm(x)))


class Transformer(nn.Module):
    def __init__(self, c: ModelConfig, dropout: float = 0.0, attn_dropout: float = 0.0):
        super().__init__()
        self.c = c
        self.tok_emb = nn.Embedding(c.vocab_size, c.dim)
        self.layers = nn.ModuleList(Block(c, dropout, attn_dropout) for _ in range(c.n_layers))
        self.norm = RMSNorm(c.dim, c.norm_eps)
        cos, sin = rope_tables(c.head_dim, c.max_seq_len, c.rope_theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)
        self.apply(self._init)
        for name, p in self.named_parameters():  # GPT-2 style: shrink the residual-path outputs
            if name.endswith(("wo.weight", "w2.weight")):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * c.n_layers))

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)

    def forward(self, idx):  # idx [B, T] model ids -> logits [B, T, V]
        T = idx.shape[1]
        x = self.tok_emb(idx)  # [B, T, dim]
        for layer in self.layers:
            x = layer(x, self.cos[:T], self.sin[:T])
        return self.norm(x) @ self.tok_emb.weight.T  # tied output head


def to_numpy_weights(model: Transformer) -> dict[str, np.ndarray]:
    """float16 arrays named as inside_llm.sim.model.transformer loads them; matrices as [in, out]."""
    out = {"tok_emb": model.tok_emb.weight, "norm": model.norm.weight}  # tok_emb [V, dim]
    for i, layer in enumerate(model.layers):
        p = f"layers.{i}."
        out |= {p + "attn_norm": layer.attn_norm.weight, p + "mlp_norm": layer.mlp_norm.weight}
        for name in ("wq", "wk", "wv", "wo"):
            out[p + name] = getattr(layer.attn, name).weight.T
        for name in ("w1", "w2", "w3"):
            out[p + name] = getattr(layer.mlp, name).weight.T
    return {k: v.detach().numpy().astype(np.float16) for k, v in out.items()}


def load_numpy_weights(model: Transformer, arrays) -> Transformer:
    """Copy weights saved by to_numpy_weights (float16 -> float32) into model; returns model."""
    sd = {"tok_emb.weight": arrays["tok_emb"], "norm.weight": arrays["norm"]}
    for i in range(model.c.n_layers):
        p = f"layers.{i}."
        sd[p + "attn_norm.weight"], sd[p + "mlp_norm.weight"] = arrays[p + "attn_norm"], arrays[p + "mlp_norm"]
        for name in ("wq", "wk", "wv", "wo"):
            sd[f"{p}attn.{name}.weight"] = arrays[p + name].T
        for name in ("w1", "w2", "w3"):
            sd[f"{p}mlp.{name}.weight"] = arrays[p + name].T
    model.load_state_dict({k: torch.from_numpy(np.asarray(v, dtype=np.float32)) for k, v in sd.items()})
    return model


def model_from_npz(path: Path) -> Transformer:
    """The torch model for a shipped .npz (used by the numpy-vs-torch parity test)."""
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    cfg = json.loads(str(arrays["config_json"]))
    return load_numpy_weights(Transformer(ModelConfig(**cfg)).eval(), arrays)


def load_data(path: Path):
    """(vocab, train ids [N] int64, val ids [M] int64, stats dict); the split is 90/10 by characters."""
    text = path.read_text(encoding="utf-8")
    cut = int(len(text) * (1 - VAL_FRACTION))
    train_text, val_text = text[:cut], text[cut:]
    vocab = DemoVocab(build_vocab(train_text))
    train_ids, _ = vocab.encode_with_stats(train_text)
    val_ids, val_fallback = vocab.encode_with_stats(val_text)
    stats = {"train_chars": len(train_text), "val_chars": len(val_text),
             "val_bytes": len(val_text.encode("utf-8")), "train_tokens": len(train_ids),
             "val_tokens": len(val_ids), "val_cl100k_pieces_via_byte_fallback": val_fallback}
    return vocab, torch.tensor(train_ids), torch.tensor(val_ids), stats


def get_batch(ids, gen: torch.Generator, batch_size: int, T: int):
    """Random windows (x, y) [B, T] from ids; the order depends only on the seeded generator."""
    starts = torch.randint(len(ids) - T - 1, (batch_size,), generator=gen)
    x = torch.stack([ids[s:s + T] for s in starts.tolist()])
    y = torch.stack([ids[s + 1:s + T + 1] for s in starts.tolist()])
    return x, y


@torch.no_grad()
def evaluate(model: Transformer, ids, T: int, max_windows: int | None = None) -> tuple[float, int]:
    """(mean cross-entropy in nats per predicted token, tokens predicted) over non-overlapping windows."""
    model.eval()
    n = (len(ids) - 1) // T if max_windows is None else min(max_windows, (len(ids) - 1) // T)
    total, count = 0.0, 0
    for i in range(0, n, 8):
        rows = range(i, min(i + 8, n))
        x = torch.stack([ids[r * T:(r + 1) * T] for r in rows])
        y = torch.stack([ids[r * T + 1:(r + 1) * T + 1] for r in rows])
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten(), reduction="sum")
        total, count = total + loss.item(), count + y.numel()
    model.train()
    return total / count, count


def lr_at(step: int, tc: TrainConfig) -> float:
    """Linear warmup, then cosine decay to 10% of the peak."""
    if step < tc.warmup_steps:
        return tc.lr * (step + 1) / tc.warmup_steps
    frac = (step - tc.warmup_steps) / max(1, tc.steps - tc.warmup_steps)
    return tc.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * frac)))


def make_optimizer(model: Transformer, tc: TrainConfig):
    decay = [p for p in model.parameters() if p.dim() >= 2]    # matrices and the embedding
    no_decay = [p for p in model.parameters() if p.dim() < 2]  # RMSNorm gains
    groups = [{"params": decay, "weight_decay": tc.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return torch.optim.AdamW(groups, lr=tc.lr, betas=(0.9, 0.95))


def train(model: Transformer, train_ids, val_ids, tc: TrainConfig) -> dict:
    """Runs tc.steps AdamW steps, printing progress; returns the training log summary."""
    gen = torch.Generator().manual_seed(tc.seed)
    opt, T = make_optimizer(model, tc), model.c.max_seq_len
    t0, loss_ema, best = time.perf_counter(), None, (float("inf"), -1, None)
    for step in range(tc.steps):
        for g in opt.param_groups:
            g["lr"] = lr_at(step, tc)
        x, y = get_batch(train_ids, gen, tc.batch_size, T)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        loss_ema = loss.item() if loss_ema is None else 0.95 * loss_ema + 0.05 * loss.item()
        if step % tc.eval_every == 0 or step == tc.steps - 1:
            val, _ = evaluate(model, val_ids, T, tc.eval_windows)
            if val < best[0]:  # keep the best weights seen, in case the small data set overfits
                best = (val, step, {k: v.clone() for k, v in model.state_dict().items()})
            print(f"step {step:5d}  train loss {loss_ema:.3f}  val loss {val:.3f}  "
                  f"lr {lr_at(step, tc):.2e}  elapsed {time.perf_counter() - t0:7.1f} s", flush=True)
    model.load_state_dict(best[2])
    return {"train_time_s": round(time.perf_counter() - t0, 1), "train_loss_final_ema": round(loss_ema, 4),
            "weights_from_step": best[1], "selection": f"lowest val loss on the first {tc.eval_windows} "
            f"held-out windows, checked every {tc.eval_every} steps"}


def count_params(c: ModelConfig) -> dict[str, int]:
    emb = c.vocab_size * c.dim
    attn = c.dim * c.head_dim * (2 * c.n_heads + 2 * c.n_kv_heads)
    per_layer = attn + 3 * c.dim * c.ffn_dim + 2 * c.dim
    return {"total": emb + c.n_layers * per_layer + c.dim, "embedding": emb,
            "per_layer": per_layer, "non_embedding": c.n_layers * per_layer + c.dim}


def export(model: Transformer, vocab: DemoVocab, path: Path) -> dict[str, np.ndarray]:
    """Write weights (float16), config and vocabulary map to path; returns the arrays written."""
    arrays = to_numpy_weights(model)
    arrays["config_json"] = np.array(json.dumps(asdict(model.c)))  # 0-d unicode, no pickle needed
    arrays["vocab_cl100k"] = vocab.cl100k.astype(np.int32)           # [V] model id -> cl100k id
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez(path, **arrays)
    return arrays


FALLBACK_RULE = ("Text is split by cl100k_base; a cl100k piece outside the vocabulary (the training "
                 "text's pieces plus the 256 single-byte tokens) becomes the single-byte tokens of its "
                 "UTF-8 bytes, so no input is unknown and decode(encode(text)) == text.")


def card_entry(name, c, tc, stats, summary, val_loss, val_tokens, check_loss, path, args) -> dict:
    """One model's model_card.json entry; units in key names."""
    tokens_seen = tc.steps * tc.batch_size * c.max_seq_len
    return {
        "config": asdict(c), "params": count_params(c), "tied_embeddings": True,
        "weights_dtype": "float16", "weights_file": path.name, "weights_file_bytes": path.stat().st_size,
        "train": {"steps": tc.steps, "batch_size": tc.batch_size, "seq_len": c.max_seq_len,
                  "tokens_seen": tokens_seen, "epochs": round(tokens_seen / stats["train_tokens"], 2),
                  "peak_lr": tc.lr, "warmup_steps": tc.warmup_steps, "weight_decay": tc.weight_decay,
                  "dropout": tc.dropout, "attn_dropout": tc.attn_dropout, "seed": tc.seed, "optimizer": "AdamW(0.9, 0.95), clip 1.0, cosine",
                  "threads": torch.get_num_threads(), "torch_version": torch.__version__,
                  **summary},
        "val": {"loss_nats_per_token": round(val_loss, 4), "perplexity_per_token": round(math.exp(val_loss), 2),
                "tokens": val_tokens, "window_tokens": c.max_seq_len,
                "bits_per_byte": round(val_loss * val_tokens / stats["val_bytes"] / math.log(2), 4),
                "note": "float16 weights as shipped; non-overlapping windows over the whole held-out 10%"},
        "check_slice": {"start_token": 0, "num_tokens": CHECK_SLICE_TOKENS, "loss_nats_per_token": check_loss},
        "reproduce": f"python scripts/train_demo_model.py --model {name}"
                     + (f" --steps {args.steps}" if args.steps else ""),
    }


def write_cards(entry_name: str, entry: dict, vocab: DemoVocab, stats: dict, out_dir: Path) -> None:
    """Merge one model's entry into model_card.json and re-render MODEL_CARD.md from it."""
    path = out_dir / "model_card.json"
    card = json.loads(path.read_text()) if path.exists() else {"models": {}}
    card |= {"encoding": "cl100k_base", "fallback_rule": FALLBACK_RULE, "data": {
        "source": "Tiny Shakespeare (public domain), shared/data/tinyshakespeare.txt",
        "split": "first 90% of characters train, last 10% validate", **stats,
        "vocab_size": vocab.size, "num_byte_tokens": 256}}
    card["models"][entry_name] = entry
    path.write_text(json.dumps(card, indent=2) + "\n")
    (out_dir / "MODEL_CARD.md").write_text(render_markdown(card, out_dir))


def render_markdown(card: dict, out_dir: Path) -> str:
    lines = ["# Demo model card", "",
             "Miniatures of Llama 3 70B's architecture (pre-norm RMSNorm, rotary positions, grouped-query",
             "attention, SwiGLU, no biases; output head tied to the embedding) trained on Tiny Shakespeare.",
             "Generated by `scripts/train_demo_model.py` (numbers also in `model_card.json`).", "",
             f"**Tokens.** {card['encoding']} pieces, {card['data']['vocab_size']} of them. "
             f"**Fallback:** {card['fallback_rule']}", "",
             f"**Data.** {card['data']['split']}: {card['data']['train_tokens']:,} training tokens, "
             f"{card['data']['val_tokens']:,} held-out tokens "
             f"({card['data']['val_cl100k_pieces_via_byte_fallback']} held-out pieces used the fallback).", ""]
    rows = [("dim / layers", lambda m: f"{m['config']['dim']} / {m['config']['n_layers']}"),
            ("query / KV heads x head_dim", lambda m: f"{m['config']['n_heads']} / {m['config']['n_kv_heads']} x {m['config']['head_dim']}"),
            ("SwiGLU width", lambda m: f"{m['config']['ffn_dim']}"),
            ("context, rope_theta", lambda m: f"{m['config']['max_seq_len']}, {m['config']['rope_theta']:g}"),
            ("parameters (embedding)", lambda m: f"{m['params']['total']:,} ({m['params']['embedding']:,})"),
            ("weights file", lambda m: f"{m['weights_file']}, {m['weights_dtype']}, {m['weights_file_bytes'] / 1e6:.1f} MB"),
            ("steps x batch x seq", lambda m: f"{m['train']['steps']} x {m['train']['batch_size']} x {m['train']['seq_len']}"),
            ("tokens seen (epochs)", lambda m: f"{m['train']['tokens_seen']:,} ({m['train']['epochs']})"),
            ("dropout (residual, attention)", lambda m: f"{m['train']['dropout']}, {m['train'].get('attn_dropout', 0.0)}"),
            ("weights from step", lambda m: f"{m['train']['weights_from_step']}"),
            ("training time", lambda m: f"{m['train']['train_time_s'] / 60:.1f} min on {m['train']['threads']} CPU threads"),
            ("val loss (nats/token)", lambda m: f"{m['val']['loss_nats_per_token']:.3f}"),
            ("val perplexity per token", lambda m: f"{m['val']['perplexity_per_token']:.1f}"),
            ("val bits per byte", lambda m: f"{m['val']['bits_per_byte']:.3f}"),
            ("reproduce", lambda m: f"`{m['reproduce']}`")]
    names = list(card["models"])
    lines += ["| | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    lines += [f"| {label} | " + " | ".join(fn(card["models"][n]) for n in names) + " |" for label, fn in rows]
    lines += ["", "Validation runs the shipped float16 weights over the whole held-out 10% in non-overlapping",
              "windows of 256 tokens. Perplexity is per demo-model token (cl100k pieces plus fallback bytes);",
              "bits per byte is comparable across tokenizers. Neither is comparable with published",
              "perplexities of real models (other data, other vocabularies). The held-out text is not used",
              "for training, only to keep the best of the checkpoints checked during training.",
              "", "Training is seeded (torch.manual_seed, a seeded batch sampler); the same command on the",
              "same torch build and thread count reproduces the weights bit for bit. Training times are wall",
              "clock on a 2-core machine shared with other work, so they vary. Requires the `train` extra",
              "(torch); run from the repository root with the package installed.", ""]
    return "\n".join(lines + render_samples(card, out_dir))


def render_samples(card: dict, out_dir: Path) -> list[str]:
    """A seeded sample from each shipped model, generated by the numpy inference code."""
    from inside_llm.sim.model.transformer import DemoModel

    lines = ["## Samples", "", f"Prompt {SAMPLE['prompt']!r}, {SAMPLE['max_new_tokens']} tokens, temperature "
             f"{SAMPLE['temperature']}, top-k {SAMPLE['top_k']}, seed {SAMPLE['seed']} (numpy inference).", ""]
    for name in card["models"]:
        model = DemoModel.from_npz(out_dir / f"{name}.npz")
        prompt = model.encode(SAMPLE["prompt"])
        new = model.generate(prompt, SAMPLE["max_new_tokens"], SAMPLE["temperature"], SAMPLE["top_k"],
                             SAMPLE["seed"])
        lines += [f"**{name}**", "", "```text", model.decode(prompt + list(new)).rstrip(), "```", ""]
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", choices=sorted(CONFIGS), default="main")
    ap.add_argument("--data", type=Path, default=DEFAULT_DATA, help="training text (UTF-8)")
    ap.add_argument("--out-dir", type=Path, default=OUT_DIR)
    ap.add_argument("--steps", type=int, default=None, help="override the step count (smoke tests)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--render-card", action="store_true", help="only re-render MODEL_CARD.md from the json")
    args = ap.parse_args()
    if args.render_card:
        card = json.loads((args.out_dir / "model_card.json").read_text())
        (args.out_dir / "MODEL_CARD.md").write_text(render_markdown(card, args.out_dir))
        return
    c, tc = CONFIGS[args.model]
    if args.steps:
        tc.steps = args.steps
    torch.set_num_threads(args.threads)
    torch.manual_seed(tc.seed)
    vocab, train_ids, val_ids, stats = load_data(args.data)
    c.vocab_size = vocab.size
    print(f"{args.model}: {count_params(c)['total']:,} parameters, {stats}", flush=True)
    model = Transformer(c, tc.dropout, tc.attn_dropout)
    summary = train(model, train_ids, val_ids, tc)
    path = args.out_dir / f"{args.model}.npz"
    model = load_numpy_weights(Transformer(c).eval(), export(model, vocab, path))  # as shipped
    val_loss, val_tokens = evaluate(model, val_ids, c.max_seq_len)
    check_loss, _ = evaluate(model, val_ids[:CHECK_SLICE_TOKENS], CHECK_SLICE_TOKENS - 1)
    print(f"final val loss {val_loss:.4f} (perplexity {math.exp(val_loss):.1f}) over {val_tokens} tokens")
    entry = card_entry(args.model, c, tc, stats, summary, val_loss, val_tokens, round(check_loss, 5), path, args)
    write_cards(args.model, entry, vocab, stats, args.out_dir)


if __name__ == "__main__":
    main()
