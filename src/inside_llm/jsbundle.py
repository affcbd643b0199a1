"""ES modules -> one classic script, for the offline bundle (Chromium refuses module scripts from file://).

Each module becomes a function registered under its path (relative to static/js) and run once, on first
require, with `import ... from` rewritten to `const {...} = __require(spec)`, `export` declarations
recorded as getters on its exports object, and `import(spec)` rewritten to `__import(spec)` (a Promise of
the namespace, so the tour's dynamic scene import still works), and `import.meta.url` to the module's
would-be URL beside the bundle (static/js/<path>), so relative asset URLs still resolve. Supported forms:
named, namespace and default imports; `export function|class|const|let|var NAME`,
`export { a, b as c } [from ...]`, `export default`. Refused with a ValueError naming the file: top-level
await, circular imports, bare specifiers. Only the first name of `export const a = 1, b = 2` is exported.
"""

from __future__ import annotations

import json
import posixpath
import re
from pathlib import Path

IMPORT_FROM = re.compile(
    r"""^[ \t]*import\s+(?P<clause>[\w$*{}\s,]+?)\s+from\s*(?P<q>['"])(?P<spec>[^'"]+)(?P=q)[ \t]*;?""", re.M
)
IMPORT_BARE = re.compile(r"""^[ \t]*import\s*(?P<q>['"])(?P<spec>[^'"]+)(?P=q)[ \t]*;?""", re.M)
EXPORT_LIST = re.compile(
    r"""^[ \t]*export\s*\{(?P<names>[^}]*)\}(?:\s*from\s*(?P<q>['"])(?P<spec>[^'"]+)(?P=q))?[ \t]*;?""", re.M
)
EXPORT_DEFAULT = re.compile(
    r"^([ \t]*)export\s+default\s+(?:(?P<kind>(?:async\s+)?function\s*\*?|class)\s+(?P<name>[\w$]+))?", re.M
)
# `export const { a, b } = expr;` with plain names (a scene's lifecycle: scene-kit.js sceneLifecycle); a rename or a
# default inside the braces is left to the "does not understand" error below
EXPORT_DESTRUCTURED = re.compile(r"^([ \t]*)export\s+(?P<kw>const|let|var)\s*\{(?P<names>[\w$\s,]+)\}", re.M)
EXPORT_DECL = re.compile(
    r"^([ \t]*)export\s+(?P<decl>(?:async\s+)?function\s*\*?\s*(?P<f>[\w$]+)|class\s+(?P<c>[\w$]+)|"
    r"(?:const|let|var)\s+(?P<v>[\w$]+))",
    re.M,
)
DYNAMIC_IMPORT = re.compile(r"(?<![\w$.])import\s*\(")
# `import('./x.js')` with a literal path: a module loaded on demand (lib/attached.js, share.js's export.js), which the
# offline bundle must hold too, though no page preloads it
DYNAMIC_LITERAL = re.compile(r"""(?<![\w$.])import\s*\(\s*(?P<q>['"])(?P<spec>\.{1,2}/[^'"]+)(?P=q)\s*\)""")
IMPORT_META = re.compile(r"(?<![\w$.])import\.meta\b")
TOP_LEVEL_AWAIT = re.compile(r"^await\s", re.M)

RUNTIME = """(function () {
  'use strict';
  var defs = Object.create(null), cache = Object.create(null), busy = Object.create(null);
  var script = document.currentScript, base = script ? script.src.replace(/[^/]*$/, '') : '';
  function resolve(from, spec) {
    var parts = from.split('/');
    parts.pop();
    spec.split('/').forEach(function (p) {
      if (p === '..') parts.pop(); else if (p !== '.' && p !== '') parts.push(p);
    });
    return parts.join('/');
  }
  function load(id) {
    if (cache[id]) return cache[id];
    if (!defs[id]) throw new Error('module not in the offline bundle: ' + id);
    if (busy[id]) throw new Error('circular import: ' + id);
    busy[id] = true;
    var exports = {};
    defs[id](exports, function (spec) { return load(resolve(id, spec)); }, function (spec) {
      return new Promise(function (ok) { ok(load(resolve(id, spec))); });
    }, { url: base + id });
    cache[id] = exports;
    return exports;
  }
"""


def _clause_bindings(clause: str, spec: str) -> str:
    """`a, { b, c as d }` / `* as ns` -> JavaScript that binds the same names from __require(spec)."""
    req = f"__require({json.dumps(spec)})"
    out: list[str] = []
    named = re.search(r"\{([^}]*)\}", clause)
    rest = re.sub(r"\{[^}]*\}", "", clause)
    for part in (p.strip() for p in rest.split(",") if p.strip()):
        m = re.fullmatch(r"\*\s*as\s+([\w$]+)", part)
        out.append(f"const {m.group(1)} = {req};" if m else f"const {part} = {req}.default;")
    if named:
        pairs = [re.split(r"\s+as\s+", n.strip()) for n in named.group(1).split(",") if n.strip()]
        out.append("const { " + ", ".join(p[0] if len(p) == 1 else f"{p[0]}: {p[1]}" for p in pairs) + f" }} = {req};")
    return " ".join(out)


def _exports_list(names: str) -> list[tuple[str, str]]:
    """`a, b as c` -> [(local, exported), ...]."""
    pairs = [re.split(r"\s+as\s+", n.strip()) for n in names.split(",") if n.strip()]
    return [(p[0], p[-1]) for p in pairs]


def transform(source: str, module_id: str) -> tuple[str, list[str]]:
    """One module's source -> (function body registering its exports, static import specifiers)."""
    if TOP_LEVEL_AWAIT.search(source):
        raise ValueError(f"{module_id}: top-level await is not supported in the offline bundle")
    deps: list[str] = []
    exports: list[tuple[str, str]] = []  # (local expression, exported name)

    def imp(m: re.Match) -> str:
        deps.append(m.group("spec"))
        return _clause_bindings(m.group("clause"), m.group("spec"))

    def bare(m: re.Match) -> str:
        deps.append(m.group("spec"))
        return f"__require({json.dumps(m.group('spec'))});"

    def exp_list(m: re.Match) -> str:
        if m.group("spec"):
            deps.append(m.group("spec"))
            src = f"__require({json.dumps(m.group('spec'))})"
            exports.extend((f"{src}.{local}", name) for local, name in _exports_list(m.group("names")))
            return ""
        exports.extend(_exports_list(m.group("names")))
        return ""

    def exp_default(m: re.Match) -> str:
        if m.group("name"):
            exports.append((m.group("name"), "default"))
            return f"{m.group(1)}{m.group('kind')} {m.group('name')}"
        exports.append(("__default", "default"))
        return f"{m.group(1)}const __default = "

    def exp_decl(m: re.Match) -> str:
        name = m.group("f") or m.group("c") or m.group("v")
        exports.append((name, name))
        return f"{m.group(1)}{m.group('decl')}"

    body = IMPORT_FROM.sub(imp, source)
    body = IMPORT_BARE.sub(bare, body)
    body = EXPORT_LIST.sub(exp_list, body)
    body = EXPORT_DEFAULT.sub(exp_default, body)

    def exp_destructured(m: re.Match) -> str:
        names = [n.strip() for n in m.group("names").split(",") if n.strip()]
        exports.extend((n, n) for n in names)
        return f"{m.group(1)}{m.group('kw')} {{ {', '.join(names)} }}"

    body = EXPORT_DESTRUCTURED.sub(exp_destructured, body)
    body = EXPORT_DECL.sub(exp_decl, body)
    body = DYNAMIC_IMPORT.sub("__import(", body)
    body = IMPORT_META.sub("__meta", body)
    if re.search(r"^[ \t]*(import|export)\b(?!\s*[(.])", body, re.M):
        raise ValueError(f"{module_id}: an import/export form the offline bundler does not understand")
    getters = ", ".join(f"{json.dumps(name)}: {{ enumerable: true, get: () => {local} }}" for local, name in exports)
    return f"'use strict';\nObject.defineProperties(__exports, {{ {getters} }});\n{body}", deps


def _resolve(module_id: str, spec: str) -> str:
    if not spec.startswith(("./", "../")):
        raise ValueError(f"{module_id}: bare import {spec!r} cannot be bundled (use a relative path)")
    return posixpath.normpath(posixpath.join(posixpath.dirname(module_id), spec))


def bundle(js_root: Path, entry: str, lazy: list[str]) -> str:
    """Classic script for `entry` (run at load) with every module it and `lazy` (dynamically imported) need."""
    todo, seen, chunks = [entry, *lazy], set(), []
    while todo:
        mid = todo.pop(0)
        if mid in seen:
            continue
        seen.add(mid)
        path = js_root / mid
        if not path.is_file():
            raise ValueError(f"{mid}: imported but not found under {js_root}")
        source = path.read_text(encoding="utf-8")
        body, deps = transform(source, mid)
        todo.extend(_resolve(mid, d) for d in deps)
        todo.extend(_resolve(mid, m.group("spec")) for m in DYNAMIC_LITERAL.finditer(source))
        chunks.append(
            f"  defs[{json.dumps(mid)}] = function (__exports, __require, __import, __meta) {{\n{body}\n}};\n"
        )
    return (
        f"// inside-llm.bundle.js: the tour's ES modules as one classic script (generated by `inside-llm export`).\n"
        f"{RUNTIME}{''.join(chunks)}  load({json.dumps(entry)});\n}}());\n"
    )


def module_graph(js_root: Path, entries: list[str]) -> list[str]:
    """Every module `entries` need through static imports (and `export ... from`), breadth first, entries first:
    a page's `<link rel="modulepreload">` list, so the browser fetches the whole graph at once instead of one
    level of imports per round trip. Dynamic `import()`s are not followed (name the module as an entry)."""
    todo, seen = list(entries), []
    while todo:
        mid = todo.pop(0)
        if mid in seen:
            continue
        path = js_root / mid
        if not path.is_file():
            continue  # a missing module fails in the browser, where it is reported; the list just omits it
        seen.append(mid)
        source = path.read_text(encoding="utf-8")
        specs = [m.group("spec") for rx in (IMPORT_FROM, IMPORT_BARE) for m in rx.finditer(source)]
        specs += [m.group("spec") for m in EXPORT_LIST.finditer(source) if m.group("spec")]
        todo.extend(_resolve(mid, s) for s in specs if s.startswith(("./", "../")))
    return seen
