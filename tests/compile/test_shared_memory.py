"""Every config of both families' spaces launches within the shared memory an SM gives, and the
config rules count it closely. The DSL checks a launch's dynamic shared memory only when the kernel
runs, so a CPU compile reads it from the host code the DSL generated (artifacts.launch_shared_bytes)
and holds it to the rules' count, which picks the stage count: it must not under-count (a launch
past 227 KiB fails on the GPU) nor over-count by a stage (a stage that fits would be left out).
16-bit and fp32 outputs, FP8 inputs and the gated epilogue, whose sub-tiles differ."""

import pytest

from cutedsl_backend.configs import GemmConfig, config_space, family, fits
from cutedsl_backend.epilogue import EpilogueSpec
from cutedsl_backend.problem import GemmProblem

pytestmark = pytest.mark.compile

VARIANTS = {  # name: (input dtype, output dtype, epilogue)
    "bf16": ("bfloat16", "bfloat16", EpilogueSpec()),
    "fp32 out": ("bfloat16", "float32", EpilogueSpec()),
    "fp8 -> fp32": ("float8_e4m3fn", "float32", EpilogueSpec(scale_a="row", scale_b="col")),
    "gated": ("bfloat16", "bfloat16", EpilogueSpec(gated="silu")),
}


def _shapes(arch):
    """One config per tile, cluster, schedule and CTA pairing (the raster changes no buffer) of
    those a 16-bit problem can run (the space holds tiles only FP8's smaller stages fit)."""
    seen = {}
    bf16 = GemmProblem(4096, 8192, 4096, 1, "bfloat16", "bfloat16", "k", "k", arch)
    for cfg in config_space(arch):
        if fits(cfg, bf16, None):
            seen.setdefault((cfg.tile_m, cfg.tile_n, cfg.cluster_m, cfg.cluster_n, cfg.schedule, cfg.two_cta), cfg)
    return list(seen.values())


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("CUTEDSL_BACKEND_CACHE_DIR", str(tmp_path / "cache"))


@pytest.mark.parametrize("cfg", [c for arch in ("sm90a", "sm100a") for c in _shapes(arch)], ids=lambda c: c.name)
def test_launch_shared_memory_is_within_the_rule_and_the_limit(cfg):
    from cutedsl_backend.build import compile_kernel
    from cutedsl_backend.compiler import resolve
    from cutedsl_backend.configs.families import epilogue_smem_bytes
    from cutedsl_backend.configs.resources import SMEM_RESERVED, smem_bytes_per_stage

    checked = 0
    for name, (dtype, out_dtype, spec) in VARIANTS.items():
        fp8 = {"packed": False, "fast_accum": True} if dtype.startswith("float8") else {}
        problem = GemmProblem(4096, 8192, 4096, 1, dtype, out_dtype, "k", "k", cfg.arch, **fp8)
        if not fits(cfg, problem, spec):
            continue
        which = resolve(problem, cfg, spec)
        c = which.config
        launch = compile_kernel(problem, which).launch_shared_bytes()
        counted = c.stages * smem_bytes_per_stage(c, problem) + epilogue_smem_bytes(c, problem, spec) + SMEM_RESERVED
        assert launch is not None, (c.name, name, "no launch shared memory in the host code")
        assert launch <= counted <= family(cfg.arch).smem_capacity, (c.name, name, launch, counted)
        if c.stages < 8:  # (8: the pipeline's own cap, not the rule, stops there)
            assert counted - launch < smem_bytes_per_stage(c, problem), (c.name, name, launch, counted)
        checked += 1
    assert checked >= 1, cfg.name


def test_the_reading_follows_the_stage_count():
    """The value read is the launch's: one stage more of a 64x256 gated sm100a tile adds exactly a
    stage's bytes (A 64x64 and both 128x64 weight halves, bf16), past the limit at five stages."""
    import dataclasses

    from cutedsl_backend.build import compile_kernel
    from cutedsl_backend.compiler import resolve

    problem = GemmProblem(16, 2 * 14336, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm100a")
    which = resolve(problem, GemmConfig(64, 256, cluster_m=2, arch="sm100a"), EpilogueSpec(gated="silu"))
    assert which.config.stages == 4
    four, five = (compile_kernel(problem, dataclasses.replace(which, config=which.config.replace(stages=s)))
                  .launch_shared_bytes() for s in (4, 5))
    assert five - four == (64 * 64 + 256 * 64) * 2
    assert four <= family("sm100a").smem_capacity < five
