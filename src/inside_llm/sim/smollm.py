"""SmolLM2-135M-Instruct in numpy: a real chat model, read from its GGUF file, run with a KV cache.

The architecture is Llama's, the same as the demo transformer's (sim/transformer.py), so the model
class here is a DemoModel with another loader and another vocabulary: pre-norm RMSNorm, rotary
positions, grouped-query attention, SwiGLU MLP, output head tied to the token embedding. Every
hyperparameter (30 layers, 576 wide, 9 query heads sharing 3 key/value heads, ...) and the chat
template are read from the file's metadata, none is typed here.

RoPE: llama.cpp's converter permutes the Q and K weights of llama-architecture models from Hugging
Face's "rotate half" layout back to Meta's interleaved pairs (x[2i], x[2i+1]), and llama.cpp rotates
them in that "normal" mode. transformer_ops.apply_rope rotates interleaved pairs, so the file's
weights are used as stored.

The file holds Q4_1 weights (Q8_0 for the embedding). They are dequantized once to float32 `.npy`
files (build_f32_cache, ~650 MB) that load_f32_cache memory-maps read-only, so server workers share
one copy in the page cache. All math is float32 on those dequantized values.

Each weight matrix W [in, out] is stored as column panels [out/c, in, c] (class Panels; x @ W works
as for an array). Reason, measured: OpenBLAS's sgemm for a few rows times a wide matrix packs the
whole matrix first, so 8 rows cost ~3.5x one row; on 16-column panels it takes its small-matrix path
and 8 rows cost ~1.5x one row. That is what lets a batch of 8 sequences share each weight read
(panel widths 16, 32, 48 and 96 were measured: 16 gave the fastest batch of 8 and no slower single row).

Tokenizer (SmolVocab): byte-level BPE from the file's tokens and merges, pre-tokenized as llama.cpp
does for pre-tokenizer type `smollm` (src/llama-vocab.cpp: first every digit alone, \\p{N}, then GPT-2's
split pattern), which is Hugging Face's Sequence[Digits(individual_digits), ByteLevel] for SmolLM.
Control tokens (<|im_start|>, <|im_end|>, ...) are matched whole in the text, as in Hugging Face's
chat pipeline.

Notation as in sim/transformer.py: T new tokens, V vocabulary, dim residual width.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import asdict
from functools import lru_cache
from pathlib import Path

import numpy as np

from inside_llm.sim.transformer import DemoConfig, DemoModel, Layer

FORMAT = 2  # bump when the cache layout changes; an older cache is rebuilt (2: 16-column panels)
ARCH = "llama"
# GGUF tensor name (blk.{i}.<name>.weight) -> Layer field; matrices are stored [out, in] in the file
TENSOR_FIELDS = {"attn_norm": "attn_norm", "attn_q": "wq", "attn_k": "wk", "attn_v": "wv",
                 "attn_output": "wo", "ffn_norm": "mlp_norm", "ffn_gate": "w1", "ffn_up": "w3", "ffn_down": "w2"}
TOKEN_TYPE_CONTROL = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL
PANEL_COLS = 16  # columns per weight panel (a tuning choice, see above); must divide every output width


class Panels:
    """A weight matrix W [in, out] held as column panels p [out/c, in, c]: x [N, in] @ W -> [N, out].

    Acts as W for `x @ W`, .shape, .size and np.asarray(W) (the last makes an [in, out] copy).
    """

    __array_ufunc__ = None  # so that `x @ panels` calls __rmatmul__ instead of numpy's own matmul

    def __init__(self, p: np.ndarray):
        self.p = p                                       # [n, in, c]
        self.shape = (p.shape[1], p.shape[0] * p.shape[2])
        self.ndim, self.size, self.dtype = 2, p.size, p.dtype

    def __rmatmul__(self, x: np.ndarray) -> np.ndarray:
        """x [..., in] -> [..., out], like x @ W."""
        x = np.asarray(x)
        rows = x.reshape(-1, self.shape[0])               # [N, in]
        y = np.matmul(rows, self.p)                       # [n, N, c]: one small sgemm per panel
        return y.transpose(1, 0, 2).reshape(*x.shape[:-1], self.shape[1])

    def __array__(self, dtype=None, copy=None) -> np.ndarray:
        w = self.p.transpose(1, 0, 2).reshape(self.shape)  # [in, out]
        return w if dtype is None else w.astype(dtype)

    @property
    def T(self) -> np.ndarray:
        return np.asarray(self).T

    @staticmethod
    def pack(w: np.ndarray, cols: int = PANEL_COLS) -> np.ndarray:
        """[in, out] -> panels [out/cols, in, cols] (contiguous)."""
        n_in, n_out = w.shape
        if n_out % cols:
            raise ValueError(f"output width {n_out} is not a multiple of {cols}")
        return np.ascontiguousarray(w.reshape(n_in, n_out // cols, cols).transpose(1, 0, 2))


# ---- reading the GGUF file (once, when the float32 cache is built) ------------------------------

def read_gguf_config(fields: dict) -> tuple[DemoConfig, dict]:
    """(architecture config, tokenizer/chat metadata) from a GGUFReader's fields."""
    def get(key):
        if key not in fields:
            raise ValueError(f"the model file has no {key!r} metadata")
        return fields[key].contents()

    arch = get("general.architecture")
    if arch != ARCH:
        raise ValueError(f"the model file's architecture is {arch!r}, not {ARCH!r}")
    n_heads, dim = int(get(f"{ARCH}.attention.head_count")), int(get(f"{ARCH}.embedding_length"))
    head_dim = dim // n_heads
    if int(get(f"{ARCH}.rope.dimension_count")) != head_dim:
        raise ValueError("partial rotary embeddings are not supported")
    config = DemoConfig(
        dim=dim, n_layers=int(get(f"{ARCH}.block_count")), n_heads=n_heads,
        n_kv_heads=int(get(f"{ARCH}.attention.head_count_kv")), head_dim=head_dim,
        ffn_dim=int(get(f"{ARCH}.feed_forward_length")), vocab_size=len(fields["tokenizer.ggml.tokens"].data),
        max_seq_len=int(get(f"{ARCH}.context_length")), rope_theta=float(get(f"{ARCH}.rope.freq_base")),
        norm_eps=float(get(f"{ARCH}.attention.layer_norm_rms_epsilon")))
    meta = {"name": get("general.name"), "basename": get("general.basename"),
            "size_label": get("general.size_label"), "license": get("general.license"),
            "organization": get("general.organization"), "finetune": get("general.finetune"),
            "tokenizer_model": get("tokenizer.ggml.model"), "pre_tokenizer": get("tokenizer.ggml.pre"),
            "bos_id": int(get("tokenizer.ggml.bos_token_id")), "eos_id": int(get("tokenizer.ggml.eos_token_id")),
            "add_bos": bool(get("tokenizer.ggml.add_bos_token")), "chat_template": get("tokenizer.chat_template")}
    if meta["tokenizer_model"] != "gpt2" or meta["pre_tokenizer"] != "smollm":
        raise ValueError(f"tokenizer {meta['tokenizer_model']}/{meta['pre_tokenizer']} is not supported "
                         "(expected gpt2/smollm)")
    return config, meta


def build_tokenizer(tokens: Sequence[str], merges: Sequence[str], token_types: Sequence[int]):
    """A Hugging Face `tokenizers` Tokenizer for byte-level BPE with the `smollm` pre-tokenizer."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers

    vocab = {t: i for i, t in enumerate(tokens)}
    bpe = models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges])
    tok = Tokenizer(bpe)
    # llama.cpp, LLAMA_VOCAB_PRE_TYPE_SMOLLM: "\p{N}" then GPT-2's pattern, over byte-level symbols
    tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True),
                                                 pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(tokens, token_types) if kind == TOKEN_TYPE_CONTROL])
    return tok


def _source_stamp(gguf: Path) -> dict:
    st = gguf.stat()
    return {"size": st.st_size, "mtime_ns": st.st_mtime_ns}


def build_f32_cache(gguf: Path, out: Path) -> None:
    """Dequantize every tensor of the GGUF at `gguf` to float32 .npy files in folder `out`.

    Writes into a temporary sibling folder and renames it into place, so a reader never sees half a
    cache; two processes building at once both finish and one rename wins. The caller checks the
    file's sha256 first (modelfile.check_file); the cache records the file's size and mtime.
    """
    from gguf import GGUFReader
    from gguf.quants import dequantize

    r = GGUFReader(str(gguf))
    config, meta = read_gguf_config(r.fields)
    tokens = r.fields["tokenizer.ggml.tokens"].contents()
    tok = build_tokenizer(tokens, r.fields["tokenizer.ggml.merges"].contents(),
                          r.fields["tokenizer.ggml.token_type"].contents())
    tensors = {t.name: t for t in r.tensors}

    def f32(name: str) -> np.ndarray:
        t = tensors[name]
        return dequantize(t.data, t.tensor_type).astype(np.float32, copy=False)

    tmp = out.with_name(f"{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    emb = f32("token_embd.weight")                                                  # [V, dim]
    np.save(tmp / "tok_emb.npy", emb)
    np.save(tmp / "unembed.npy", Panels.pack(emb.T))                                # tied head, as panels
    np.save(tmp / "norm.npy", f32("output_norm.weight"))                             # [dim]
    for gname, field in TENSOR_FIELDS.items():
        # file matrices are [out, in]; stored as panels of W [in, out] so that y = x @ W
        def one(i: int, gname: str = gname) -> np.ndarray:
            w = f32(f"blk.{i}.{gname}.weight")
            return w if w.ndim == 1 else Panels.pack(w.T)
        first = one(0)
        stack = np.lib.format.open_memmap(tmp / f"{field}.npy", "w+", np.float32,
                                          (config.n_layers, *first.shape))
        for i in range(config.n_layers):
            stack[i] = one(i)
        stack.flush()
        del stack
    tok.save(str(tmp / "tokenizer.json"))
    (tmp / "config.json").write_text(json.dumps(
        {"format": FORMAT, "panel_cols": PANEL_COLS, "config": asdict(config), "meta": meta,
         "source": _source_stamp(gguf),
         "num_tensors": len(tensors)}, indent=1))
    old = out.with_name(f"{out.name}.old-{os.getpid()}")
    if out.exists():
        out.rename(old)
    try:
        tmp.rename(out)
    except OSError:  # another process finished first; keep its cache
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)


def f32_cache_ok(out: Path, gguf: Path) -> bool:
    """Is `out` a complete float32 cache of this format, built from the GGUF file now at `gguf`?"""
    try:
        info = json.loads((out / "config.json").read_text())
        fields = ("tok_emb", "unembed", "norm", *TENSOR_FIELDS.values())
        return (info.get("format") == FORMAT and info.get("source") == _source_stamp(gguf)
                and (out / "tokenizer.json").is_file() and all((out / f"{f}.npy").is_file() for f in fields))
    except (OSError, ValueError):
        return False


# ---- the vocabulary ----------------------------------------------------------------------------

@lru_cache(maxsize=1)
def _byte_decoder() -> dict[str, int]:
    """GPT-2's byte-level alphabet, inverted: printable stand-in character -> byte value."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, n = {b: chr(b) for b in keep}, 0
    for b in range(256):
        if b not in chars:
            chars[b], n = chr(256 + n), n + 1
    return {c: b for b, c in chars.items()}


class SmolVocab:
    """Text <-> SmolLM2 ids (the file's own byte-level BPE), pieces as bytes, and the chat template."""

    def __init__(self, tokenizer, meta: dict):
        self.tokenizer, self.meta = tokenizer, meta
        self.size = tokenizer.get_vocab_size(with_added_tokens=True)
        vocab = tokenizer.get_vocab(with_added_tokens=True)
        self._strings = [""] * self.size
        for s, i in vocab.items():
            self._strings[i] = s
        self.special_ids = frozenset(tokenizer.token_to_id(t.content)
                                     for t in tokenizer.get_added_tokens_decoder().values() if t.special)
        self.bos_id, self.eos_id = meta["bos_id"], meta["eos_id"]
        self._plain = None  # encode_text's tokenizer, made on first need

    def encode(self, text: str) -> list[int]:
        """Ids for text; control tokens written in the text (e.g. <|im_start|>) become their single id."""
        return self.tokenizer.encode(text, add_special_tokens=False).ids

    def names_control_token(self, text: str) -> bool:
        """Whether text holds a control token's name (e.g. <|im_end|>)."""
        return any(self._strings[i] in text for i in self.special_ids)

    def encode_text(self, text: str) -> list[int]:
        """Ids for text read as text: a control token's name in it (<|im_start|>) is its characters."""
        if not self.names_control_token(text):
            return self.encode(text)
        if self._plain is None:  # the same tokenizer, with its control tokens matched only by id
            from tokenizers import Tokenizer

            self._plain = Tokenizer.from_str(self.tokenizer.to_str())
            self._plain.encode_special_tokens = True
        return self._plain.encode(text, add_special_tokens=False).ids

    def encode_with_offsets(self, text: str) -> tuple[list[int], list[tuple[int, int]]]:
        """(ids, (char_start, char_end) of each id in text); pieces of one character share its span."""
        enc = self.tokenizer.encode(text, add_special_tokens=False)
        return enc.ids, enc.offsets

    def decode(self, ids: Sequence[int]) -> str:
        return b"".join(self.piece(i) for i in ids).decode("utf-8", errors="replace")

    # tiktoken's names, so chapter 1's tokenizer code takes this vocabulary as it takes cl100k_base
    def encode_ordinary(self, text: str) -> list[int]:
        return self.encode_text(text)  # as tiktoken's: control tokens' names are text

    def decode_single_token_bytes(self, i: int) -> bytes:
        return self.piece(i)

    def token_string(self, i: int) -> str:
        """The id's entry in the file's token list (byte-level alphabet, e.g. 'Ġthe')."""
        return self._strings[int(i)]

    def piece(self, i: int) -> bytes:
        """The bytes id i stands for (a control token: its own text)."""
        s = self._strings[int(i)]
        if int(i) in self.special_ids:
            return s.encode("utf-8")
        table = _byte_decoder()
        return bytes(table[c] for c in s)

    def chat_tokens(self, prompt: str) -> list[dict]:
        """prompt as one user turn in the file's chat template, ready for the answer: one row per token
        {id, text, bytes, special, kind ("content" for the prompt's own tokens, else "template"), role}.

        The role is the turn a token is in (the name after the last <|im_start|> before it); the default
        system turn that the template adds counts as template.
        """
        rows = []
        for ids, kind, role in self.chat_segments(prompt):
            for tid in ids:
                piece = self.piece(tid)
                try:
                    shown = piece.decode("utf-8")
                except UnicodeDecodeError:
                    shown = None
                rows.append({"id": tid, "text": shown, "bytes": piece.hex(" ").upper(),
                             "special": tid in self.special_ids, "kind": kind, "role": role})
        return rows

    def chat_segments(self, prompt: str) -> list[tuple[list[int], str, str]]:
        """chat_tokens' ids in runs of one kind and role: [(ids, kind, role), ...], a handful of runs for any
        prompt (so a long prompt's rows need not all be built to count them)."""
        text = self.chat_prompt([{"role": "user", "content": prompt}])
        start = text.rindex(prompt) if prompt else len(text)                 # the prompt: the last user turn
        opener = self.token_string(self.bos_id)                              # <|im_start|>
        turns, i = [], text.find(opener)
        while i >= 0:                                                        # (char offset, role) per turn
            end = text.find("\n", i)
            turns.append((i, text[i + len(opener):end if end >= 0 else len(text)]))
            i = text.find(opener, i + len(opener))
        ids, spans = self.encode_with_offsets(text)
        starts = [a for a, _ in spans]
        lo, hi = bisect_left(starts, start), bisect_left(starts, start + len(prompt))  # the prompt's tokens
        firsts = [bisect_left(starts, t) for t, _ in turns]                  # each turn's first token
        cuts = sorted({0, lo, hi, len(ids), *firsts})
        out = []
        for x, y in zip(cuts, cuts[1:]):
            if x == y:
                continue
            role = next((r for f, (_, r) in zip(reversed(firsts), reversed(turns)) if f <= x), "")
            out.append((ids[x:y], "content" if lo <= x < hi else "template", role))
        return out

    def chat_prompt(self, messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
        """The file's own chat template (Jinja, sandboxed) applied to [{role, content}, ...]."""
        return _chat_template(self.meta["chat_template"]).render(
            messages=list(messages), add_generation_prompt=add_generation_prompt,
            bos_token=self.token_string(self.bos_id), eos_token=self.token_string(self.eos_id))


@lru_cache(maxsize=4)
def _chat_template(source: str):
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    return ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(source)


# ---- the model ---------------------------------------------------------------------------------

class SmolLM(DemoModel):
    """SmolLM2-135M-Instruct: DemoModel's forward/decode_step_batch/generate on memory-mapped weights.

    Extra: meta (the file's names, licence, chat template), chat_ids(), stop_ids.
    """

    def __init__(self, name: str, config: DemoConfig, tok_emb: np.ndarray, unembed: Panels,
                 layers: list[Layer], norm: np.ndarray, vocab: SmolVocab, meta: dict):
        # not DemoModel.__init__: its contiguous copy of tok_emb.T would be 113 MB private to each
        # worker; the cache holds the tied head as shared panels
        self.name, self.config, self.vocab, self.meta = name, config, vocab, meta
        self.tok_emb, self.unembed = tok_emb, unembed    # [V, dim] rows, Panels [dim, V]
        self.layers, self.norm = layers, norm
        self.stop_ids = frozenset({vocab.eos_id})       # <|im_end|>: the end of the assistant's turn

    def chat_ids(self, question: str, system: str | None = None) -> list[int]:
        """The question as one user turn in the file's chat template, ready for the assistant's answer. The
        turns' words are text: a control token's name typed in them (<|im_start|>system...) is its characters,
        never the control token, so a prompt cannot forge a turn; only the template's own markers are."""
        msgs = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": question}]
        v = self.vocab
        if not any(v.names_control_token(m["content"]) for m in msgs):
            return v.encode(v.chat_prompt(msgs))
        # each turn's words rendered as a mark \x00k\x00, the template around them encoded with its control tokens
        marked = v.chat_prompt([{**m, "content": f"\x00{k}\x00"} for k, m in enumerate(msgs)])
        ids = []
        for k, part in enumerate(re.split("\x00(\\d+)\x00", marked)):
            ids += v.encode_text(msgs[int(part)]["content"]) if k % 2 else v.encode(part)
        return ids

    def map_weights(self, fn, name: str = "") -> SmolLM:
        """A copy whose layer matrices are fn(field, W) with W a float32 [in, out] array (e.g. quantized and
        dequantized); norms, the embedding and the vocabulary are shared. Each copy holds its own
        ~430 MB of layer matrices in memory (not memory-mapped)."""
        def new(f: str, w):
            if not isinstance(w, Panels):
                return w
            return Panels(Panels.pack(np.asarray(fn(f, np.asarray(w)), dtype=np.float32)))
        layers = [Layer(**{f: new(f, getattr(w, f)) for f in Layer.__dataclass_fields__}) for w in self.layers]
        return SmolLM(name or self.name, self.config, self.tok_emb, self.unembed, layers, self.norm, self.vocab,
                      self.meta)

    def cl100k_ids(self, ids: Sequence[int]) -> list[None]:
        return [None] * len(ids)  # this vocabulary is not a subset of cl100k


def load_f32_cache(folder: Path, name: str = "smollm2") -> SmolLM:
    """The model from a float32 cache folder (build_f32_cache), weights memory-mapped read-only."""
    from tokenizers import Tokenizer

    info = json.loads((folder / "config.json").read_text())
    config = DemoConfig(**info["config"])

    def mm(field: str) -> np.ndarray:
        return np.asarray(np.load(folder / f"{field}.npy", mmap_mode="r"))  # plain ndarray view of the map

    stacks = {f: mm(f) for f in TENSOR_FIELDS.values()}                     # each [L, ...]
    layers = [Layer(**{f: stacks[f][i] if stacks[f].ndim == 2 else Panels(stacks[f][i])
                       for f in Layer.__dataclass_fields__}) for i in range(config.n_layers)]
    vocab = SmolVocab(Tokenizer.from_file(str(folder / "tokenizer.json")), info["meta"])
    return SmolLM(name, config, mm("tok_emb"), Panels(mm("unembed")), layers, mm("norm"), vocab, info["meta"])


def pin_blas_threads(n: int = 1) -> None:
    """Limit BLAS to n threads in this process (threadpoolctl). The server runs one request per core;
    OpenBLAS's own threads then only fight (a 576x1,536 mat-vec ran 40x slower under load)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=n, user_api="blas")
