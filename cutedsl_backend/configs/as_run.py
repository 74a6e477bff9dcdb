"""How the dispatcher's picks run: the policies layered on a config a table or model names, which
change how a kernel meets its neighbours, not the tiling it was chosen for. Pure Python.

- Edge-aligned last tiles (configs.edge, on).
- Fitted A loads (ShortALoads), on: a few-token pick that loads 16 or 32 rows of A
  (GemmConfig.a_rows) loads 1, 2, 4 or 8 at 1-8 tokens, the power of two at or above M.
  ``sweep-shapes --no-fitted-a-rows`` turns it off for the A/B.
- Programmatic dependent launch (GemmConfig.pdl), off: it lets a kernel's prologue overlap the
  end of the kernel before it on the stream, meant for launches of a few microseconds (few
  tokens against a narrow weight, where the perf sweep's worst 16-bit cells are). Measured on an
  H100 (docs/results/h100/2026-12-06) it made the standard bf16 sweep slower (0.986 -> 0.974 of
  cuBLAS; split-K launches up to 1.57x slower), so it stays off; ``sweep-shapes --pdl`` turns it
  on for that A/B.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import GemmConfig, fitted_a_rows
from .edge import EDGE_TILES
from .rules import fits


@dataclass
class DependentLaunch:
    """``enabled``: the dispatcher's picks on sm90a launch as programmatic dependent launches."""

    enabled: bool = False

    def apply(self, cfg: GemmConfig) -> GemmConfig:
        if not self.enabled or cfg.pdl or cfg.arch != "sm90a":
            return cfg
        return cfg.replace(pdl=True)


@dataclass
class ShortALoads:
    """``enabled``: a pick that loads only some rows of A (GemmConfig.a_rows, the few-token configs)
    loads the fewest that hold M, the power of two at or above it up to 8 (configs.fitted_a_rows).
    TMA fills a box's rows past the tensor slowly: on the H100 the same 16-row load config took
    11.3 us at 1 token and 9.6 at 16 on 4096 x 4096 (bf16; fp8 on 4608 x 3584: 9.0 and 7.1;
    docs/results/h100/2026-12-06/sweeps/standard-edge-*.json.gz). The work is otherwise the same,
    so a table entry measured at 16 tokens serves 1-16. Measured on an H100 over the standard
    tag's projections at 1, 2, 4 and 8 tokens (docs/results/h100/2026-12-07): against cuBLAS
    0.963x -> 0.982x in geomean (bf16), against torch._scaled_mm 0.957x -> 1.000x (FP8
    tensorwise), none wrong. The gated epilogue keeps its loads: its loads of 1 and 4 rows passed
    their GPU tests on an H100 but have not been timed."""

    enabled: bool = True

    def apply(self, cfg: GemmConfig, problem, epilogue=None) -> GemmConfig:
        rows = fitted_a_rows(problem.m)
        # (a config with a_rows set is sm90a's: the rules give short loads to that family only)
        if not self.enabled or not cfg.a_rows or not rows or rows >= cfg.a_rows:
            return cfg
        if epilogue is not None and epilogue.gated:
            return cfg
        # under 8 rows A is not multicast (configs.rules): a cluster along N takes the 8-row load
        fitted = (cfg.replace(a_rows=r) for r in dict.fromkeys((rows, 8)) if r < cfg.a_rows)
        return next((c for c in fitted if fits(c, problem, epilogue)), cfg)


SHORT_A_LOADS = ShortALoads()


# the process's policy (sweep-shapes --pdl turns it on, before any pick: configs.default_config
# memoizes its picks)
DEPENDENT_LAUNCH = DependentLaunch()


def policy_tag() -> str:
    """Which of these policies are on (caches of choices made under them key on it: the configs
    they name differ)."""
    return f"edge{int(EDGE_TILES.enabled)}-pdl{int(DEPENDENT_LAUNCH.enabled)}-arows{int(SHORT_A_LOADS.enabled)}"


def as_run(cfg: GemmConfig, problem, epilogue=None) -> GemmConfig:
    """``cfg`` as the dispatcher runs it on ``problem``: its last tiles moved where configs.edge
    says so, its A loads fitted to a few tokens (ShortALoads), launched as a dependent launch where
    that policy is on."""
    return DEPENDENT_LAUNCH.apply(SHORT_A_LOADS.apply(EDGE_TILES.apply(cfg, problem, epilogue), problem, epilogue))


def candidates_as_run(configs, problem, epilogue=None) -> list:
    """``configs`` (best first) as they run ``problem``, once each: autotune candidates for a
    static shape, which is the one that runs."""
    return list(dict.fromkeys(as_run(c, problem, epilogue) for c in configs))
