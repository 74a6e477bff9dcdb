"""The package's shape: no import cycle among its top-level modules (imports at module level;
function-local and type-checking imports are how the few upward references are made), and no
module over ~500 lines."""

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "cutedsl_backend"


def _module_level_imports(path: Path) -> set:
    deps = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.level == 1 and node.module:
            deps.add(node.module.split(".")[0])
        elif isinstance(node, ast.ImportFrom) and node.level == 1:
            deps.update(a.name for a in node.names)
    return deps


def test_no_import_cycle_among_top_level_modules():
    edges = {p.stem: _module_level_imports(p) for p in PKG.glob("*.py")}
    state: dict = {}

    def visit(u, path):
        state[u] = "open"
        for v in edges.get(u, ()):
            assert state.get(v) != "open", f"import cycle: {' -> '.join(path + [u, v])}"
            if v not in state and v in edges:
                visit(v, path + [u])
        state[u] = "done"

    for m in edges:
        if m not in state:
            visit(m, [])


def test_no_module_over_500_lines():
    over = {str(p.relative_to(PKG)) for p in PKG.rglob("*.py") if len(p.read_text().splitlines()) > 500}
    assert not over, sorted(over)


_MUTATORS = {"append", "update", "add", "setdefault", "pop", "clear", "extend", "insert", "remove", "discard",
             "popitem"}


def test_no_mutable_module_state():
    """State lives in objects (the kernel store, the plan cache, the Inductor integration's STATE):
    no function rebinds a module global (``global``) or mutates a module-level dict, list or set
    in place."""
    found = []
    for p in sorted(PKG.rglob("*.py")):
        tree = ast.parse(p.read_text())
        names = set()
        for node in tree.body:
            targets = node.targets if isinstance(node, ast.Assign) else (
                [node.target] if isinstance(node, (ast.AnnAssign, ast.AugAssign)) else [])
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        for fn in ast.walk(tree):
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
                continue
            for node in ast.walk(fn):
                where = f"{p.relative_to(PKG)}:{getattr(node, 'lineno', '?')}"
                if isinstance(node, ast.Global):
                    found.append(f"{where} global {', '.join(node.names)}")
                targets = node.targets if isinstance(node, ast.Assign) else (
                    [node.target] if isinstance(node, ast.AugAssign) else [])
                for t in targets:
                    if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Name) and t.value.id in names:
                        found.append(f"{where} {t.value.id}[...] =")
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                        and node.func.attr in _MUTATORS and isinstance(node.func.value, ast.Name)
                        and node.func.value.id in names):
                    found.append(f"{where} {node.func.value.id}.{node.func.attr}()")
    assert not found, found
