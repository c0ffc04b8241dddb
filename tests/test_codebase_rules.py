"""The house rules of the layering (docs/ARCHITECTURE.md), checked on the source itself:

- each package imports only the layers below it (ir nothing; kernel only ir; ...), so there
  are no import cycles between packages;
- no `from x import _private` across modules (a private name is its module's business);
- no source file over the line budget (small files with one job).

The imports are read with `ast`, at any depth (function-level imports count too).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "onnxcc"

#: package -> the onnxcc packages it may import (besides itself); top-level modules are
#: named by their stem, the package root's own names by `__init__`. Every layer may use
#: `errors`, `version`, `digest`, `cache_dir` (where caches live) and `io_structure` (sequence /
#: optional I/O specs).
ALLOWED: dict[str, set[str]] = {
    "errors": set(),
    "version": set(),
    "digest": set(),
    "cache_dir": set(),
    "io_structure": {"errors"},
    "ir": {"errors"},
    "kernel": {"errors", "ir"},
    "ops": {"errors", "ir", "kernel"},
    "interp": {"errors", "ir", "ops"},
    "frontend": {"errors", "ir", "ops"},
    "passes": {"errors", "ir", "ops", "kernel", "interp"},
    "codegen": {"errors", "ir", "kernel"},
    "runtime": {"errors"},
    "compiler": {"errors", "ir", "ops", "kernel", "interp", "frontend", "passes", "codegen", "runtime"},
    "session": {"errors", "ir", "compiler", "runtime", "frontend"},
    "ort_compat": {"errors", "compiler", "runtime"},
    "cli": {"errors", "ir", "ops", "kernel", "interp", "frontend", "passes", "codegen", "runtime", "compiler",
            "session", "simulate", "testing", "__init__"},
}
#: tooling that sits on top of everything (not imported by the product)
TOOLING = {"conformance", "model_sets", "simulate", "testing", "testing_c", "__init__", "__main__"}
LINE_BUDGET = 1000


def _layer(path: Path) -> str:
    rel = path.relative_to(SRC)
    return rel.parts[0] if len(rel.parts) > 1 else rel.stem


def _imports(path: Path):
    """(imported onnxcc layer, names, line) for every import of onnxcc in `path`."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    pkg = path.relative_to(SRC).parent.parts
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(pkg[: len(pkg) - node.level + 1])
                parts = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == "onnxcc":
                parts = node.module.split(".")[1:]
            else:
                continue
            names = [a.name for a in node.names]
            if not parts:  # `from .. import x` at the top: a layer x, or a name of the package root
                for n in names:
                    is_layer = (SRC / f"{n}.py").is_file() or (SRC / n).is_dir()
                    yield (n, [], node.lineno, [n]) if is_layer else ("__init__", [n], node.lineno, [])
                continue
            yield parts[0], names, node.lineno, parts
        elif isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "onnxcc" and len(a.name.split(".")) > 1:
                    yield a.name.split(".")[1], [], node.lineno, a.name.split(".")[1:]


def _sources():
    return sorted(p for p in SRC.rglob("*.py") if "__pycache__" not in p.parts)


def test_layers_import_only_what_is_below_them():
    bad = []
    for path in _sources():
        layer = _layer(path)
        if layer in TOOLING:
            continue
        allowed = ALLOWED.get(layer)
        assert allowed is not None, f"{path.relative_to(SRC)}: layer {layer!r} has no rule in ALLOWED"
        for target, _, line, _ in _imports(path):
            if target != layer and target not in allowed | {"errors", "version", "digest", "cache_dir", "io_structure"}:
                bad.append(f"{path.relative_to(SRC)}:{line}: {layer} imports {target}")
    assert not bad, "imports against the layering:\n" + "\n".join(bad)


def test_no_private_names_imported_across_modules():
    bad = []
    for path in _sources():
        for _, names, line, parts in _imports(path):
            own = path.relative_to(SRC).with_suffix("").parts
            if tuple(parts) == own:
                continue
            for n in names:
                if n.startswith("_") and not n.startswith("__"):
                    bad.append(f"{path.relative_to(SRC)}:{line}: imports {n} from {'.'.join(parts)}")
    assert not bad, "private names imported across modules:\n" + "\n".join(bad)


def test_source_files_stay_within_the_line_budget():
    big = [(p.relative_to(SRC), n) for p in _sources()
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > LINE_BUDGET]
    assert not big, f"files over {LINE_BUDGET} lines (split them by concern): {big}"
