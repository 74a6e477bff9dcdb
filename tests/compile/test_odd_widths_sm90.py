"""Compile gates of the sm90a tiles whose width is a multiple of 16 but not of 32 (their epilogue
stores 48- or 16-column sub-tiles: configs.resources.epilogue_tile_n): MMAs, TMA loads and
stores, no spills, within the compile budget; plain, swapped, K-sliced, fused epilogues, FP8."""

import pytest

from cutedsl_backend.configs import GemmConfig
from cutedsl_backend.epilogue import EpilogueSpec
from cutedsl_backend.problem import GemmProblem

from .sass import compiles_with_the_gates

pytestmark = pytest.mark.compile
SCALARS = EpilogueSpec(scale_a="scalar", scale_b="scalar")


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTEDSL_BACKEND_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("cfg, dtype, b_major, spec", [
    (GemmConfig(128, 144), "bfloat16", "k", EpilogueSpec()),
    (GemmConfig(128, 144, cluster_n=2), "float8_e4m3fn", "k", SCALARS),
    (GemmConfig(128, 176, cluster_m=2), "bfloat16", "n", EpilogueSpec(bias="col", activation="gelu_tanh")),
    (GemmConfig(128, 208), "float16", "k", EpilogueSpec(residual=True, residual_dtype="bfloat16",
                                                        residual_aligned=True)),
    (GemmConfig(128, 240, edge=True), "bfloat16", "k", EpilogueSpec()),
    (GemmConfig(128, 144, splits=2), "bfloat16", "k", EpilogueSpec(bias="col")),
    (GemmConfig(128, 144, stream_k=True), "float8_e4m3fn", "k", EpilogueSpec(scale_a="row", scale_b="col")),
    (GemmConfig(128, 144, schedule="pingpong"), "bfloat16", "k", EpilogueSpec()),
], ids=lambda x: getattr(x, "name", None) or getattr(x, "describe", lambda: str(x))())
def test_sixteen_step_widths_compile(cfg, dtype, b_major, spec):
    out = "bfloat16" if "float8" in dtype else dtype
    compiles_with_the_gates(GemmProblem(1024, 4608, 3584, 1, dtype, out, "k", b_major, "sm90a"), cfg, spec)


@pytest.mark.parametrize("cfg, dtype, spec", [
    (GemmConfig(64, 80, schedule="pingpong", swap_ab=True), "bfloat16", EpilogueSpec(bias="row")),
    (GemmConfig(64, 112, schedule="pingpong", cluster_m=4, cluster_n=2, swap_ab=True), "float8_e4m3fn", SCALARS),
    (GemmConfig(64, 144, schedule="pingpong", splits=2, swap_ab=True), "bfloat16", EpilogueSpec()),
    (GemmConfig(64, 16, schedule="pingpong", cluster_m=4, stages=16, swap_ab=True), "float8_e4m3fn", SCALARS),
    (GemmConfig(64, 16, schedule="pingpong", stages=16, swap_ab=True), "bfloat16", EpilogueSpec(bias="row",
                                                                                             activation="silu")),
], ids=lambda x: getattr(x, "name", None) or getattr(x, "describe", lambda: str(x))())
def test_sixteen_step_token_widths_compile_swapped(cfg, dtype, spec):
    problem = GemmProblem(144, 4096, 4096, 1, dtype, "bfloat16", "k", "k", "sm90a").swapped()
    compiles_with_the_gates(problem, cfg, spec)


@pytest.mark.parametrize("m, n, k, dtype, spec, width", [
    (4096, 576, 7168, "bfloat16", None, 144),             # deepseek-v3 kv_a: four whole 144-wide tiles
    (2048, 1536, 7168, "float8_e4m3fn", SCALARS, 96),     # q_a: sixteen 96-wide tiles
])
def test_the_models_wave_filling_picks_compile(m, n, k, dtype, spec, width):
    """The widths configs.heuristic.waves_choice puts in the models' pick compile with the gates."""
    from cutedsl_backend.configs import default_config

    out = "bfloat16" if "float8" in dtype else dtype
    problem = GemmProblem(m, n, k, 1, dtype, out, "k", "k", "sm90a")
    pick = default_config(problem, epilogue=spec)
    assert pick.tile_n == width, pick.name
    compiles_with_the_gates(problem, pick, spec or EpilogueSpec())
