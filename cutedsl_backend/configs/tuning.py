"""Measured overrides: configs the H200 measurements picked over the ranking for a shape class,
as typed data with the reason (`python -m cutedsl_backend sweep` / `sweep-epilogue` / `sweep-fp8`).
Plain GEMMs: the ranking alone decides (its prefill picks measured within 1-4% of the sweep's best).
Each rule covers what was measured; tuned_choice checks its operand and epilogue class."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from ..problem import GemmProblem
from .config import GemmConfig
from .rules import fits


@dataclass(frozen=True)
class TunedRule:
    """``config`` for problems of ``operands`` ("16bit" or "fp8_precise") and ``epilogue`` (None or
    "residual_gathered") with min_m <= M <= max_m and N >= min_n; ``reason``: the measurement."""

    operands: str
    epilogue: Optional[str]
    min_m: int
    max_m: int
    min_n: int
    config: GemmConfig
    reason: str


TUNED_SM90 = (
    TunedRule("16bit", "residual_gathered", 1024, 1 << 31, 4096, GemmConfig(128, 128, cluster_m=2, schedule="pingpong"),
              "a gathered residual read in the cooperative epilogue overlaps no mainloop: 4096x14336x4096 bf16 "
              "ping-pong 128x128 c2x1 0.770 ms vs the cooperative 128x256 c2x1's 0.823 (bare GEMM 0.712); a "
              "TMA-loaded residual keeps the ranking's cooperative pick (probe-epilogue: 1.0-1.3% faster)"),
    TunedRule("fp8_precise", None, 4096, 1 << 31, 8192,
              GemmConfig(128, 192, cluster_m=2, schedule="cooperative", raster="n"),
              "precise fp8 (sweep-fp8 --modes precise): the one-partial cooperative 128x192 c2x1 was fastest at "
              "8192^3 (tensorwise 0.914 ms, rowwise 0.964; best two-partial 128x128 c2x1 0.932 / 0.992) and "
              "tied or fastest at 4096x14336x4096 (0.422 / 0.447 vs 0.422 / 0.455), where the ranking's 128x128 "
              "c1x2 took 0.951 / 0.451; one-partial tiles otherwise rank last (64x192 ping-pong: 1.33-1.47 ms)"),
)


def tuned_choice(problem: GemmProblem, epilogue=None) -> Optional[GemmConfig]:
    """A measured override for the shape class of ``problem`` and its ``epilogue`` (TUNED_SM90),
    if any and if it fits."""
    if problem.arch != "sm90a":
        return None
    if problem.dtype in ("float16", "bfloat16"):
        operands = "16bit"
    elif (problem.promote_fp8 and problem.dtype == "float8_e4m3fn" and problem.b_dtype is None
          and problem.out_dtype == "bfloat16" and problem.k >= 4096
          and (epilogue is None or not (epilogue.bias or epilogue.residual or epilogue.activation))):
        operands = "fp8_precise"  # only the class the sweep measured: e4m3 -> bf16, scales only, long K
    else:
        return None
    kind = "residual_gathered" if epilogue is not None and epilogue.residual and not epilogue.residual_tma else None
    for rule in TUNED_SM90:
        if (rule.operands == operands and rule.epilogue == kind and rule.min_m <= problem.m <= rule.max_m
                and problem.n >= rule.min_n):
            return rule.config if fits(rule.config, problem, epilogue) else None
    return None
