"""The gated epilogue (act(gate) * up in one GEMM) on sm90a without a GPU: its rules name what it
does not take, its kernels compile with three TMA loads per stage (A, the gate half and the up half
of B), no spills, within the compile budget (16-bit and FP8 with its scales), and the config
ranking offers only configs it takes.
Its numerics run on an sm90 GPU (tests/gpu/test_gated_sm90.py)."""

import pytest

from cutedsl_backend.configs import GemmConfig, check_config, rank_configs, resolve_config
from cutedsl_backend.epilogue import GATED_ACTIVATIONS, EpilogueSpec
from cutedsl_backend.problem import GemmProblem, UnsupportedGemmError
from cutedsl_backend.validation.budgets import load_budgets

from .sass import early_loads_consumed_after_mainloop, opcodes

pytestmark = pytest.mark.compile
BUDGET = load_budgets()["families"]["sm90a/gemm+epilogue"]
# a Llama-style up projection: N = 2 x 14336 gate and up columns
PROBLEM = GemmProblem(4096, 2 * 14336, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTEDSL_BACKEND_CACHE_DIR", str(tmp_path / "cache"))


def test_spec_rules_and_keys():
    for act in GATED_ACTIVATIONS:
        assert EpilogueSpec(gated=act).key() != EpilogueSpec().key()
    assert EpilogueSpec(gated="silu").key() != EpilogueSpec(gated="relu").key()
    assert EpilogueSpec().key() == ("epi", None, None, None, False, None, False, None, None)  # unchanged
    with pytest.raises(UnsupportedGemmError, match="gated 'tanh'"):
        EpilogueSpec(gated="tanh")
    for kw in ({"bias": "row"}, {"activation": "relu"}, {"residual": True}):
        with pytest.raises(UnsupportedGemmError, match="gated: the gated epilogue takes a column bias and FP8"):
            EpilogueSpec(gated="silu", **kw)
    EpilogueSpec(gated="silu", scale_a="row", scale_b="col")  # FP8 scales: A's per row, the weights' per column
    biased = EpilogueSpec(gated="silu", bias="col", bias_dtype="bfloat16")
    assert biased.staged_vectors(128, 256) == ()  # read per element from the 2N vector, not staged


def test_config_rules_name_what_the_gated_kernel_does_not_take():
    spec = EpilogueSpec(gated="silu")
    for cfg in (GemmConfig(128, 256, cluster_n=2), GemmConfig(128, 256, cluster_m=2),
                GemmConfig(128, 256, cluster_m=2, cluster_n=2)):
        check_config(cfg, PROBLEM, spec)
    with pytest.raises(UnsupportedGemmError, match="tile_n 96 must be a multiple of 64"):
        check_config(GemmConfig(128, 96, schedule="pingpong"), PROBLEM, spec)
    n_major = GemmProblem(256, 512, 256, 1, "bfloat16", "bfloat16", "k", "n", "sm90a")
    with pytest.raises(UnsupportedGemmError, match="K-major"):
        check_config(GemmConfig(128, 128), n_major, spec)


@pytest.mark.parametrize("m", [1, 16, 192, 4096])
def test_ranking_offers_only_configs_the_gated_kernel_takes(m):
    """...on the clusters measured on the H200: B multicast is swept (sweep-gated), not ranked."""
    from cutedsl_backend.validation.tuning_sweeps import gated_candidates

    problem = GemmProblem(m, 2 * 14336, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")
    spec = EpilogueSpec(gated="silu")
    ranked = rank_configs(problem, epilogue=spec)
    assert ranked
    for cfg in ranked:
        check_config(cfg, problem, spec)
        assert cfg.cluster_m == 1, cfg.name
    swept = gated_candidates(problem, spec)
    assert swept[:4] == ranked[:4] and len(set(swept)) == len(swept)
    assert any(c.cluster_m == 2 for c in swept)
    for cfg in swept:
        check_config(cfg, problem, spec)


@pytest.mark.parametrize("cfg, multicast", [(GemmConfig(128, 256, cluster_m=2), 2),
                                            (GemmConfig(128, 256, cluster_m=2, cluster_n=2), 3),
                                            (GemmConfig(128, 128, cluster_m=2, schedule="pingpong"), 2),
                                            (GemmConfig(128, 256, cluster_n=2), 1)],
                         ids=lambda x: getattr(x, "name", x))
def test_gated_b_multicast_loads_both_halves_multicast(cfg, multicast):
    """With cluster_m 2 the gate and up loads are multicast (each CTA of a cluster column loads
    its share of both halves), as a plain B; A is multicast where cluster_n is 2."""
    import re

    from cutedsl_backend.build import compile_kernel
    from cutedsl_backend.compiler import resolve

    spec = EpilogueSpec(gated="silu", bias="col", bias_dtype="bfloat16")
    cg = compile_kernel(PROBLEM, resolve(PROBLEM, cfg, spec))
    loads = re.findall(r"UTMALDG[.\w]*", cg.sass())
    assert len(loads) == 3 and sum(".MULTICAST" in op for op in loads) == multicast, loads
    counts = cg.sass_counts()
    assert counts["LDL"] == 0 and counts["STL"] == 0 and cg.resources.local_bytes == 0, counts
    assert cg.compile_seconds <= BUDGET["cell_max_s"], cg.compile_seconds


@pytest.mark.parametrize("cfg,dtype,act", [
    (GemmConfig(128, 256, cluster_n=2), "bfloat16", "silu"),
    (GemmConfig(128, 128, schedule="pingpong"), "float16", "gelu_tanh"),
    (GemmConfig(64, 128, schedule="pingpong", splits=2), "bfloat16", "relu"),
    (GemmConfig(64, 64, schedule="pingpong", a_rows=16), "bfloat16", "gelu"),
    (GemmConfig(64, 64, schedule="pingpong", a_rows=1), "bfloat16", "silu"),
    (GemmConfig(128, 256, cluster_n=2), "bfloat16", "silu+bias"),
    (GemmConfig(64, 128, schedule="pingpong", splits=2), "float16", "gelu_tanh+bias"),
], ids=lambda x: getattr(x, "name", x))
def test_gated_kernels_compile_with_two_weight_loads_per_stage(cfg, dtype, act):
    from cutedsl_backend.build import compile_kernel
    from cutedsl_backend.compiler import resolve

    m = min(16, cfg.a_rows) if cfg.a_rows else 4096
    problem = GemmProblem(m, 2 * 14336, 4096, 1, dtype, dtype, "k", "k", "sm90a")
    act, _, bias = act.partition("+")
    spec = EpilogueSpec(gated=act, bias="col" if bias else None, bias_dtype="float32")
    which = resolve(problem, cfg, spec)
    assert which.config == resolve_config(cfg, problem, spec)
    cg = compile_kernel(problem, which)
    counts = cg.sass_counts()
    assert counts["UTMALDG"] == 3, counts  # A, the gate half and the up half of B
    assert counts["HGMMA"] > 0 and counts["UTMASTG"] > 0, counts
    assert counts["LDL"] == 0 and counts["STL"] == 0 and cg.resources.local_bytes == 0, counts
    assert cg.compile_seconds <= BUDGET["cell_max_s"], cg.compile_seconds


@pytest.mark.parametrize("fast", [True, False], ids=["fast_accum", "precise"])
@pytest.mark.parametrize("m, scales", [(4096, ("row", "col")), (16, ("scalar", "col")), (192, ("scalar", "scalar"))])
def test_fp8_gated_kernels_compile_with_the_gates(m, scales, fast):
    """FP8 operands: the ranking's pick for the gated problem compiles with QGMMA, three TMA loads
    per stage, no spills and within the budget, whatever the scale forms and accumulation mode."""
    from cutedsl_backend.build import compile_kernel
    from cutedsl_backend.compiler import resolve
    from cutedsl_backend.configs import default_config

    problem = GemmProblem(m, 2 * 14336, 4096, 1, "float8_e4m3fn", "bfloat16", "k", "k", "sm90a", packed=False,
                          fast_accum=fast)
    spec = EpilogueSpec(gated="silu", scale_a=scales[0], scale_b=scales[1], bias="col", bias_dtype="bfloat16")
    cg = compile_kernel(problem, resolve(problem, default_config(problem, epilogue=spec), spec))
    counts = cg.sass_counts()
    assert counts["QGMMA"] > 0 and counts["UTMALDG"] == 3 and counts["UTMASTG"] > 0, counts
    assert counts["LDL"] == 0 and counts["STL"] == 0 and cg.resources.local_bytes == 0, counts
    assert cg.compile_seconds <= BUDGET["cell_max_s"], cg.compile_seconds


def test_tensorwise_scales_are_prefetched_and_read_after_the_mainloop():
    """The gated kernel's scalar scales (tensorwise FP8): prefetched into L1 before the mainloop
    and loaded only after it; loaded before it, ptxas copied them into uniform registers ahead of
    the first MMA, which then waited for both loads (see the plain kernel's gate in
    test_compile_sm90.py)."""
    import cutedsl_backend as cb

    k = cb.compile_gemm(16, 2 * 14336, 4096, dtype="float8_e4m3fn", b_major="k", out_dtype="bfloat16",
                        config=GemmConfig(64, 128, schedule="pingpong"), use_cache=False,
                        epilogue=EpilogueSpec(gated="silu", scale_a="scalar", scale_b="scalar"))
    sass = k.sass()
    assert early_loads_consumed_after_mainloop(sass) == []
    ops = opcodes(sass)
    mma = [i for i, op in enumerate(ops) if op == "QGMMA"]
    assert ops[:mma[0]].count("CCTL") >= 2  # the two prefetches
    assert ops[mma[-1]:].count("LDG") >= 2
    assert not k.resources.spills
