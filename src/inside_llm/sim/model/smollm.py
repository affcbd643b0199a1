"""SmolLM2-135M-Instruct in numpy: a real chat model, read from its GGUF file, run with a KV cache.

The architecture is Llama's, the same as the demo transformer's (sim/model/transformer.py), so the model
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
one copy in the page cache: the float32 reference (SmolLM), which the inside views read. The same build
writes the served form beside it: every matrix as int8 codes with one scale per output row (sim/model/q8.py,
135 MB), which ServedSmolLM decodes from (the engine's model); its config.json lists every file's size and
checksum (check_cache).

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

Notation as in sim/model/transformer.py: T new tokens, V vocabulary, dim residual width.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import threading
from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path

import numpy as np

from inside_llm.sim.model.transformer import DemoConfig, DemoModel, Layer, LayerTrace
from inside_llm.sim.model.transformer_ops import apply_rope, rms_norm, rope_tables, silu

FORMAT = 3  # bump when the cache layout changes; an older cache is rebuilt (2: 16-column panels; 3: + q8, manifest)
ARCH = "llama"
# GGUF tensor name (blk.{i}.<name>.weight) -> Layer field; matrices are stored [out, in] in the file
TENSOR_FIELDS = {"attn_norm": "attn_norm", "attn_q": "wq", "attn_k": "wk", "attn_v": "wv",
                 "attn_output": "wo", "ffn_norm": "mlp_norm", "ffn_gate": "w1", "ffn_up": "w3", "ffn_down": "w2"}
# the served (q8) matrices: name -> the Layer fields whose [in, out] matrices it joins along the output
Q8_FUSED = {"qkv": ("wq", "wk", "wv"), "wo": ("wo",), "gu": ("w1", "w3"), "w2": ("w2",)}
TOKEN_TYPE_CONTROL = 3  # llama.cpp's LLAMA_TOKEN_TYPE_CONTROL
# a served pass attends each query of a sequence's piece of at most this many tokens alone (q8.attend_one, as
# decoding does: batch-invariant bits) and multiplies its rows by q8's row kernel; a longer piece of a prompt goes
# through transformer_ops.attend at once and q8's tile kernel (faster for many rows)
ROW_ATTEND_MAX = 64
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
    _write_q8(tmp, config)
    from inside_llm.sim.model import q8

    info = {"format": FORMAT, "panel_cols": PANEL_COLS, "config": asdict(config), "meta": meta,
            "source": _source_stamp(gguf), "num_tensors": len(tensors)}
    info["files"] = {f.name: {"bytes": f.stat().st_size, "checksum": q8.file_checksum(f)}
                     for f in sorted(tmp.iterdir())}
    (tmp / "config.json").write_text(json.dumps(info, indent=1))
    old = out.with_name(f"{out.name}.old-{os.getpid()}")
    if out.exists():
        out.rename(old)
    try:
        tmp.rename(out)
    except OSError:  # another process finished first; keep its cache
        shutil.rmtree(tmp, ignore_errors=True)
    shutil.rmtree(old, ignore_errors=True)


def _write_q8(folder: Path, config: DemoConfig) -> None:
    """The served matrices in the q8 format (sim/model/q8.py) beside the float32 ones, from them: per layer the
    fused q|k|v, o, gate|up and down matrices; the tied head from the embedding."""
    from inside_llm.sim.model import q8

    stacks = {f: np.load(folder / f"{f}.npy", mmap_mode="r") for f in TENSOR_FIELDS.values()}
    for name, fields in Q8_FUSED.items():
        first = np.concatenate([np.asarray(Panels(stacks[f][0])) for f in fields], axis=1)  # [in, out]
        n_in, n_out = first.shape
        qs = np.lib.format.open_memmap(folder / f"q8_{name}.npy", "w+", np.int8, (config.n_layers, n_out, n_in))
        ss = np.lib.format.open_memmap(folder / f"q8_{name}_s.npy", "w+", np.float32, (config.n_layers, n_out))
        for i in range(config.n_layers):
            w = np.concatenate([np.asarray(Panels(stacks[f][i])) for f in fields], axis=1)
            qs[i], ss[i] = q8.quantize(w)
        qs.flush()
        ss.flush()
        del qs, ss
    hq, hs = q8.quantize(np.load(folder / "tok_emb.npy", mmap_mode="r").T)  # [dim, V] -> [V, dim] codes
    np.save(folder / "q8_head.npy", hq)
    np.save(folder / "q8_head_s.npy", hs)


def f32_cache_ok(out: Path, gguf: Path) -> bool:
    """Is `out` a cache of this format, built from the GGUF file now at `gguf`, with every file it lists there
    at the size it was written? (Their contents: check_cache.)"""
    try:
        info = json.loads((out / "config.json").read_text())
        files = info.get("files") or {}
        return (info.get("format") == FORMAT and info.get("source") == _source_stamp(gguf)
                and {"tokenizer.json", "tok_emb.npy", "q8_head.npy"} <= files.keys()
                and all((out / n).stat().st_size == f["bytes"] for n, f in files.items()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def check_cache(out: Path) -> str | None:
    """None when every file of the cache at `out` has the checksum recorded when it was built; else what is
    wrong, in words (a zeroed or overwritten panel, a truncated tokenizer, ...). Reads each file once."""
    from inside_llm.sim.model import q8

    try:
        files = json.loads((out / "config.json").read_text())["files"]
        for name, f in files.items():
            if (got := q8.file_checksum(out / name)) != f["checksum"]:
                return f"{name} in the model cache is damaged (checksum {got}, recorded {f['checksum']})"
    except (OSError, ValueError, KeyError, TypeError) as e:
        return f"the model cache's manifest cannot be read ({type(e).__name__}: {e})"
    return None


VERIFIED = "verified.json"  # beside config.json: the files as they were when check_cache last passed


def _file_stamps(out: Path, names) -> dict:
    """Each file's (size, mtime, ctime, inode, device): any write, truncation, replacement or copy of a file
    changes one of them (ctime cannot be set back from user space)."""
    stamps = {}
    for name in sorted(names):
        st = (out / name).stat()
        stamps[name] = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev]
    return stamps


def verify_cache(out: Path, full: bool = False) -> str | None:
    """check_cache, skipped when nothing changed since it last passed: None when the cache at `out` is whole.

    After a full check passes, VERIFIED records the manifest's own checksum and every listed file's stamp
    (_file_stamps). A later start whose manifest and stamps all equal that record reads no weights (a few
    stat calls instead of ~750 MB of checksums); anything else runs the full check again and, when it passes,
    records the new stamps (best effort: a read-only cache is checked in full every time). full: check in full
    whatever the record says (`inside-llm fetch-model`)."""
    errors = (OSError, ValueError, KeyError, TypeError, AttributeError)
    try:
        manifest = (out / "config.json").read_bytes()
        record = {"manifest": hashlib.sha256(manifest).hexdigest(), "files": _file_stamps(out, json.loads(manifest)["files"])}
    except errors:
        record = None  # check_cache says what is wrong
    try:
        if not full and record is not None and json.loads((out / VERIFIED).read_text()) == record:
            return None
    except errors:
        pass  # no record yet, or an unreadable one: check in full
    if (problem := check_cache(out)) is not None or record is None:
        return problem
    tmp = out / f"{VERIFIED}.tmp-{os.getpid()}"
    try:
        tmp.write_text(json.dumps(record))
        os.replace(tmp, out / VERIFIED)  # replaces a link to another cache's record, never writes through it
    except OSError:
        tmp.unlink(missing_ok=True)
    return None


def remove_stale_builds(out: Path) -> list[Path]:
    """Remove the temporary folders that interrupted builds of `out` left beside it (the build writes
    `<out>.tmp-<pid>` and renames it into place; a killed build leaves it). A folder whose process still runs
    is kept (another worker may be building). Returns what was removed."""
    gone = []
    for tmp in out.parent.glob(f"{out.name}.tmp-*"):
        pid = tmp.name.rsplit("-", 1)[-1]
        if pid.isdigit() and int(pid) != os.getpid() and _alive(int(pid)):
            continue
        shutil.rmtree(tmp, ignore_errors=True)
        gone.append(tmp)
    for old in out.parent.glob(f"{out.name}.old-*"):
        shutil.rmtree(old, ignore_errors=True)
        gone.append(old)
    return gone


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


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


@dataclass
class Q8Layer:
    """One block as the server runs it: norms as float32, the matrices in q8 (sim/model/q8.py), q|k|v and gate|up
    each fused into one matrix (one kernel call, one pass over x)."""

    attn_norm: np.ndarray  # [dim]
    qkv: object            # q8.Q8Matrix [dim, (H + 2 Hkv) hd]
    wo: object             # [H hd, dim]
    mlp_norm: np.ndarray   # [dim]
    gu: object             # [dim, 2F]: gate, then up
    w2: object             # [F, dim]


class ServedSmolLM(SmolLM):
    """SmolLM2 decoding from its q8 matrices (what the engine runs): the same interface as SmolLM, sharing its
    vocabulary, embedding rows and norms; the head and every layer matrix are q8.Q8Matrix.

    `reference` is the float32 model (the inside views, and what the tests compare this one with).
    """

    def __init__(self, reference: SmolLM, layers: list[Q8Layer], head):
        r = reference
        SmolLM.__init__(self, r.name, r.config, r.tok_emb, head, layers, r.norm, r.vocab, r.meta)
        self.reference, self.weights_format = reference, "q8"
        self._rope_memo = threading.local()  # each thread's last pos and its tables (_rope)

    @property
    def num_params(self) -> int:
        return self.reference.num_params

    @property
    def bytes_per_token(self) -> int:
        """Weight bytes one decode step reads: every layer matrix and the head, codes and scales."""
        return sum(m.nbytes for w in self.layers for m in (w.qkv, w.wo, w.gu, w.w2)) + self.unembed.nbytes

    def map_weights(self, fn, name: str = ""):
        raise TypeError("the served q8 model has no float32 matrices: map the reference model's")

    def _rope(self, pos):
        """rope_tables(pos) once per forward pass, not once per layer (every layer gets the same pos array)."""
        memo = self._rope_memo
        if getattr(memo, "pos", None) is not pos:
            memo.tables = rope_tables(pos, self.config.head_dim, self.config.rope_theta)
            memo.pos = pos
        return memo.tables

    def _block(self, i, x, pos, spans, keep):
        if keep:
            return self._block_traced(i, x, pos, spans)
        from inside_llm.sim.model import q8

        w, c = self.layers[i], self.config
        cos, sin = self._rope(pos)
        mm = _products(spans, len(x))
        q, k, v = q8.split_rope(mm(q8.rms_norm_rows(x, w.attn_norm, c.norm_eps), w.qkv), cos, sin,
                                c.n_heads, c.n_kv_heads, c.head_dim)
        o = np.empty((len(x), c.n_heads * c.head_dim), np.float32)
        for seq_cache, rows in spans:
            qs, ks, vs = q[rows].transpose(1, 0, 2), k[rows].transpose(1, 0, 2), v[rows].transpose(1, 0, 2)
            if rows.stop - rows.start <= ROW_ATTEND_MAX and hasattr(seq_cache, "pages"):
                # decoding, a check pass or a short prefill piece: each query by decode's own call, so a row
                # gets the same bits whether it comes alone or with others (a check pass = its decode steps)
                p0 = int(pos[rows.start])
                seq_cache.write(i, p0, ks, vs)
                kv = seq_cache.pages(i)
                for r in range(rows.start, rows.stop):
                    q8.attend_one(q[r], *kv, int(pos[r]), c.max_seq_len, o[r])
            else:
                o[rows], _ = self._attend_cached(i, seq_cache, qs, ks, vs, pos[rows])
        mid = x + mm(o, w.wo)
        gu = mm(q8.rms_norm_rows(mid, w.mlp_norm, c.norm_eps), w.gu)
        return mid + mm(silu(gu[:, : c.ffn_dim]) * gu[:, c.ffn_dim :], w.w2), None

    def _block_traced(self, i, x, pos, spans):
        """_block with every intermediate kept (LayerTrace: the inside views), in numpy."""
        w, c, N = self.layers[i], self.config, len(x)
        nq, nkv = c.n_heads * c.head_dim, c.n_kv_heads * c.head_dim
        h = rms_norm(x, w.attn_norm, c.norm_eps)
        cos, sin = rope_tables(pos, c.head_dim, c.rope_theta)
        qkv = h @ w.qkv                                                                # [N, nq + 2 nkv]
        q = apply_rope(qkv[:, :nq].reshape(N, c.n_heads, c.head_dim).transpose(1, 0, 2), cos, sin)
        k = apply_rope(qkv[:, nq:nq + nkv].reshape(N, c.n_kv_heads, c.head_dim).transpose(1, 0, 2), cos, sin)
        v = qkv[:, nq + nkv:].reshape(N, c.n_kv_heads, c.head_dim).transpose(1, 0, 2)
        o = np.empty((N, nq), np.float32)
        for seq_cache, rows in spans:
            o[rows], att = self._attend_cached(i, seq_cache, q[:, rows], k[:, rows], v[:, rows], pos[rows])
        attn_out = o @ w.wo
        mid = x + attn_out
        gu = rms_norm(mid, w.mlp_norm, c.norm_eps) @ w.gu                              # [N, 2F]
        gate, up = gu[:, :c.ffn_dim], gu[:, c.ffn_dim:]
        hidden = silu(gate) * up
        mlp_out = hidden @ w.w2
        out = mid + mlp_out
        return out, LayerTrace(x, q, k, v, att, attn_out, mid, gate, up, hidden, mlp_out, out)


def _products(spans, n_rows: int):
    """x @ W for one served step's rows: q8's row kernel for the rows of pieces of at most ROW_ATTEND_MAX tokens
    (decoding, checks, short prompt pieces), its tile kernel (W.wide) for the rows of longer prompt pieces. The
    kernel is chosen by the row's own piece, never by the step, so no row's bits depend on its neighbours."""
    wide = [rows for _, rows in spans if rows.stop - rows.start > ROW_ATTEND_MAX]
    if not wide:
        return lambda x, w: x @ w
    if len(wide) == len(spans):
        return lambda x, w: w.wide(x)
    long = np.zeros(n_rows, bool)
    for rows in wide:
        long[rows] = True

    def mm(x, w):
        out = np.empty((n_rows, w.shape[1]), np.float32)
        out[long], out[~long] = w.wide(x[long]), x[~long] @ w
        return out

    return mm


def load_q8(folder: Path, reference: SmolLM) -> ServedSmolLM:
    """The served model from the q8 files of a cache folder (memory-mapped read-only), beside `reference`."""
    from inside_llm.sim.model.q8 import Q8Matrix

    def mm(name: str) -> np.ndarray:
        return np.asarray(np.load(folder / f"{name}.npy", mmap_mode="r"))

    mats = {n: (mm(f"q8_{n}"), mm(f"q8_{n}_s")) for n in Q8_FUSED}
    layers = [Q8Layer(attn_norm=r.attn_norm, mlp_norm=r.mlp_norm,
                      **{n: Q8Matrix(q[i], s[i]) for n, (q, s) in mats.items()})
              for i, r in enumerate(reference.layers)]
    return ServedSmolLM(reference, layers, Q8Matrix(mm("q8_head"), mm("q8_head_s")))


def pin_blas_threads(n: int = 1) -> None:
    """Limit BLAS to n threads in this process (threadpoolctl). The server runs one request per core;
    OpenBLAS's own threads then only fight (a 576x1,536 mat-vec ran 40x slower under load)."""
    from threadpoolctl import threadpool_limits

    threadpool_limits(limits=n, user_api="blas")
