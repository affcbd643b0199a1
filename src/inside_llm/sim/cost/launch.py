"""Explain a launch command: where every GiB of `vllm serve`, `llama-server` or SGLang goes, and what it will print.

`explain(command, gpu)` parses one launch command (the flags that decide memory; every other flag is
listed in `ignored`, never dropped silently), resolves the model against the catalog (a Hugging Face
name such as meta-llama/Llama-3.1-8B-Instruct or a GGUF file name such as ...-Q4_K_M.gguf), and
splits one GPU's memory the way the engine does. Figures are binary GiB / MiB, as the engines print them.

vLLM (V1, 0.8+), per GPU of the tp x pp group:
    budget      = gpu_memory_utilization x CUDA-visible memory
    kv_pool     = budget - weights - activation peak - non-torch memory
    blocks      = floor(kv_pool / (block_size x KV bytes per token on this GPU))
    "GPU KV cache size: N tokens"                N = blocks x block_size
    "Maximum concurrency for L tokens per request: X"   X = blocks / ceil(L / block_size)
  The activation peak is vLLM's profile run: max_num_batched_tokens tokens through one layer's buffers
  (costmodel.activation_bytes's per-token sizes, x ACTIVATION_FACTOR) plus max_num_seqs rows of FP32 logits.
  When one request of max_model_len does not fit, vLLM refuses to start; the error it prints is predicted.

SGLang (0.4-0.5's rule, model_runner.profile_max_num_token), per GPU:
    total       = CUDA-visible memory - SGLANG_INIT_GIB (CUDA context and NCCL, before the weights)
    rest        = total x mem_fraction_static - weights
    max_total_num_tokens = floor(rest / KV bytes per token on this GPU)

llama.cpp (llama-server):
    n_ctx_slot  = c / np, or c when the KV cache is unified (--kv-unified, or -np left to "auto",
                  which then starts 4 slots sharing all c cells: ggml-org/llama.cpp#23652)
    KV cache    = c x layers on the GPU x (K bytes + V bytes) per layer per token, exactly as printed
    weights     = parameters x the GGUF type's bits per weight (a typical figure: marked as estimated)

Constants that are not formulas are calibrated on the golden start-up logs in tests/sim/cost/test_launch.py
(each thread linked there) and named here.
"""

from __future__ import annotations

import math
import re
from dataclasses import asdict, dataclass
from typing import Any

from ..core.errors import SimError
from ..hardware import catalog
from ..hardware.hardware import GPU
from ..model.models import ModelSpec, param_counts
from .costmodel import EngineConfig

GIB = float(1 << 30)
MIB = float(1 << 20)
MAX_COMMAND_CHARS = 4000
MAX_COMMAND_TOKENS = 300

# vLLM's profile run keeps more live buffers than one layer's inputs and outputs (the MLP's gate/up output
# and its activation, attention workspaces): 1.75 x costmodel's per-token activation sizes reproduces
# the 1.26 GiB "PyTorch activation peak memory" of Llama 3 8B at 8,192 batched tokens (vllm PR #10511).
ACTIVATION_FACTOR = 1.75
# CUDA context, cuBLAS workspaces and NCCL buffers outside PyTorch's allocator (vLLM's "non_torch_memory"):
# PR #10511 logs 1.79 GiB on one H100 and 3.58 GiB per GPU at tp=2; RTX 3090 logs show 0.2-0.35 GiB.
NON_TORCH_GIB = 1.0
NON_TORCH_TP_GIB = 2.0
# SGLang measures its total after CUDA and NCCL start (before the weights load).
SGLANG_INIT_GIB = 1.0

# CUDA-visible memory per GPU, where a public log shows it; others: the vendor's GB read as GiB, less 1%.
VISIBLE_GIB: dict[str, tuple[float, str]] = {
    "h100-sxm": (79.22, "vllm-project/vllm PR #10511 log on an H100 80GB: total_gpu_memory 79.22GiB"),
    "l40s": (
        44.56,
        "nvidia-smi shows 46,068 MiB on an L40S (sgl-project/sglang PR #13023; ECC keeps 1/16 of the 48 GB); "
        "CUDA reports about 0.43 GiB less than nvidia-smi's total, as on H100 (81,559 MiB vs 79.22 GiB)",
    ),
}

ENGINES = ("vllm", "llama.cpp", "sglang")


class CommandError(SimError):
    """A launch command the parser cannot read; the message names the token (1-based) and its character."""

    def __init__(self, message: str) -> None:
        super().__init__("cmd", message)


# ---- tokens ---------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Token:
    text: str
    index: int  # 1-based position among the command's words
    pos: int  # 0-based character offset where the word starts

    @property
    def where(self) -> str:
        return f"word {self.index}, character {self.pos + 1}"


def tokenize(command: str) -> list[Token]:
    """Shell words with their positions: quotes, backslash escapes and line continuations as a shell reads them."""
    if len(command) > MAX_COMMAND_CHARS:
        raise CommandError(f"The command must be at most {MAX_COMMAND_CHARS:,} characters long, not {len(command):,}.")
    out: list[Token] = []
    buf: list[str] = []
    start = -1
    quote = ""
    quote_at = 0
    i = 0
    while i < len(command):
        ch = command[i]
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\" and quote == '"' and i + 1 < len(command) and command[i + 1] in '"\\$`':
                i += 1
                buf.append(command[i])
            else:
                buf.append(ch)
        elif ch == "\\" and i + 1 < len(command):
            nxt = command[i + 1]
            i += 1
            if nxt == "\n" or (nxt == "\r" and command[i + 1 : i + 2] == "\n"):
                i += 1 if nxt == "\r" else 0
            else:
                start = i - 1 if start < 0 else start
                buf.append(nxt)
        elif ch in "'\"":
            start = i if start < 0 else start
            quote, quote_at = ch, i
        elif ch.isspace():
            if start >= 0:
                out.append(Token("".join(buf), len(out) + 1, start))
                buf, start = [], -1
        else:
            start = i if start < 0 else start
            buf.append(ch)
        i += 1
    if quote:
        raise CommandError(f"The command has an unclosed {quote} quote, opened at character {quote_at + 1}.")
    if start >= 0:
        out.append(Token("".join(buf), len(out) + 1, start))
    if len(out) > MAX_COMMAND_TOKENS:
        raise CommandError(f"The command must have at most {MAX_COMMAND_TOKENS} words, not {len(out)}.")
    return out


# ---- flags ----------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Flag:
    key: str
    names: tuple[str, ...]
    kind: str  # "int" | "float" | "str" | "bool" | "tokens" (an integer that may end in k/K/m/M)
    lo: float | None = None
    hi: float | None = None
    choices: tuple[str, ...] = ()
    negations: tuple[str, ...] = ()


VLLM_FLAGS = (
    Flag("model", ("--model",), "str"),
    Flag("tensor_parallel_size", ("--tensor-parallel-size", "-tp"), "int", 1, 64),
    Flag("pipeline_parallel_size", ("--pipeline-parallel-size", "-pp"), "int", 1, 64),
    Flag("max_model_len", ("--max-model-len",), "tokens", 1, 16 << 20),
    Flag("max_num_seqs", ("--max-num-seqs",), "int", 1, 1 << 16),
    Flag("max_num_batched_tokens", ("--max-num-batched-tokens",), "int", 1, 1 << 21),
    Flag("gpu_memory_utilization", ("--gpu-memory-utilization",), "float", 0.01, 1.0),
    Flag(
        "kv_cache_dtype",
        ("--kv-cache-dtype",),
        "str",
        choices=("auto", "bfloat16", "float16", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"),
    ),
    Flag("block_size", ("--block-size",), "int", choices=("1", "8", "16", "32", "64", "128", "256")),
    Flag("enable_prefix_caching", ("--enable-prefix-caching",), "bool", negations=("--no-enable-prefix-caching",)),
    Flag("quantization", ("--quantization", "-q"), "str"),
    Flag("dtype", ("--dtype",), "str", choices=("auto", "half", "float16", "bfloat16", "float", "float32")),
)
LLAMA_FLAGS = (
    Flag("model", ("-m", "--model"), "str"),
    Flag("hf_repo", ("-hf", "-hfr", "--hf-repo"), "str"),
    Flag("ctx_size", ("-c", "--ctx-size"), "int", 0, 16 << 20),
    Flag("parallel", ("-np", "--parallel"), "int", -1, 256),
    Flag(
        "cache_type_k",
        ("-ctk", "--cache-type-k"),
        "str",
        choices=tuple(k for k in ("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")),
    ),
    Flag(
        "cache_type_v",
        ("-ctv", "--cache-type-v"),
        "str",
        choices=("f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1"),
    ),
    Flag("n_gpu_layers", ("-ngl", "--gpu-layers", "--n-gpu-layers"), "str"),
    Flag("batch_size", ("-b", "--batch-size"), "int", 1, 1 << 20),
    Flag("ubatch_size", ("-ub", "--ubatch-size"), "int", 1, 1 << 20),
    Flag("kv_unified", ("-kvu", "--kv-unified"), "bool", negations=("--no-kv-unified",)),
)
SGLANG_FLAGS = (
    Flag("model_path", ("--model-path", "--model"), "str"),
    Flag("tp_size", ("--tp", "--tp-size", "--tensor-parallel-size"), "int", 1, 64),
    Flag("mem_fraction_static", ("--mem-fraction-static", "--mem-frac"), "float", 0.01, 1.0),
    Flag("max_running_requests", ("--max-running-requests",), "int", 1, 1 << 20),
    Flag("context_length", ("--context-length",), "int", 1, 16 << 20),
    Flag("max_total_tokens", ("--max-total-tokens",), "int", 1, 1 << 30),
    Flag("kv_cache_dtype", ("--kv-cache-dtype",), "str", choices=("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16")),
    Flag("quantization", ("--quantization",), "str"),
    Flag("dtype", ("--dtype",), "str"),
    Flag("chunked_prefill_size", ("--chunked-prefill-size",), "int", -1, 1 << 20),
)
# Flags known to take no value, so the word after them is not swallowed as their value when they are ignored.
NO_VALUE = frozenset(
    "--trust-remote-code --enforce-eager --enable-chunked-prefill --no-enable-chunked-prefill "
    "--disable-log-requests --disable-log-stats --enable-auto-tool-choice --enable-expert-parallel "
    "--disable-custom-all-reduce --enable-sleep-mode --jinja --no-mmap --mlock --cont-batching --metrics "
    "--embedding --verbose -v --no-warmup --disable-radix-cache --enable-torch-compile --enable-dp-attention "
    "--disable-cuda-graph --enable-metrics --log-requests -cb --no-webui --slots --props".split()
)
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


def _is_flag(text: str) -> bool:
    return text.startswith("-") and len(text) > 1 and not _NUMBER.match(text)


def _norm(name: str) -> str:
    return name.replace("_", "-") if name.startswith("--") else name


def _convert(flag: Flag, shown: str, raw: str, tok: Token) -> Any:
    if flag.kind in ("int", "tokens"):
        m = re.fullmatch(r"(\d+)([kKmM]?)", raw.strip())
        if not m or (m.group(2) and flag.kind != "tokens"):
            if flag.kind == "int" and re.fullmatch(r"-\d+", raw.strip()):
                value = int(raw)
            else:
                raise CommandError(f"{shown} takes a whole number, not '{raw}' ({tok.where}).")
        else:
            mult = {"": 1, "k": 1000, "K": 1024, "m": 1_000_000, "M": 1 << 20}[m.group(2)]
            value = int(m.group(1)) * mult
    elif flag.kind == "float":
        try:
            value = float(raw)
        except ValueError:
            raise CommandError(f"{shown} takes a number, not '{raw}' ({tok.where}).") from None
        if not math.isfinite(value):
            raise CommandError(f"{shown} takes a finite number, not '{raw}' ({tok.where}).")
    else:
        value = raw
    if flag.choices and str(value).lower() not in flag.choices:
        raise CommandError(f"{shown} must be one of {', '.join(flag.choices)}, not '{raw}' ({tok.where}).")
    if isinstance(value, str) and flag.choices:
        value = value.lower()
    if flag.lo is not None and not isinstance(value, str) and not flag.lo <= value <= (flag.hi or math.inf):
        raise CommandError(f"{shown} must be between {flag.lo:g} and {flag.hi:g}, not {raw} ({tok.where}).")
    return value


def parse_flags(words: list[Token], flags: tuple[Flag, ...]) -> tuple[dict[str, Any], list[str], list[Token]]:
    """(values by key, ignored flags as written, positional words); argparse's rules: `--a=b` or `--a b`, last wins."""
    by_name = {n: f for f in flags for n in f.names}
    negations = {n: f for f in flags for n in f.negations}
    values: dict[str, Any] = {}
    ignored: list[str] = []
    positional: list[Token] = []
    i = 0
    while i < len(words):
        tok = words[i]
        if not _is_flag(tok.text):
            positional.append(tok)
            i += 1
            continue
        name, eq, inline = tok.text.partition("=")
        key = _norm(name)
        if key in negations:
            values[negations[key].key] = False
        elif key in by_name:
            flag = by_name[key]
            if flag.kind == "bool":
                values[flag.key] = inline.lower() not in ("false", "0", "off", "no") if eq else True
            else:
                vtok = tok
                if eq:
                    raw = inline
                elif i + 1 < len(words) and not _is_flag(words[i + 1].text):
                    i += 1
                    raw, vtok = words[i].text, words[i]
                else:
                    raise CommandError(f"{name} needs a value after it ({tok.where}).")
                values[flag.key] = _convert(flag, name, raw, vtok)
        elif eq or key in NO_VALUE or i + 1 >= len(words) or _is_flag(words[i + 1].text):
            ignored.append(tok.text)
        else:
            ignored.append(f"{tok.text} {words[i + 1].text}")
            i += 1
        i += 1
    return values, ignored, positional


# ---- which engine --------------------------------------------------------------------------------


def split_engine(words: list[Token]) -> tuple[str, list[Token], Token]:
    """(engine, the words after the program, the program's word); CommandError when none of the three."""
    i = 0
    while i < len(words) and (re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[i].text) or words[i].text in ("env", "$")):
        i += 1
    if i >= len(words):
        raise CommandError(
            "The command is empty: paste a `vllm serve ...`, `llama-server ...` or "
            "`python -m sglang.launch_server ...` line."
        )
    first = words[i]
    prog = re.split(r"[\\/]", first.text)[-1].lower()
    if re.fullmatch(r"python[\d.]*(\.exe)?|uv|uvx", prog):
        j = i + 1
        if prog == "uv" and j < len(words) and words[j].text == "run":
            j += 1
            if j < len(words) and words[j].text.startswith("python"):
                j += 1
        if j + 1 < len(words) and words[j].text == "-m":
            module = words[j + 1].text
            if module == "sglang.launch_server":
                return "sglang", words[j + 2 :], words[j + 1]
            if module == "vllm.entrypoints.openai.api_server":
                return "vllm", words[j + 2 :], words[j + 1]
            raise CommandError(
                f"python -m {module} is not a server this page knows ({words[j + 1].where}): use "
                "sglang.launch_server or vllm.entrypoints.openai.api_server."
            )
        raise CommandError(f"After {first.text} this page expects `-m sglang.launch_server` ({first.where}).")
    if prog == "vllm":
        if i + 1 < len(words) and words[i + 1].text == "serve":
            return "vllm", words[i + 2 :], words[i + 1]
        nxt = words[i + 1] if i + 1 < len(words) else first
        raise CommandError(f"vLLM's server starts with `vllm serve`; {nxt.where} is '{nxt.text}'.")
    if prog.startswith("llama-server") or prog in ("server", "server.exe"):
        return "llama.cpp", words[i + 1 :], first
    if prog == "sglang" and i + 1 < len(words) and words[i + 1].text in ("serve", "launch_server"):
        return "sglang", words[i + 2 :], words[i + 1]
    raise CommandError(
        f"The command must start with `vllm serve`, `llama-server` or `python -m sglang.launch_server`; "
        f"it starts with '{first.text}' ({first.where})."
    )


# ---- which model ---------------------------------------------------------------------------------

# (pattern on the normalised name, catalog id, context window when it differs, note)
ALIASES: tuple[tuple[str, str, int | None, str], ...] = (
    (r"distill-llama-8b", "llama-3.1-8b", None, "DeepSeek-R1-Distill-Llama-8B is a Llama 3.1 8B"),
    (r"distill-llama-70b", "llama-3.1-70b", None, "DeepSeek-R1-Distill-Llama-70B is a Llama 3.3 70B"),
    (r"llama-?3\.[13]-?70b", "llama-3.1-70b", None, "Llama 3.3 70B has Llama 3.1 70B's shape"),
    (r"llama-?3-?70b", "llama-3.1-70b", 8192, "Llama 3 70B: Llama 3.1 70B's shape with an 8,192-token window"),
    (r"llama-?3\.1-?405b", "llama-3.1-405b", None, ""),
    (r"llama-?3\.1-?8b", "llama-3.1-8b", None, ""),
    (r"llama-?3-?8b", "llama-3.1-8b", 8192, "Llama 3 8B: Llama 3.1 8B's shape with an 8,192-token window"),
    (r"llama-?2-?70b", "llama-2-70b", None, ""),
    (r"llama-?2-?7b", "llama-2-7b", None, ""),
    (r"mixtral-?8x7b", "mixtral-8x7b", None, ""),
    (r"qwen2\.5-?72b", "qwen2.5-72b", None, ""),
    (r"qwen3-?235b-?a22b", "qwen3-235b-a22b", None, ""),
    (r"qwen3-?30b-?a3b", "qwen3-30b-a3b", None, ""),
    (r"qwen3-?32b", "qwen3-32b", None, ""),
    (r"deepseek-?(v3|r1)(?!-?distill)", "deepseek-v3", None, ""),
    (r"gpt-?oss-?120b", "gpt-oss-120b", None, ""),
    (r"llama-?4-?scout", "llama-4-scout", None, ""),
)


@dataclass(frozen=True)
class ModelMatch:
    spec: ModelSpec
    window: int
    note: str


def match_model(name: str, override: str | None = None) -> ModelMatch | None:
    """The catalog model a Hugging Face name, local path or GGUF file name refers to (None if none)."""
    if override:
        spec = catalog.model(override)
        return ModelMatch(spec, spec.max_position_embeddings, "model chosen by hand")
    s = name.lower().replace("_", "-").replace(" ", "-").replace("meta-llama-", "llama-")
    s = s.replace("--", "/")  # Hugging Face cache folders: models--org--name
    models = catalog.models()
    tail = re.split(r"[\\/]", s.rstrip("/"))[-1] if s else ""
    if tail in models:
        spec = models[tail]
        return ModelMatch(spec, spec.max_position_embeddings, "")
    for pattern, mid, window, note in ALIASES:
        if re.search(pattern, s):
            spec = models[mid]
            return ModelMatch(spec, window or spec.max_position_embeddings, note)
    return None


def _unknown_model(name: str) -> CommandError:
    ids = ", ".join(catalog.models())
    return CommandError(
        f"The model '{name}' is not one this page knows the shape of; pick the catalog model it matches "
        f"with model= (one of {ids})."
    )


def weight_precision(name: str, quantization: str | None, spec: ModelSpec) -> tuple[str, str]:
    """(catalog precision, why) from --quantization, else the checkpoint's name (FP8, AWQ, w8a8, ...)."""
    q, n = (quantization or "").lower(), name.lower()
    if q in ("fp8", "fbgemm_fp8", "ptpc_fp8", "modelopt") or (not q and re.search(r"fp8", n)):
        return "fp8", "FP8 weights" + (" (--quantization)" if q else " (the checkpoint's name says FP8)")
    if q in ("modelopt_fp4", "nvfp4") or re.search(r"nvfp4|fp4", n):
        return "nvfp4", "NVFP4 weights"
    if q in ("awq", "awq_marlin", "gptq", "gptq_marlin", "marlin", "bitsandbytes", "auto-round", "auto_round") or (
        re.search(r"awq|gptq|int4|w4a16|4bit|bnb", n)
    ):
        return "int4", "4-bit weights (AWQ/GPTQ-style, one FP16 scale per 128)"
    if q in ("mxfp4",) or spec.id == "gpt-oss-120b":
        return "mxfp4", "MXFP4 weights, as gpt-oss ships"
    if re.search(r"w8a8|int8", n) or q in ("experts_int8",):
        return "int8", "INT8 weights (the checkpoint's name says w8a8/int8)"
    return "bf16", "16-bit weights (no quantization in the flags or the name)"


# ---- the explanation ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Segment:
    """One part of a GPU's memory, in GiB."""

    key: str
    label: str
    gib: float
    note: str


@dataclass(frozen=True)
class Suggestion:
    goal: str
    change: str  # the flags to add or change
    effect: str


@dataclass(frozen=True)
class Explanation:
    engine: str
    command: str
    model: str | None  # catalog id
    model_name: str
    gpu: str
    gpu_name: str
    gpus: int
    settings: dict[str, Any]  # every setting that decides memory, as the engine will use it
    from_command: list[str]  # the settings the command set (the rest are the engine's defaults)
    ignored: list[str]  # flags read but not modelled
    capacity_gib: float  # CUDA-visible memory per GPU
    capacity_note: str
    memory: list[Segment]  # per GPU; adds up to capacity_gib
    fits: bool
    verdict: str
    log_lines: list[str]  # what the engine will print at start-up
    facts: dict[str, Any]
    suggestions: list[Suggestion]
    assumptions: list[str]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def visible_gib(gpu: GPU) -> tuple[float, str]:
    """CUDA-visible memory per GPU (GiB) and where the figure comes from."""
    if gpu.id in VISIBLE_GIB:
        return VISIBLE_GIB[gpu.id]
    return gpu.hbm_capacity_gb * 0.99, f"estimated: {gpu.name}'s {gpu.hbm_capacity_gb:g} GB read as GiB, less 1%"


def _explanation(
    engine: str,
    shown: str,
    g: GPU,
    values: dict[str, Any],
    ignored: list[str],
    spec: ModelSpec | None,
    gpus: int,
    figures: tuple[dict[str, Any], list[Segment], bool, str, list[str], dict[str, Any], list[Suggestion], list[str]],
    name: str = "unknown model",
) -> Explanation:
    """Every engine's explanation: the command as read (its flags set and not modelled), the model (None when
    the catalog has no match: then `name`), the GPU and the memory CUDA sees on it, around the engine's own
    `figures` (settings, memory, fits, verdict, log lines, facts, suggestions, assumptions)."""
    total, total_note = visible_gib(g)
    settings, memory, fits, verdict, log, facts, suggestions, assumptions = figures
    return Explanation(
        engine,
        shown,
        spec.id if spec else None,
        spec.name if spec else name,
        g.id,
        g.name,
        gpus,
        settings,
        sorted(values),
        ignored,
        total,
        total_note,
        memory,
        fits,
        verdict,
        log,
        facts,
        suggestions,
        assumptions,
    )


def explain(command: str, gpu: str = catalog.DEFAULT_GPU, model: str | None = None) -> Explanation:
    """Parse `command` and explain it on `gpu` (catalog id); `model` (catalog id) overrides the name's match.

    CommandError (a SimError on field `cmd`) names the word it could not read; SimError from the cost model
    (tp must divide the heads, ...) comes back on field `cmd` too.
    """
    if not command or not command.strip():
        raise CommandError(
            "The command is empty: paste a `vllm serve ...`, `llama-server ...` or "
            "`python -m sglang.launch_server ...` line."
        )
    g = catalog.gpu(gpu)
    if model is not None:
        catalog.model(model)
    words = tokenize(command)
    engine, rest, prog = split_engine(words)
    shown = " ".join(t.text for t in words)
    try:
        if engine == "vllm":
            return _vllm(shown, rest, prog, g, model)
        if engine == "sglang":
            return _sglang(shown, rest, g, model)
        return _llama(shown, rest, g, model)
    except CommandError:
        raise
    except SimError as e:  # the cost model refused the setup: say so about the command
        raise CommandError(f"This command cannot run as written: {e.message}") from None


def _cfg(spec: ModelSpec, g: GPU, tp: int, pp: int, precision: str, kv: str) -> EngineConfig:
    return EngineConfig(spec, g, tp, pp, precision, kv)


def _per_token_activation_values(spec: ModelSpec, tp: int) -> float:
    """costmodel.activation_bytes's per-token values: residual + normed input, QKV, gate and up (MoE: top-k experts)."""
    mlp = spec.expert_width * (spec.num_experts_per_tok if spec.is_moe else 1) + spec.shared_width
    return 2 * spec.hidden_size + (spec.q_dim + 2 * spec.kv_dim) / tp + 2 * mlp / tp


def _gib(x: float) -> str:
    return f"{x:,.2f} GiB"


def _vllm(shown: str, words: list[Token], prog: Token, g: GPU, override: str | None) -> Explanation:
    values, ignored, positional = parse_flags(words, VLLM_FLAGS)
    name = values.get("model")
    if name is None and positional:
        name = positional[0].text
        positional = positional[1:]
    ignored += [f"{t.text} (extra word)" for t in positional]
    if not name:
        raise CommandError(f"`vllm serve` needs the model right after it ({prog.where}).")
    match = match_model(name, override)
    if match is None:
        raise _unknown_model(name)
    spec = match.spec
    total, total_note = visible_gib(g)
    big = total >= 70
    tp = values.get("tensor_parallel_size", 1)
    pp = values.get("pipeline_parallel_size", 1)
    util = values.get("gpu_memory_utilization", 0.9)
    block = int(values.get("block_size", 16))
    mml = values.get("max_model_len", match.window)
    seqs = values.get("max_num_seqs", 1024 if big else 256)
    mnbt = values.get("max_num_batched_tokens", 8192 if big else 2048)
    kv_flag = values.get("kv_cache_dtype", "auto")
    kv = "fp8" if kv_flag.startswith("fp8") else "bf16"
    precision, why = weight_precision(name, values.get("quantization"), spec)
    if mml > match.window:
        raise CommandError(
            f"--max-model-len {mml:,} is longer than {spec.name}'s window of {match.window:,} tokens; "
            "vLLM refuses it unless VLLM_ALLOW_LONG_MAX_MODEL_LEN is set."
        )
    cfg = _cfg(spec, g, tp, pp, precision, kv)
    s = cfg.shard
    weights = s.weight_bytes / GIB
    act = (
        ACTIVATION_FACTOR * mnbt * _per_token_activation_values(spec, tp) * 2.0
        + min(seqs, mnbt) * spec.vocab_size / tp * 4.0
    ) / GIB
    non_torch = NON_TORCH_TP_GIB if tp * pp > 1 else NON_TORCH_GIB
    budget = util * total
    pool = budget - weights - act - non_torch
    per_token = s.kv_bytes_per_token_stage + s.window_kv_bytes_per_token_stage
    block_bytes = per_token * block
    blocks = max(0, math.floor(pool * GIB / block_bytes)) if pool > 0 else 0
    tokens = blocks * block
    per_request_blocks = math.ceil(mml / block)
    concurrency = blocks / per_request_blocks
    need_gib = per_request_blocks * block_bytes / GIB
    weights_fit = weights + non_torch < budget
    fits = weights_fit and concurrency >= 1
    memory = [
        Segment("weights", "Weights", weights, f"{spec.name}, {why}, split over tp {tp} x pp {pp}"),
        Segment(
            "activations",
            "Activation peak",
            act,
            f"profile run: {mnbt:,} batched tokens, logits for {min(seqs, mnbt):,} sequences",
        ),
        Segment("runtime", "Non-torch memory", non_torch, "CUDA context, cuBLAS workspaces, NCCL buffers"),
        Segment("kv", "KV cache pool", max(pool, 0.0), f"{blocks:,} blocks of {block} tokens"),
        Segment(
            "reserved",
            "Outside gpu_memory_utilization",
            max(0.0, total - max(budget, weights + act + non_torch)),
            f"(1 - {util:g}) of {total:.2f} GiB: vLLM leaves it alone",
        ),
    ]
    log = [f"Model loading took {weights:.2f} GiB memory"]
    if not weights_fit:
        log.append("torch.OutOfMemoryError: CUDA out of memory (the weights alone do not fit)")
        verdict = f"Does not start: each GPU's {weights:.1f} GiB of weights exceed {util:g} x {total:.1f} GiB."
    else:
        log.append(f"Available KV cache memory: {max(pool, 0.0):.2f} GiB")
        if concurrency < 1:
            est_len = tokens
            log.append(
                f"ValueError: To serve at least one request with the models's max seq len ({mml}), "
                f"({need_gib:.2f} GiB KV cache is needed, which is larger than the available KV cache memory "
                f"({max(pool, 0.0):.2f} GiB). Based on the available memory, the estimated maximum model length "
                f"is {est_len}. Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when "
                "initializing the engine."
            )
            verdict = f"Does not start: one {mml:,}-token request needs {need_gib:.2f} GiB of KV cache per GPU."
        else:
            log.append(f"GPU KV cache size: {tokens:,} tokens")
            log.append(f"Maximum concurrency for {mml:,} tokens per request: {concurrency:.2f}x")
            verdict = (
                f"Starts: {tokens:,} tokens of KV cache per GPU hold {concurrency:.2f} requests of the full "
                f"{mml:,} tokens at once (more when requests are shorter)."
            )
    facts = {
        "kv_tokens": tokens,
        "kv_blocks": blocks,
        "max_concurrency": round(concurrency, 4),
        "available_kv_cache_gib": round(max(pool, 0.0), 4),
        "weights_gib": round(weights, 4),
        "kv_bytes_per_token_per_gpu": per_token,
        "budget_gib": round(budget, 4),
    }
    suggestions = []
    if weights_fit:
        fixed = weights + act + non_torch
        if concurrency < 1:
            u = min(1.0, (fixed + need_gib) / total)
            suggestions.append(
                Suggestion(
                    "Start with this max-model-len",
                    f"--gpu-memory-utilization {math.ceil(u * 100) / 100:g}" if u < 0.99 else f"-tp {tp * 2}",
                    f"one {mml:,}-token request needs {need_gib:.2f} GiB of KV cache per GPU",
                )
            )
            suggestions.append(
                Suggestion(
                    "Start on this GPU as it is", f"--max-model-len {tokens}", "the longest request the pool holds"
                )
            )
        elif util < 0.95:
            u2 = 0.95
            more = math.floor((u2 - util) * total * GIB / block_bytes) * block
            suggestions.append(
                Suggestion(
                    "More concurrent requests",
                    f"--gpu-memory-utilization {u2:g}",
                    f"+{more:,} tokens of KV cache ({(tokens + more) / mml:.2f}x at {mml:,} tokens)",
                )
            )
        if kv == "bf16":
            suggestions.append(
                Suggestion(
                    "Twice the KV tokens",
                    "--kv-cache-dtype fp8",
                    f"about {2 * tokens:,} tokens: FP8 halves each token's {per_token / 1024:,.0f} KiB per GPU",
                )
            )
        if concurrency >= 1 and mml > 8192:
            short = 8192
            suggestions.append(
                Suggestion(
                    "Serve more, shorter requests",
                    f"--max-model-len {short}",
                    f"{blocks / math.ceil(short / block):.1f}x concurrency at {short:,} tokens",
                )
            )
    else:
        t2 = _smallest_tp(spec, g, precision, kv, pp, budget, non_torch)
        if t2:
            suggestions.append(
                Suggestion("Fit the weights", f"--tensor-parallel-size {t2}", f"{t2} GPUs share the weights")
            )
    settings = {
        "model": name,
        "tensor_parallel_size": tp,
        "pipeline_parallel_size": pp,
        "max_model_len": mml,
        "max_num_seqs": seqs,
        "max_num_batched_tokens": mnbt,
        "gpu_memory_utilization": util,
        "kv_cache_dtype": kv_flag,
        "block_size": block,
        "enable_prefix_caching": values.get("enable_prefix_caching", True),
        "quantization": values.get("quantization"),
        "weight_precision": precision,
    }
    assumptions = [
        "vLLM V1 (0.8 and later): defaults gpu_memory_utilization 0.9, block_size 16, prefix caching on, "
        f"max_num_seqs {1024 if big else 256} and max_num_batched_tokens {8192 if big else 2048} "
        f"({'70 GiB or more' if big else 'under 70 GiB'} of GPU memory)",
        f"activation peak = {ACTIVATION_FACTOR} x costmodel's per-token buffers x max_num_batched_tokens "
        "+ FP32 logits (calibrated on vllm PR #10511)",
        f"non-torch memory {non_torch:g} GiB per GPU (CUDA context, NCCL; logs show 0.2-3.6 GiB)",
        "CUDA graphs are captured after the KV cache is sized (their memory comes out of the headroom)",
        total_note,
    ]
    if match.note:
        assumptions.append(match.note)
    if spec.sliding_window:
        assumptions.append(
            "sliding-window layers counted like full ones: vLLM's hybrid allocator reports "
            "tokens differently (approximate)"
        )
    return _explanation(
        "vllm",
        shown,
        g,
        values,
        ignored,
        spec,
        tp * pp,
        (settings, memory, fits, verdict, log, facts, suggestions, assumptions),
    )


def _smallest_tp(spec: ModelSpec, g: GPU, precision: str, kv: str, pp: int, budget: float, fixed: float) -> int:
    for t in (1, 2, 4, 8, 16):
        if spec.num_attention_heads % t:
            continue
        try:
            w = _cfg(spec, g, t, pp, precision, kv).shard.weight_bytes / GIB
        except SimError:
            continue
        if w + fixed < budget * 0.8:
            return t
    return 0


def sglang_default_mem_fraction(tp: int) -> float:
    """SGLang 0.4's default mem_fraction_static by tensor-parallel size (later versions derive it from the GPU)."""
    return 0.79 if tp >= 16 else 0.81 if tp >= 8 else 0.85 if tp >= 4 else 0.87 if tp >= 2 else 0.88


def _sglang(shown: str, words: list[Token], g: GPU, override: str | None) -> Explanation:
    values, ignored, positional = parse_flags(words, SGLANG_FLAGS)
    ignored += [f"{t.text} (extra word)" for t in positional]
    name = values.get("model_path")
    if not name:
        raise CommandError("python -m sglang.launch_server needs --model-path <model>.")
    match = match_model(name, override)
    if match is None:
        raise _unknown_model(name)
    spec = match.spec
    tp = values.get("tp_size", 1)
    mfs = values.get("mem_fraction_static", sglang_default_mem_fraction(tp))
    ctx = values.get("context_length", match.window)
    kv_flag = values.get("kv_cache_dtype", "auto")
    kv = "fp8" if kv_flag.startswith("fp8") else "bf16"
    precision, why = weight_precision(name, values.get("quantization"), spec)
    cfg = _cfg(spec, g, tp, 1, precision, kv)
    s = cfg.shard
    total, total_note = visible_gib(g)
    start = total - SGLANG_INIT_GIB
    weights = s.weight_bytes / GIB
    rest = start * mfs - weights
    per_token = s.kv_bytes_per_token_stage + s.window_kv_bytes_per_token_stage
    tokens = max(0, math.floor(rest * GIB / per_token)) if rest > 0 else 0
    if "max_total_tokens" in values:
        tokens = min(tokens, values["max_total_tokens"])
    pool = tokens * per_token / GIB
    pool_size = min(max(int(tokens / ctx * 512), 2048), 4096) if tokens else 0
    running = values.get("max_running_requests", min(tokens // 2, pool_size) if tokens else 0)
    fits = rest > 0 and tokens >= 1
    half = pool / 2
    memory = [
        Segment("weights", "Weights", weights, f"{spec.name}, {why}, split over tp {tp}"),
        Segment("runtime", "CUDA context and NCCL", SGLANG_INIT_GIB, "in use before the weights load"),
        Segment("kv", "KV cache pool", pool, f"{tokens:,} token slots (K and V)"),
        Segment(
            "reserved",
            "Left for activations and CUDA graphs",
            max(0.0, start - max(weights, start * mfs)),
            f"(1 - {mfs:g}) of the {start:.2f} GiB SGLang saw at start",
        ),
        Segment(
            "free",
            "Unused in the static fraction",
            max(0.0, rest - pool) if rest > 0 else 0.0,
            "rounding, or a --max-total-tokens cap",
        ),
    ]
    log = [f"Load weight end. type={spec.name}, avail mem={start - weights:.2f} GB, mem usage={weights:.2f} GB."]
    if fits:
        log.append(f"KV Cache is allocated. #tokens: {tokens}, K size: {half:.2f} GB, V size: {half:.2f} GB")
        log.append(f"max_total_num_tokens={tokens}, max_running_requests={running}, context_len={ctx}")
        verdict = (
            f"Starts: {tokens:,} token slots per GPU, {tokens / ctx:.2f} requests of the full {ctx:,} tokens at once."
        )
    else:
        log.append("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static.")
        verdict = f"Does not start: {mfs:g} x {start:.1f} GiB leaves nothing for the KV cache after {weights:.1f} GiB."
    need = (weights + ctx * per_token / GIB) / start
    suggestions = []
    if not fits or tokens < ctx:
        suggestions.append(
            Suggestion(
                "Hold one full-length request",
                f"--mem-fraction-static {min(need + 0.01, 0.99):.2f}",
                f"needs {weights:.1f} GiB of weights + {ctx * per_token / GIB:.2f} GiB of KV",
            )
        )
    elif mfs < 0.9:
        extra = math.floor((0.9 - mfs) * start * GIB / per_token)
        suggestions.append(
            Suggestion(
                "More token slots",
                "--mem-fraction-static 0.9",
                f"+{extra:,} tokens (less room for activations and CUDA graphs)",
            )
        )
    if kv == "bf16":
        suggestions.append(
            Suggestion("Twice the token slots", "--kv-cache-dtype fp8_e5m2", f"about {2 * tokens:,} tokens")
        )
    facts = {
        "max_total_num_tokens": tokens,
        "kv_pool_gib": round(pool, 4),
        "weights_gib": round(weights, 4),
        "max_running_requests": running,
        "context_len": ctx,
        "kv_bytes_per_token_per_gpu": per_token,
    }
    settings = {
        "model_path": name,
        "tp_size": tp,
        "mem_fraction_static": mfs,
        "context_length": ctx,
        "kv_cache_dtype": kv_flag,
        "max_running_requests": running,
        "weight_precision": precision,
    }
    assumptions = [
        f"SGLang sizes the pool as (memory at start) x mem_fraction_static - weights; memory at start = "
        f"{total:.2f} GiB less {SGLANG_INIT_GIB:g} GiB of CUDA context and NCCL",
        f"default mem_fraction_static by tp (SGLang 0.4): {sglang_default_mem_fraction(tp):g} at tp {tp}",
        "max_running_requests default: min(tokens / 2, request pool of 2,048-4,096) (SGLang 0.4)",
        "SGLang prints GiB and calls them GB",
        total_note,
    ]
    if match.note:
        assumptions.append(match.note)
    return _explanation(
        "sglang",
        shown,
        g,
        values,
        ignored,
        spec,
        tp,
        (settings, memory, fits, verdict, log, facts, suggestions, assumptions),
    )


# llama.cpp cache types: bytes per value (block formats: bytes per block / values per block)
GGML_TYPE_BYTES = {
    "f32": 4.0,
    "f16": 2.0,
    "bf16": 2.0,
    "q8_0": 34 / 32,
    "q4_0": 18 / 32,
    "q4_1": 20 / 32,
    "iq4_nl": 18 / 32,
    "q5_0": 22 / 32,
    "q5_1": 24 / 32,
}
# GGUF file types: typical bits per weight of a whole file (estimated: the mix of tensor types varies by model;
# Q4_K_M is Llama 3.1 8B's 4.58 GiB / 8.03 B = 4.89 BPW as llama.cpp prints it)
GGUF_BPW = {
    "f32": 32.0,
    "f16": 16.0,
    "bf16": 16.0,
    "q8_0": 8.5,
    "q6_k": 6.56,
    "q5_k_m": 5.7,
    "q5_k_s": 5.5,
    "q5_0": 5.5,
    "q4_k_m": 4.89,
    "q4_k_s": 4.6,
    "q4_0": 4.5,
    "iq4_xs": 4.3,
    "q3_k_l": 4.3,
    "q3_k_m": 3.9,
    "q3_k_s": 3.5,
    "q2_k": 3.0,
    "mxfp4": 4.25,
}
DEFAULT_CTX = 4096  # llama-server's -c default ("0 = loaded from model")
AUTO_SLOTS = 4  # -np auto (-1): 4 slots sharing one unified cache


def _gguf_type(name: str) -> str | None:
    s = name.lower()
    for t in sorted(GGUF_BPW, key=len, reverse=True):
        if re.search(rf"(^|[-_.]){re.escape(t)}([-_.]|$)", s):
            return t
    return None


def _llama(shown: str, words: list[Token], g: GPU, override: str | None) -> Explanation:
    values, ignored, positional = parse_flags(words, LLAMA_FLAGS)
    ignored += [f"{t.text} (extra word)" for t in positional]
    name = values.get("model") or values.get("hf_repo") or ""
    match = match_model(name, override) if (name or override) else None
    c_flag = values.get("ctx_size")
    np_flag = values.get("parallel", -1)
    auto = np_flag in (-1, 0)
    slots = AUTO_SLOTS if auto else np_flag
    unified = values.get("kv_unified", auto)
    n_ctx = c_flag if c_flag else (match.window if (c_flag == 0 and match) else DEFAULT_CTX)
    n_ctx_slot = n_ctx if unified else n_ctx // slots
    ctk = values.get("cache_type_k", "f16")
    ctv = values.get("cache_type_v", "f16")
    ub = values.get("ubatch_size", 512)
    log = [
        f"srv          init: initializing slots, n_slots = {slots}",
        f"slot   load_model: id  0 | task -1 | new slot, n_ctx = {n_ctx_slot}",
    ]
    facts: dict[str, Any] = {"n_ctx": n_ctx, "n_slots": slots, "n_ctx_slot": n_ctx_slot, "kv_unified": unified}
    settings: dict[str, Any] = {
        "model": name or None,
        "ctx_size": n_ctx,
        "parallel": slots,
        "kv_unified": unified,
        "cache_type_k": ctk,
        "cache_type_v": ctv,
        "ubatch_size": ub,
    }
    total, total_note = visible_gib(g)
    assumptions = [
        f"-c default {DEFAULT_CTX:,} (0 = the model's window); -np default auto = {AUTO_SLOTS} slots sharing one "
        "unified cache (llama.cpp since late 2025); an explicit -np N without --kv-unified gives each slot c / N",
        total_note,
    ]
    suggestions = []
    if not unified and slots > 1:
        suggestions.append(
            Suggestion(
                f"Give each of the {slots} slots all {n_ctx:,} tokens",
                f"-c {n_ctx * slots}",
                f"{n_ctx * slots:,} cells, {slots}x the KV memory",
            )
        )
        suggestions.append(
            Suggestion(
                "Let the slots share the cells instead",
                "--kv-unified",
                f"any one slot may use up to {n_ctx:,} tokens while the others are short",
            )
        )
    if match is None:
        verdict = (
            f"{slots} slot{'s' if slots > 1 else ''} of {n_ctx_slot:,} tokens each"
            f"{' (shared cells)' if unified else ''}; the model file is not one this page knows, so its "
            "memory is not drawn (pick it with model=)."
        )
        return _explanation(
            "llama.cpp",
            shown,
            g,
            values,
            ignored,
            None,
            1,
            (settings, [], True, verdict, log, facts, suggestions, assumptions + (["model: " + name] if name else [])),
            name or "unknown model",
        )
    spec = match.spec
    layers = spec.num_hidden_layers
    ngl_raw = str(values.get("n_gpu_layers", "all")).lower()
    if ngl_raw in ("all", "auto", "-1"):
        ngl = layers + 1
    elif re.fullmatch(r"\d+", ngl_raw):
        ngl = int(ngl_raw)
    else:
        raise CommandError(f"-ngl takes a whole number, 'auto' or 'all', not '{ngl_raw}'.")
    gpu_layers = min(ngl, layers)
    gguf = _gguf_type(name)
    bpw = GGUF_BPW.get(gguf or "", 16.0)
    params = param_counts(spec).total
    weights_all = params * bpw / 8 / GIB
    weights_gpu = weights_all * min(ngl, layers + 1) / (layers + 1)
    kv_heads = spec.num_key_value_heads
    if spec.is_mla:
        k_per_layer = spec.kv_lora_rank + spec.qk_rope_head_dim
        v_per_layer = spec.kv_lora_rank
    else:
        k_per_layer = v_per_layer = kv_heads * spec.head_dim
    k_mib = n_ctx * gpu_layers * k_per_layer * GGML_TYPE_BYTES[ctk] / MIB
    v_mib = n_ctx * gpu_layers * v_per_layer * GGML_TYPE_BYTES[ctv] / MIB
    kv_gib = (k_mib + v_mib) / 1024
    compute_gib = ub * (spec.vocab_size + 16 * spec.hidden_size) * 4 / GIB
    used = weights_gpu + kv_gib + compute_gib + 0.3
    fits = used <= total
    memory = [
        Segment(
            "weights",
            "Weights on the GPU",
            weights_gpu,
            f"{gguf.upper() if gguf else 'F16'} at ~{bpw:g} bits per weight, {min(ngl, layers + 1)}/{layers + 1} layers",
        ),
        Segment("kv", "KV cache", kv_gib, f"{n_ctx:,} cells x {gpu_layers} layers, K {ctk}, V {ctv}"),
        Segment(
            "activations", "Compute buffer", compute_gib, f"estimated for -ub {ub}: logits and one layer's buffers"
        ),
        Segment("runtime", "CUDA context", 0.3, "estimated"),
        Segment("free", "Free", max(0.0, total - used), ""),
    ]
    seqs = f"{slots}/1" if unified else f"{slots}/{slots}"
    log.insert(0, f"load_tensors: offloaded {min(ngl, layers + 1)}/{layers + 1} layers to GPU")
    log.insert(
        1,
        f"llama_kv_cache: size = {k_mib + v_mib:8.2f} MiB ({n_ctx:6d} cells, {gpu_layers:3d} layers, "
        f"{seqs} seqs), K ({ctk}): {k_mib:8.2f} MiB, V ({ctv}): {v_mib:8.2f} MiB",
    )
    facts.update(
        {
            "kv_cache_mib": round(k_mib + v_mib, 2),
            "weights_gib": round(weights_gpu, 3),
            "gguf_type": gguf,
            "used_gib": round(used, 3),
        }
    )
    per_cell = (k_per_layer * GGML_TYPE_BYTES[ctk] + v_per_layer * GGML_TYPE_BYTES[ctv]) * gpu_layers
    if fits:
        verdict = (
            f"Fits: {used:.1f} of {total:.1f} GiB; {slots} slot{'s' if slots > 1 else ''} of "
            f"{n_ctx_slot:,} tokens{' sharing the cells' if unified else ''}."
        )
        largest = int((total - weights_gpu - compute_gib - 0.3) * GIB / per_cell) // 256 * 256
        suggestions.append(
            Suggestion(
                "The longest context this GPU holds",
                f"-c {min(largest, spec.max_position_embeddings)}",
                f"{largest:,} cells fit in the free memory",
            )
        )
    else:
        verdict = f"Does not fit: {used:.1f} GiB needed on a {total:.1f} GiB GPU."
        fit_layers = max(0, int((total - kv_gib - compute_gib - 0.3) / (weights_all / (layers + 1))))
        suggestions.append(
            Suggestion(
                "Fit on this GPU", f"-ngl {min(fit_layers, layers)}", "the remaining layers run on the CPU (slower)"
            )
        )
    if ctk == "f16":
        suggestions.append(
            Suggestion(
                "Half the KV memory",
                "-ctk q8_0 -ctv q8_0",
                f"{(k_mib + v_mib) * 34 / 64:,.0f} MiB (a quantized V cache needs flash attention)",
            )
        )
    if not gguf:
        assumptions.append("the file name names no GGUF type: weights taken as F16")
    assumptions.append(
        "weights: parameters x the type's typical bits per weight (estimated; the file's own size is exact)"
    )
    if match.note:
        assumptions.append(match.note)
    settings["n_gpu_layers"] = min(ngl, layers + 1)
    return _explanation(
        "llama.cpp",
        shown,
        g,
        values,
        ignored,
        spec,
        1,
        (settings, memory, fits, verdict, log, facts, suggestions, assumptions),
    )
