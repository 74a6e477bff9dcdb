"""The configs package's shape: one module per concept, no import cycle among them, none over ~500
lines; one family object per architecture holding what differs (a new architecture is its module
plus one registry line)."""

import ast
from pathlib import Path

from cutedsl_backend.configs import FAMILIES, family, quick_configs
from cutedsl_backend.configs.family import ArchFamily
from cutedsl_backend.problem import ARCHS, GemmProblem

PKG = Path(__file__).resolve().parents[2] / "cutedsl_backend" / "configs"


def _edges() -> dict:
    edges = {}
    for p in PKG.glob("*.py"):
        deps = set()
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.ImportFrom) and n.level == 1:
                deps.add((n.module or "__init__").split(".")[0])
        edges[p.stem] = deps
    return edges


def test_no_import_cycle_and_small_modules():
    edges = _edges()
    state: dict = {}

    def visit(u, path):
        state[u] = "open"
        for v in edges.get(u, ()):
            assert state.get(v) != "open", f"import cycle: {' -> '.join(path + [u, v])}"
            if v not in state:
                visit(v, path + [u])
        state[u] = "done"

    for m in edges:
        if m not in state:
            visit(m, [])
    for p in PKG.glob("*.py"):
        assert len(p.read_text().splitlines()) <= 500, p.name


def test_one_family_per_architecture():
    assert tuple(FAMILIES) == ARCHS
    for arch, fam in FAMILIES.items():
        assert isinstance(fam, ArchFamily) and fam.arch == arch and fam.compile_flag == "sm_" + arch[2:]
        module, _, name = fam.kernel.partition(":")
        assert module.startswith("cutedsl_backend.kernels.") and name
        problem = GemmProblem(1000, 1048, 776, 1, "bfloat16", "bfloat16", "k", "k", arch)
        from cutedsl_backend.configs import is_valid

        assert quick_configs(arch) and all(is_valid(c, problem) for c in quick_configs(arch)), arch
        assert fam.space() and all(c.arch == arch for c in fam.space())
    assert family("sm90a").split_k and family("sm100a").split_k
    assert family("sm90a").short_a_loads and not family("sm100a").short_a_loads  # refused by name on sm100a
