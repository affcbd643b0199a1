"""`inside-llm export`: which responses are precomputed, the files written, and the ES-module bundler."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from inside_llm.cli import build_parser
from inside_llm.export import export_bundle, live_only, variants
from inside_llm.jsbundle import bundle, transform
from inside_llm.paths import static_dir
from inside_llm.scenes import scene_by_slug


def test_variants_cover_defaults_presets_and_each_option_alone():
    scene = scene_by_slug("tokens")
    got = variants(scene)
    defaults = {c.name: c.default for c in scene.controls if c.api}
    assert got[0] == defaults, "the defaults come first"
    for p in scene.presets:
        assert {**defaults, **p["params"]} in got
    assert {**defaults, "encoding": "llama3"} in got
    assert all(set(v) == set(defaults) for v in got), "only endpoint parameters, never drawing-only ones"
    assert len({json.dumps(v, sort_keys=True) for v in got}) == len(got)


def test_small_log2_sliders_are_precomputed_at_every_position():
    scene = scene_by_slug("roofline")
    batch = next(c for c in scene.controls if c.name == "batch")
    values = sorted({v["batch"] for v in variants(scene)})
    assert values == [2**i for i in range(11) if batch.min <= 2**i <= batch.max]


def test_live_only_names_what_needs_the_server():
    notes = live_only(scene_by_slug("tokens"))
    assert any("Your prompt" in n for n in notes)


def test_export_writes_pages_data_manifest_and_bundle(tmp_path, capsys):
    assert export_bundle(tmp_path, ["tokens", "roofline"]) == 0
    out = capsys.readouterr().out
    assert "[1/2] tokens" in out and "Needs the live server" in out and "index.html" in out
    for rel in (
        "index.html",
        "manifest.json",
        "tour/tokens.html",
        "embed/tokens.html",
        "tour/roofline.html",
        "data/tokens.js",
        "static/css/theme.css",
        "static/js/inside-llm.bundle.js",
    ):
        assert (tmp_path / rel).is_file(), rel
    html = (tmp_path / "tour" / "tokens.html").read_text()
    assert 'href="../static/css/theme.css"' in html and 'href="../tour/roofline.html"' in html
    assert '<script src="../data/tokens.js"></script>' in html and 'type="module"' not in html
    assert 'href="/' not in html and 'src="/' not in html, "every link is relative (file://)"
    assert "embeddings.html" not in html and "dials.html" not in html, "links stay among the exported scenes"
    assert '<a class="btn primary" id="next" rel="next" href="../tour/roofline.html" data-step="roofline">' in html
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    tokens = manifest["scenes"][0]
    n = len(variants(scene_by_slug("tokens")))
    urls = [r["url"] for r in tokens["responses"]]
    assert tokens["slug"] == "tokens" and len(urls) == n, "each state: one response, which carries its facts"
    assert all(u.startswith("/api/tokens?") for u in urls)
    first = json.loads((tmp_path / tokens["responses"][0]["file"]).read_text())
    assert first["tokens"] and "words per token" in first["facts"]["text"]
    data = (tmp_path / "data" / "tokens.js").read_text()
    assert data.split("\n", 1)[1].startswith("(globalThis.insideLLMOffline")


def test_unknown_scene_is_refused(tmp_path):
    with pytest.raises(SystemExit, match="unknown scene"):
        export_bundle(tmp_path, ["nope"])


def test_cli_parses_export():
    args = build_parser().parse_args(["export", "--out", "deck", "--scenes", "tokens", "roofline"])
    assert args.out == "deck" and args.scenes == ["tokens", "roofline"]


def test_transform_rewrites_imports_and_exports():
    src = """import { a, b as c } from './x.js';
import * as ns from '../y.js';
import d, { e } from './z.js';
import './side.js';
export const k = 1;
export const { mount, update } = life({});
export async function f() { return import(`./scenes/${k}.js`); }
export class K {}
function g() {}
export { g, g as h };
export { r } from './r.js';
export default f;
"""
    body, deps = transform(src, "lib/m.js")
    assert deps == ["./x.js", "../y.js", "./z.js", "./side.js", "./r.js"]
    assert 'const { a, b: c } = __require("./x.js");' in body
    assert 'const ns = __require("../y.js");' in body and 'const d = __require("./z.js").default;' in body
    assert "__import(`./scenes/${k}.js`)" in body and "import(" not in body.replace("__import(", "")
    assert "const { mount, update } = life({});" in body
    for name in ('"k"', '"mount"', '"update"', '"f"', '"K"', '"g"', '"h"', '"r"', '"default"'):
        assert name + ":" in body
    assert "export" not in body.split("\n", 2)[2]


def test_import_meta_url_points_beside_the_bundle():
    body, _ = transform("export const css = new URL('../../css/x.css', import.meta.url).href;\n", "lib/style.js")
    assert "new URL('../../css/x.css', __meta.url)" in body


@pytest.mark.parametrize("src", ["import x from 'bare';\n", "await go();\n", "import { a } from './missing.js';\n"])
def test_bundler_refuses_what_it_cannot_bundle(tmp_path, src):
    (tmp_path / "m.js").write_text(src)
    with pytest.raises(ValueError):
        bundle(tmp_path, "m.js", [])


def test_bundle_holds_a_module_imported_on_demand(tmp_path):
    (tmp_path / "m.js").write_text("export async function go() { return (await import('./later.js')).x; }\n")
    (tmp_path / "later.js").write_text("export const x = 1;\n")
    code = bundle(tmp_path, "m.js", [])
    assert 'defs["later.js"]' in code and "__import('./later.js')" in code


def test_bundle_of_the_real_site_is_valid_javascript(tmp_path):
    js = static_dir() / "js"
    lazy = [f"scenes/{p.name}" for p in sorted((js / "scenes").glob("*.js"))]
    code = bundle(js, "tour.js", lazy)
    assert code.count("defs[") >= 10 and 'load("tour.js")' in code
    node = shutil.which("node")
    if node:  # a syntax check when Node is around; the browser tests run the bundle for real
        path = Path(tmp_path) / "b.js"
        path.write_text(code)
        subprocess.run([node, "--check", str(path)], check=True)
