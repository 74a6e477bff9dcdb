"""How the dispatcher's picks run: the policies layered on a config a table or model names, which
change how a kernel meets its neighbours, not the tiling it was chosen for. Pure Python.

- Edge-aligned last tiles (configs.edge, on).
- Programmatic dependent launch (GemmConfig.pdl), off: it lets a kernel's prologue overlap the
  end of the kernel before it on the stream, meant for launches of a few microseconds (few
  tokens against a narrow weight, where the perf sweep's worst 16-bit cells are). Measured on an
  H100 (docs/results/h100/2026-12-06) it made the standard bf16 sweep slower (0.986 -> 0.974 of
  cuBLAS; split-K launches up to 1.57x slower), so it stays off; ``sweep-shapes --pdl`` turns it
  on for that A/B.
"""

from __future__ import annotations

from dataclasses import dataclass

from .config import GemmConfig
from .edge import EDGE_TILES


@dataclass
class DependentLaunch:
    """``enabled``: the dispatcher's picks on sm90a launch as programmatic dependent launches."""

    enabled: bool = False

    def apply(self, cfg: GemmConfig) -> GemmConfig:
        if not self.enabled or cfg.pdl or cfg.arch != "sm90a":
            return cfg
        return cfg.replace(pdl=True)


# the process's policy (sweep-shapes --pdl turns it on, before any pick: configs.default_config
# memoizes its picks)
DEPENDENT_LAUNCH = DependentLaunch()


def policy_tag() -> str:
    """Which of these policies are on (caches of choices made under them key on it: the configs
    they name differ)."""
    return f"edge{int(EDGE_TILES.enabled)}-pdl{int(DEPENDENT_LAUNCH.enabled)}"


def as_run(cfg: GemmConfig, problem, epilogue=None) -> GemmConfig:
    """``cfg`` as the dispatcher runs it on ``problem``: its last tiles moved where configs.edge
    says so, launched as a dependent launch where that policy is on."""
    return DEPENDENT_LAUNCH.apply(EDGE_TILES.apply(cfg, problem, epilogue))


def candidates_as_run(configs, problem, epilogue=None) -> list:
    """``configs`` (best first) as they run ``problem``, once each: autotune candidates for a
    static shape, which is the one that runs."""
    return list(dict.fromkeys(as_run(c, problem, epilogue) for c in configs))
