"""Programmatic dependent launch as a dispatch policy (configs.as_run, GemmConfig.pdl): off by
default, the picks are what they were; on, every sm90a pick (eager dispatcher, the swap fallback's
unswapped config, Inductor's static candidates and dynamic buckets) launches as one, and the
tables and sweeps keep naming the tiling alone (GemmConfig.tiling)."""

import dataclasses

import pytest

from cutedsl_backend.configs import GemmConfig, check_config, default_config
from cutedsl_backend.configs.as_run import DEPENDENT_LAUNCH, DependentLaunch, as_run, candidates_as_run
from cutedsl_backend.problem import GemmProblem


def linear(m, n=4096, k=4096, arch="sm90a"):
    return GemmProblem(m, n, k, 1, "bfloat16", "bfloat16", "k", "k", arch)


@pytest.fixture
def pdl_on(monkeypatch):
    monkeypatch.setattr(DEPENDENT_LAUNCH, "enabled", True)
    default_config.cache_clear()
    yield
    monkeypatch.setattr(DEPENDENT_LAUNCH, "enabled", False)
    default_config.cache_clear()


def test_named_keyed_apart_and_both_families_take_it():
    cfg = GemmConfig(64, 96, schedule="pingpong", splits=2, a_rows=16)
    pdl = cfg.replace(pdl=True)
    assert pdl.name == cfg.name + "_pdl" and GemmConfig.from_name(pdl.name) == pdl
    assert pdl.key() == dataclasses.astuple(pdl) and pdl.key() != cfg.key()
    assert pdl.shape == cfg.shape  # the same computation per CTA
    assert pdl.tiling() == cfg and cfg.replace(edge=True, pdl=True).tiling() == cfg
    check_config(pdl, linear(16))
    check_config(GemmConfig(128, 128, arch="sm100a", pdl=True), linear(512, arch="sm100a"))


def test_off_by_default_the_picks_are_unchanged():
    assert DEPENDENT_LAUNCH.enabled is False
    for m in (1, 16, 96, 449, 4096):
        assert not default_config(linear(m)).pdl


def test_on_every_sm90a_pick_launches_dependent(pdl_on):
    for m in (1, 16, 96, 449, 4096):
        pick = default_config(linear(m))
        assert pick.pdl, m
        assert DependentLaunch(enabled=False).apply(pick.tiling()) == pick.tiling()
    sm100 = GemmConfig(128, 128, arch="sm100a")
    assert DEPENDENT_LAUNCH.apply(sm100) == sm100
    moved = as_run(GemmConfig(128, 128, cluster_m=2), linear(449))
    assert moved.edge and moved.pdl  # both policies, one call
    cands = candidates_as_run([GemmConfig(128, 128), GemmConfig(128, 256)], linear(512))
    assert all(c.pdl for c in cands) and len(cands) == 2


def test_a_dynamic_offers_bucket_kernels_launch_as_the_dispatcher_runs_them(pdl_on):
    """Under a symbolic token count the kernels compiled ahead are the picks as run, dependent
    launch included (a static shape's candidates go through the same candidates_as_run)."""
    from cutedsl_backend.epilogue import EpilogueSpec
    from cutedsl_backend.inductor.eligibility import Offer

    pairs = Offer(linear(40), EpilogueSpec(), (), dynamic=True).dispatch_buckets()
    assert pairs and all(cfg.pdl for _, cfg in pairs)
    assert {cfg.tiling() for _, cfg in pairs} & {default_config(linear(m)).tiling() for m in (64, 512)}


def test_caches_of_choices_key_on_the_policies(monkeypatch):
    """Inductor's FX graph cache tag and its stored autotune decisions differ with the policy on
    (a stored choice names its configs as run)."""
    from cutedsl_backend.epilogue import EpilogueSpec
    from cutedsl_backend.inductor import decisions
    from cutedsl_backend.inductor.choices import settings_tag
    from cutedsl_backend.inductor.eligibility import Offer

    offer = Offer(linear(448), EpilogueSpec(), (), dynamic=False)
    off = (settings_tag(), decisions.key("gemm", offer, "NVIDIA H100"))
    monkeypatch.setattr(DEPENDENT_LAUNCH, "enabled", True)
    on = (settings_tag(), decisions.key("gemm", offer, "NVIDIA H100"))
    assert off[0] != on[0] and off[1] != on[1]
