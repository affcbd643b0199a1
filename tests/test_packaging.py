"""The wheel carries everything the server needs: scenes, templates, static files, catalogs, demo weights."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_wheel_contains_the_site_the_catalogs_and_the_demo_model(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path), str(ROOT)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    wheel = next(tmp_path.glob("inside_llm-*.whl"))
    names = set(zipfile.ZipFile(wheel).namelist())
    for scene in sorted((ROOT / "scenes").glob("*.toml")):
        assert f"inside_llm/_site/scenes/{scene.name}" in names
    for rel in (
        "_site/templates/tour.html",
        "_site/templates/embed.html",
        "_site/static/js/tour.js",
        "_site/static/css/theme.css",
        "data/gpus.toml",
        "data/models.toml",
        "data/samples.toml",
        "demo/main.npz",
        "demo/draft.npz",
        "demo/model_card.json",
        "demo/heldout_ids.npy",
    ):
        assert f"inside_llm/{rel}" in names, rel
    assert not any("/tests/" in n or n.endswith(".png") for n in names)
    entry = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "inside-llm = inside_llm.cli:main" in entry


def test_site_dir_prefers_the_wheel_copy(tmp_path, monkeypatch):
    from inside_llm import paths

    site = tmp_path / "_site"
    for d in ("scenes", "templates", "static"):
        (site / d).mkdir(parents=True)
    monkeypatch.setattr(paths, "PACKAGE_DIR", tmp_path)
    paths.site_dir.cache_clear()
    try:
        assert paths.site_dir() == site
    finally:
        paths.site_dir.cache_clear()
