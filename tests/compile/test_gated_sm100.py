"""The gated epilogue on sm100a without a GPU: two half-width tcgen05 MMAs per k-block (gate and
up, each into its own tensor-memory accumulator) compile with three TMA loads per stage (A, the
gate rows, the up rows), UTCHMMA (UTCQMMA for FP8), no Hopper MMA, no spills, within the sm100a
budget, for 1-CTA and 2-CTA tiles, B multicast, split-K, a column bias and FP8 scales; its rules
name what it does not take; the ranking offers only configs it takes.
Its numerics run on an sm100 GPU (tests/gpu/test_gated_sm100.py); none exists here."""

import pytest

from cutedsl_backend.configs import GemmConfig, check_config, default_config, rank_configs, resolve_config
from cutedsl_backend.epilogue import EpilogueSpec
from cutedsl_backend.problem import GemmProblem, UnsupportedGemmError
from cutedsl_backend.validation.budgets import load_budgets

pytestmark = pytest.mark.compile
BUDGET = load_budgets()["families"]["sm100a/gemm+epilogue"]
A = "sm100a"


def problem(m, dtype="bfloat16", b_major="k", **kw):
    # a Llama-style up projection: N = 2 x 14336 gate and up columns
    return GemmProblem(m, 2 * 14336, 4096, 1, dtype, "bfloat16" if dtype.startswith("float8") else dtype, "k",
                       b_major, A, **kw)


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTEDSL_BACKEND_CACHE_DIR", str(tmp_path / "cache"))


def gates(cg, mma="UTCHMMA"):
    """The SASS gates, and the multicast loads the config's cluster asks for: A across cluster_n,
    both weight halves across the CTAs (or CTA pairs) of cluster_m."""
    import re

    from cutedsl_backend.configs.resources import ctas_per_mma

    counts = cg.sass_counts()
    assert counts["UTMALDG"] == 3, counts  # A, the gate rows and the up rows
    cfg = cg.config
    loads = re.findall(r"UTMALDG[.\w]*", cg.sass())
    expected = (cfg.cluster_n > 1) + 2 * (cfg.cluster_m // ctas_per_mma(cfg) > 1)
    assert sum(".MULTICAST" in op for op in loads) == expected, (cfg.name, loads)
    assert counts[mma] > 0 and counts["UTMASTG"] > 0, counts
    assert counts["HGMMA"] == 0 and counts["QGMMA"] == 0, counts
    assert counts["LDL"] == 0 and counts["STL"] == 0 and cg.resources.local_bytes == 0, counts
    assert cg.compile_seconds <= BUDGET["cell_max_s"], cg.compile_seconds
    return counts


def test_config_rules_name_what_the_gated_kernel_does_not_take():
    spec = EpilogueSpec(gated="silu")
    # B multicast (cluster_m 2) and 2-CTA pairs: both halves are loaded like a plain B
    for cfg in (GemmConfig(128, 256, cluster_n=2, arch=A), GemmConfig(128, 192, cluster_m=2, arch=A),
                GemmConfig(256, 256, cluster_m=2, two_cta=True, arch=A)):
        check_config(cfg, problem(4096), spec)
    with pytest.raises(UnsupportedGemmError, match="tile_n 96 must be a multiple of 64"):
        check_config(GemmConfig(128, 96, arch=A), problem(4096), spec)
    with pytest.raises(UnsupportedGemmError, match="K-major"):
        check_config(GemmConfig(128, 128, arch=A), problem(256, b_major="n"), spec)


@pytest.mark.parametrize("m", [1, 16, 192, 4096])
def test_ranking_offers_only_configs_the_gated_kernel_takes(m):
    spec = EpilogueSpec(gated="silu")
    ranked = rank_configs(problem(m), epilogue=spec)
    assert ranked
    for cfg in ranked:
        check_config(cfg, problem(m), spec)


@pytest.mark.parametrize("cfg,dtype,act", [
    (GemmConfig(128, 256, cluster_n=2, arch=A), "bfloat16", "silu"),
    (GemmConfig(64, 128, arch=A), "float16", "gelu_tanh"),
    (GemmConfig(256, 256, cluster_m=2, two_cta=True, arch=A), "bfloat16", "silu+bias"),
    (GemmConfig(128, 192, cluster_m=2, arch=A), "bfloat16", "relu"),
    (GemmConfig(256, 128, cluster_m=2, cluster_n=2, two_cta=True, arch=A), "float16", "silu"),
    (GemmConfig(128, 128, splits=3, arch=A), "bfloat16", "gelu+bias"),
], ids=lambda x: getattr(x, "name", x))
def test_gated_kernels_compile_with_two_weight_loads_per_stage(cfg, dtype, act):
    from cutedsl_backend.build import compile_kernel
    from cutedsl_backend.compiler import resolve

    p = problem(16 if cfg.splits > 1 else 4096, dtype)
    act, _, bias = act.partition("+")
    spec = EpilogueSpec(gated=act, bias="col" if bias else None, bias_dtype="float32")
    which = resolve(p, cfg, spec)
    assert which.config == resolve_config(cfg, p, spec)
    cg = compile_kernel(p, which)
    gates(cg)
    if cfg.splits > 1:
        assert cg.sass_counts(("ATOMG",))["ATOMG"] > 0


@pytest.mark.parametrize("m, scales", [(4096, ("row", "col")), (16, ("scalar", "col")), (192, ("scalar", "scalar"))])
def test_fp8_gated_kernels_compile_with_the_gates(m, scales):
    """FP8 operands: the ranking's pick for the gated problem compiles with UTCQMMA, three TMA
    loads per stage, no spills and within the budget, whatever the scale forms."""
    from cutedsl_backend.build import compile_kernel
    from cutedsl_backend.compiler import resolve

    p = problem(m, "float8_e4m3fn", packed=False)
    spec = EpilogueSpec(gated="silu", scale_a=scales[0], scale_b=scales[1], bias="col", bias_dtype="bfloat16")
    gates(compile_kernel(p, resolve(p, default_config(p, epilogue=spec), spec)), mma="UTCQMMA")


def test_the_ranking_offers_b_multicast_on_sm100a():
    """sm100a's gated kernel loads both halves as a plain B, so every cluster it takes is ranked
    (B multicast: cluster_m spans more than one CTA or CTA pair)."""
    from cutedsl_backend.configs.resources import ctas_per_mma

    spec = EpilogueSpec(gated="silu")
    assert any(c.cluster_m // ctas_per_mma(c) > 1 for c in rank_configs(problem(4096), epilogue=spec))
