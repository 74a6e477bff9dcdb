"""Compile-only proof of the sm100a family on a machine without a GPU: every quick config (1-CTA
and 2-CTA) compiles for sm_100a with tcgen05 UMMA (UTCHMMA, UTCQMMA for fp8) and TMA loads, no
local memory, within the sm100a budgets; the shared epilogue compiles on it too."""

import pytest

from cutedsl_backend.configs import GemmConfig, check_config, quick_configs
from cutedsl_backend.epilogue import EpilogueSpec
from cutedsl_backend.problem import GemmProblem, UnsupportedGemmError
from cutedsl_backend.validation.budgets import check_budgets, load_budgets
from cutedsl_backend.validation.matrix import REQUIRED_SASS

from .sass import assert_waits_first, opcodes

pytestmark = pytest.mark.compile
CELLS = [("bfloat16", "bfloat16", "k", "n"), ("float16", "float32", "m", "k")]


def gates(k, bits):
    counts = k.sass_counts()
    for alts in REQUIRED_SASS[("sm100a", bits)]:
        assert any(counts[op] for op in alts), (alts, counts)
    assert counts["HGMMA"] == 0 and counts["QGMMA"] == 0  # no Hopper MMA in a Blackwell kernel
    assert counts["LDL"] == 0 and counts["STL"] == 0 and k.resources.local_bytes == 0, (counts, k.resources)
    assert counts["UTMASTG"] > 0


@pytest.mark.parametrize("cfg", quick_configs("sm100a"), ids=lambda c: c.name)
def test_sm100_quick_config_compiles_with_gates_and_budget(cfg):
    import cutedsl_backend as cb

    results = []
    for dtype, out_dtype, a_major, b_major in CELLS:
        k = cb.compile_gemm(1000, 1048, 776, dtype=dtype, out_dtype=out_dtype, a_major=a_major, b_major=b_major,
                            arch="sm100a", config=cfg, use_cache=False)
        gates(k, 16)
        results.append({"compile_seconds": k.compile_seconds, "cell": {"arch": "sm100a", "config": cfg.name}})
    verdict = check_budgets(results, load_budgets())
    assert verdict["ok"], verdict["regressions"]


def test_sm100_fp8_and_epilogue_compile():
    import cutedsl_backend as cb

    two_cta = GemmConfig(256, 128, cluster_m=2, arch="sm100a", two_cta=True)
    k = cb.compile_gemm(1000, 1048, 784, dtype="float8_e4m3fn", b_dtype="float8_e5m2", a_major="k", b_major="k",
                        arch="sm100a", config=two_cta, epilogue=EpilogueSpec(scale_a="row", scale_b="col"),
                        use_cache=False)
    gates(k, 8)
    k = cb.compile_gemm(1000, 1048, 776, dtype="bfloat16", arch="sm100a", config=quick_configs("sm100a")[1],
                        epilogue=EpilogueSpec(residual=True, residual_dtype="bfloat16", bias="col",
                                              bias_dtype="bfloat16", activation="relu"), use_cache=False)
    gates(k, 16)


@pytest.mark.parametrize("cfg, rule", [
    (GemmConfig(256, 128, arch="sm100a"), "tile_m"),                         # 256 needs 2-CTA
    (GemmConfig(64, 128, cluster_m=2, arch="sm100a", two_cta=True), "tile_m"),
    (GemmConfig(256, 128, arch="sm100a", two_cta=True), "cluster"),          # pair needs cluster_m 2
    (GemmConfig(128, 128, arch="sm100a", schedule="pingpong"), "schedule"),
])
def test_sm100_config_rules(cfg, rule):
    with pytest.raises(UnsupportedGemmError, match=rule):
        check_config(cfg, GemmProblem(4096, 4096, 4096, arch="sm100a"))


@pytest.mark.parametrize("cfg", [GemmConfig(128, 128, arch="sm100a", splits=3),
                                 GemmConfig(64, 128, cluster_n=2, arch="sm100a", splits=2),
                                 GemmConfig(256, 128, cluster_m=2, arch="sm100a", two_cta=True, splits=4)],
                         ids=lambda c: c.name)
def test_sm100_split_k_compiles_with_gates(cfg):
    """Split-K on sm100a (the sm90a host logic and reduction, per epilogue part out of tensor
    memory): tcgen05 UMMA and TMA, one global atomic per tile arrival, no local memory, with a
    fused epilogue too. Compile-verified only: no Blackwell GPU has run it (tests/gpu/test_gemm_sm100.py)."""
    import cutedsl_backend as cb

    for spec in (EpilogueSpec(), EpilogueSpec(bias="col", bias_dtype="bfloat16", activation="silu")):
        k = cb.compile_gemm(16, 4104, 4096, dtype="bfloat16", arch="sm100a", b_major="k", config=cfg, epilogue=spec,
                            use_cache=False)
        gates(k, 16)
        assert k.sass_counts(("ATOMG",))["ATOMG"] > 0


@pytest.mark.parametrize("cfg", [GemmConfig(128, 192, arch="sm100a", swap_ab=True),
                                 GemmConfig(256, 128, arch="sm100a", cluster_m=2, two_cta=True, swap_ab=True)],
                         ids=lambda c: c.name)
def test_swap_ab_kernels_store_a_column_major_output(cfg, tmp_path, monkeypatch):
    """The swap-AB host logic is shared; sm100a's kernel stores the column-major out^T out of tensor
    memory through TMA (compile-verified: no Blackwell GPU here)."""
    monkeypatch.setenv("CUTEDSL_BACKEND_CACHE_DIR", str(tmp_path))
    from cutedsl_backend.build import compile_kernel
    from cutedsl_backend.compiler import resolve

    problem = GemmProblem(192, 8192, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm100a").swapped()
    cg = compile_kernel(problem, resolve(problem, cfg, EpilogueSpec(bias="row", activation="silu")))
    counts = cg.sass_counts()
    assert counts["UTCHMMA"] > 0 and counts["UTMALDG"] > 0 and counts["UTMASTG"] > 0, counts
    assert counts["LDL"] == 0 and counts["STL"] == 0 and cg.resources.local_bytes == 0, (counts, cg.resources)


def test_the_shared_memory_rule_counts_the_epilogue_tile_the_kernel_allocates():
    """The sm100a kernel's epilogue sub-tile is the DSL's choice at trace time
    (compute_epilogue_tile_size; a 64-row tile stages 64 columns, not 32); the config rules
    restate it in pure Python (configs.sm100.sm100_epilogue_tile) to count its staging buffers.
    The two agree on every config of the space, output dtype and major, plain and gated."""
    from cutlass.utils.blackwell_helpers import compute_epilogue_tile_size

    from cutedsl_backend.configs import config_space
    from cutedsl_backend.configs.resources import ctas_per_mma
    from cutedsl_backend.configs.sm100 import GATED_EPI_N, sm100_epilogue_tile

    checked = 0
    for cfg in config_space("sm100a"):
        for bits, c_major, gated in ((16, "n", False), (32, "n", False), (16, "m", False), (16, "n", True),
                                     (32, "n", True)):
            cta_m, cta_n = cfg.tile_m // ctas_per_mma(cfg), cfg.tile_n // (2 if gated else 1)
            if gated and cta_m > 64:
                cta_n = GATED_EPI_N  # the tile the gated kernel asks the DSL about
            dsl = compute_epilogue_tile_size(cta_m, cta_n, cfg.two_cta, bits, None, c_major == "m")
            assert tuple(dsl) == sm100_epilogue_tile(cfg, bits, c_major, gated), (cfg.name, bits, c_major, gated)
            checked += 1
    assert checked >= 300


@pytest.mark.parametrize("cfg", [GemmConfig(128, 128, arch="sm100a", splits=3),
                                 GemmConfig(256, 128, cluster_m=2, arch="sm100a", two_cta=True)], ids=lambda c: c.name)
def test_sm100_dependent_launch_waits_before_its_first_global_access(cfg):
    """GemmConfig.pdl on sm100a, as on sm90a (tests/compile/test_compile_sm90.py): the wait before
    every global access, launch_dependents issued, neither without pdl. Compile-verified only."""
    import cutedsl_backend as cb

    spec = EpilogueSpec(bias="col", bias_dtype="bfloat16")

    def build(c):
        return opcodes(cb.compile_gemm(16, 4104, 4096, dtype="bfloat16", arch="sm100a", b_major="k", config=c,
                                       epilogue=spec, use_cache=False).sass())

    assert_waits_first(build(cfg.replace(pdl=True)), build(cfg))
