"""Ranking configs for a problem: the heuristic (configs.heuristic), the wide-tile rule, the
few-token and mid-size cost models fitted on H200 measurements, the swap-AB model fitted on H100
measurements, and the measured overrides (configs.tuning); default_config is the pick. Pure Python."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from typing import Optional

from ..problem import GemmProblem, UnsupportedGemmError, dtype_bits, operand_class
from .as_run import as_run
from .config import DECODE_MAX_M, GemmConfig, decode_a_rows, natural_tile_k
from .families import family
from .heuristic import cluster_tie_break, heuristic_score, waves_choice
from .measured import MEASURED
from .resources import launch_tiles, promoted_acc_copies
from .rules import fits, valid_configs
from .tuning import tuned_choice


def _tiles(problem: GemmProblem, cfg: GemmConfig) -> int:
    return math.ceil(problem.m / cfg.tile_m) * math.ceil(problem.n / cfg.tile_n) * problem.batch


@functools.lru_cache(maxsize=4096)
def default_config(problem: GemmProblem, num_sms: int = 132, epilogue=None, gpu: Optional[str] = None) -> GemmConfig:
    """The pick for ``problem`` (with its ``epilogue`` EpilogueSpec) on GPU model ``gpu`` (None:
    unknown): a measured table's entry or override, else the models' and heuristic's best (see
    :func:`rank_configs`), run as configs.as_run's policies say (edge-aligned last tiles, dependent
    launch); memoized."""
    ranked = rank_configs(problem, num_sms=num_sms, epilogue=epilogue, gpu=gpu)
    if not ranked:
        raise UnsupportedGemmError(f"no valid kernel config for {problem.describe()}")
    return as_run(ranked[0], problem, epilogue)


def dispatched_entry(problem: GemmProblem, gpu: Optional[str], epilogue=None) -> Optional[tuple]:
    """(entry, table) of the measured table whose entry the dispatcher runs for ``problem`` on GPU
    model ``gpu`` (configs.measured; checked against :func:`default_config`'s pick, as run, so that
    a report never credits a table with a config the dispatcher did not run); None where none does."""
    found = MEASURED.served(problem, gpu, epilogue)
    if found is None or as_run(found[0].config, problem, epilogue) != default_config(problem, epilogue=epilogue,
                                                                                     gpu=gpu):
        return None
    return found


def rank_configs(problem: GemmProblem, num_sms: int = 132, top_k: Optional[int] = None,
                 epilogue=None, gpu: Optional[str] = None, waves: bool = True) -> list[GemmConfig]:
    """Valid configs for ``problem`` sorted by the heuristic, best first, after the fitted models'
    picks (few-token, mid-size, swap-AB) or a measured override (configs.tuning), a tile width that fills
    the waves better than the pick (configs.heuristic.waves_choice; ``waves=False``: not, for the
    sweeps that time the pick it replaces), and first of all the measured table's entry for GPU
    model ``gpu`` (configs.measured; a borrowed one not where an override applies), where they apply."""
    cands = [c for c in valid_configs(problem) if epilogue is None or fits(c, problem, epilogue)]
    tuned = tuned_choice(problem, epilogue)
    # precise fp8 tiles with one k-tile partial (promoted_acc_copies 2) rank after the overlapped
    # ones, except where a measured override (_TUNED_SM90) picks one
    cands.sort(key=lambda c: (c != tuned, problem.promote_fp8 and promoted_acc_copies(c) == 2,
                              heuristic_score(c, problem, num_sms), cluster_tie_break(c, problem), c.name))
    wide = wide_tile_choice(problem, num_sms, epilogue) if tuned is None else None
    if wide is not None and cands and cands[0].shape == WIDE_TILE_BASE.shape:
        cands.insert(0, wide)  # a tile outside the tuner's space, in place of the one it was measured against
    decode = decode_choice(problem, num_sms, epilogue) if tuned is None else None
    if decode is not None:
        cands.insert(0, decode)  # split-K and short A loads: outside the tuner's space
    mid = mid_choice(problem, num_sms, epilogue) if tuned is None and decode is None else None
    if mid is not None:
        cands.insert(0, mid)
    swap = swap_choice(problem, num_sms, epilogue, cands[0] if cands else None) if tuned is None else None
    if swap is not None:
        cands.insert(0, swap)
    filled = waves_choice(problem, cands[0], num_sms, epilogue) if waves and tuned is None and cands else None
    if filled is not None:
        cands.insert(0, filled)  # a width outside the tuner's space that fills the SMs' waves better
    # this GPU model's own table's entry outranks a measured override too: the override is a
    # shape-class rule, the entry was timed on this GPU at this projection beside the pick the
    # override made (H100 FP8 at 4096 x 14336 x 4096: the table's 128 x 176 0.353 ms, the
    # override's 0.374); a borrowed entry (timed on the lender) does not
    served = MEASURED.served(problem, gpu, epilogue)
    if served is not None and (tuned is None or served[1].gpu == gpu):
        cands.insert(0, served[0].config)
    if epilogue is not None and getattr(epilogue, "gated", None):
        # the choices inserted above were ranked for a plain epilogue: keep those the gated one
        # takes, on the clusters its family offers it
        clusters = family(problem.arch).gated_ranked_clusters
        cands = [c for c in cands if fits(c, problem, epilogue)
                 and (clusters is None or (c.cluster_m, c.cluster_n) in clusters)]
    cands = list(dict.fromkeys(cands))  # an inserted pick is also in the space: once, where it ranks first
    return cands[:top_k] if top_k else cands


@dataclass(frozen=True)
class DecodeModel:
    """The cost model that picks few-token (decode) configs: a launch takes the longer of the
    weights' HBM time and its busiest SM's load time (``waves`` units of ``(tile_n + 16) x K-slice``
    operand bytes at ``sm_gbps``), plus ``split_us`` for a split-K reduction and ``wave_us`` per
    wave. Fitted on the H200 (``python -m cutedsl_backend sweep-decode``: the models' projections x M
    in 1..64, ping-pong 64-row tiles of width 64-256 x 1-8 K slices x A loads of 16/32/64 rows):
    the model's picks measured 0.98 of the best candidate's speed in geomean. The per-SM rate, not
    the HBM, bounds a launch that uses few SMs: so a 64-wide tile on 2/3 of the SMs can beat a
    split-K launch that fills them all."""

    hbm_tbps: float = 4.2
    sm_gbps: float = 55.0
    split_us: float = 1.5
    wave_us: float = 1.0
    max_m: int = DECODE_MAX_M
    widths: tuple = (64, 96, 128, 192, 256)
    splits: tuple = (1, 2, 3, 4, 6, 8)
    a_rows: tuple = (16, 32, 0)

    def candidates(self, arch: str = "sm90a", widths: Optional[tuple] = None) -> list:
        """Ping-pong 64-row tiles of each width (``widths``, else the model's) x K slices x A loads
        of 16 / 32 / all rows."""
        return [GemmConfig(64, tn, schedule="pingpong", splits=s, a_rows=r, arch=arch)
                for tn in widths or self.widths for s in self.splits for r in self.a_rows]

    def sweep_candidates(self, arch: str = "sm90a") -> list:
        """What the tuning sweep (``sweep-decode --space decode``) times for the measured tables:
        :meth:`candidates` and tiles 32 and 160 wide. A 32-wide tile gives a 4096-wide projection
        128 tiles without a K split (its reduction costs ``split_us``), a 160-wide one splits
        widths such as 57344 into whole waves; the model ranks :meth:`candidates` only (these
        widths are unmeasured where no table is)."""
        return self.candidates(arch, tuple(sorted({32, 160, *self.widths})))

    def time_us(self, problem: GemmProblem, tile_n: int, splits: int, num_sms: int) -> float:
        elem = dtype_bits(problem.dtype) / 8
        tile_k = natural_tile_k(problem.dtype)
        k_tiles = math.ceil(problem.k / tile_k)
        units = math.ceil(problem.n / tile_n) * problem.batch * splits
        waves = math.ceil(units / num_sms)
        slice_bytes = (tile_n + 16) * math.ceil(k_tiles / splits) * tile_k * elem
        hbm = problem.n * problem.k * problem.batch * elem / (self.hbm_tbps * 1e6)
        loads = waves * slice_bytes / (self.sm_gbps * 1e3)
        return max(hbm, loads) + self.split_us * (splits > 1) + self.wave_us * waves


DECODE_MODEL = DecodeModel()
# precise FP8 (e4m3, every k-tile added in fp32): also tiles 32 and 160 wide, the 16-bit rates.
# On the H100's FP8 few-token sweep (`tune --fp8-decode-ms 16,32,64`: 29 projections x M = 16,
# 32, 64, every candidate timed against torch._scaled_mm) the picks went from 0.988x to 1.013x in
# geomean (the best candidate per shape 1.026x): 32-wide tiles without a K split where K is at
# most ~4k (4096x4096: 0.85 -> 0.96-1.05), 160-wide ones on the widest weights (57344: 1.02-1.04
# -> 1.08-1.10); with the projections split in halves, each held-out half gained (0.977 -> 1.011,
# 0.999 -> 1.015). Where K is 8-19k some 32-wide picks lose to the 64-wide split ones (up to
# 0.11). The 16-bit sweep's picks would lose with these widths (1.001 -> 0.980): 16-bit keeps its own.
FP8_DECODE_MODEL = DecodeModel(widths=(32, 64, 96, 128, 160, 192, 256))
# the operand classes (operand_class) whose few-token choice a model other than DECODE_MODEL makes
DECODE_MODELS = {"fp8_precise": FP8_DECODE_MODEL}


def decode_choice(problem: GemmProblem, num_sms: int = 132, epilogue=None,
                  model: Optional[DecodeModel] = None) -> Optional[GemmConfig]:
    """sm90a, M <= model.max_m: the ping-pong 64-row tile whose width and K slices (split-K) the
    :class:`DecodeModel` (``model``, else the operand class's in ``DECODE_MODELS``, else
    DECODE_MODEL) ranks fastest, loading only the first 16 or 32 rows of a K-major A when M fits
    in them; None elsewhere (and where nothing fits the problem and ``epilogue``)."""
    model = model or DECODE_MODELS.get(operand_class(problem) or "", DECODE_MODEL)
    if problem.arch != "sm90a" or problem.m > model.max_m:
        return None
    a_rows = decode_a_rows(problem.m, problem.a_major)
    mine = [c for c in model.candidates() if c.a_rows == a_rows]
    ranked = sorted(mine, key=lambda c: (model.time_us(problem, c.tile_n, c.splits, num_sms), c.tile_n, c.splits))
    return next((c for c in ranked if fits(c, problem, epilogue)), None)


def wave_efficiency(cfg: GemmConfig, problem: GemmProblem, num_sms: int = 132) -> float:
    """The useful share of the SM slots a persistent launch of ``cfg`` holds over its waves: the
    output's area over waves x SMs x tile area (a partial last wave and tile padding idle)."""
    waves = math.ceil(_tiles(problem, cfg) / num_sms)
    return problem.m * problem.n * problem.batch / (waves * num_sms * cfg.tile_m * cfg.tile_n)


# Measured on the H200 (`python -m cutedsl_backend probe-tiles wide`, sustained at the power cap, B K-major):
# 128x320 c2x1 (two 160-wide WGMMAs per k-block) did per wave slot what 128x256 c2x1 did, so the
# one that fills its waves better won: 4096x14336x4096 +1.2 to +2.0% (bf16, fp8 fast tensorwise and
# rowwise; wave efficiency 0.987 against 0.970); 8192^3 -0.4 to -1.1% (0.955 against 0.970);
# 4096x4096x14336 -12% (0.776 against 0.970).
WIDE_TILE = GemmConfig(128, 320, cluster_m=2)
WIDE_TILE_BASE = GemmConfig(128, 256, cluster_m=2)


def wide_tile_choice(problem: GemmProblem, num_sms: int = 132, epilogue=None) -> Optional[GemmConfig]:
    """WIDE_TILE in place of WIDE_TILE_BASE (rank_configs) where it is valid (sm90a, B K-major, not
    precise fp8), the epilogue is what was measured (none, or fp8 scales only), the problem spans at
    least two waves of WIDE_TILE_BASE, and WIDE_TILE fills its waves at least 1% better."""
    if problem.arch != "sm90a" or problem.b_major != "k" or _tiles(problem, WIDE_TILE_BASE) < 2 * num_sms:
        return None
    if epilogue is not None and (epilogue.bias or epilogue.residual or epilogue.activation):
        return None
    if not fits(WIDE_TILE, problem, epilogue):
        return None
    gain = wave_efficiency(WIDE_TILE, problem, num_sms) - wave_efficiency(WIDE_TILE_BASE, problem, num_sms)
    return WIDE_TILE if gain >= 0.01 else None


# tiles at least this wide (columns: tokens for a swap-AB tile) run at a schedule's full MMA rate;
# narrower ones at a model's narrow_efficiency, unless the model says otherwise (SwapModel)
FULL_RATE_WIDTH = 128


def wave_roofline_us(model, problem: GemmProblem, cfg: GemmConfig, num_sms: int, efficiency: float,
                     unit_factor: float = 1.0, full_rate_from: int = FULL_RATE_WIDTH) -> float:
    """The per-wave roofline MidModel and SwapModel share, with ``model``'s rates (mac_per_us,
    sm_gbps, hbm_tbps), overheads (wave_us, split_us) and narrow_efficiency: each wave costs the
    slower of a unit's MMA work (tile x K slice over ``efficiency``, times ``narrow_efficiency``
    for tiles narrower than ``full_rate_from``) and its operand loads (A and B panels shared over
    the cluster), times ``unit_factor``; plus ``wave_us`` per wave and ``split_us`` for a split-K
    reduction; never under the operands' HBM time. A swap-AB config's waves are counted on the
    swapped problem it runs."""
    launched = problem.swapped() if cfg.swap_ab and problem.c_major == "n" else problem
    elem = dtype_bits(problem.dtype) / 8
    tile_k = natural_tile_k(problem.dtype)
    waves = math.ceil(launch_tiles(launched, cfg) * cfg.splits / num_sms)
    k_slice = math.ceil(math.ceil(problem.k / tile_k) / cfg.splits) * tile_k
    efficiency *= 1.0 if cfg.tile_n >= full_rate_from else model.narrow_efficiency
    # mac_per_us is the 16-bit rate: the tensor cores do twice the 8-bit MACs per cycle
    rate = model.mac_per_us * efficiency * (2.0 if dtype_bits(problem.dtype) == 8 else 1.0)
    mma = cfg.tile_m * cfg.tile_n * k_slice / rate
    loads = (cfg.tile_m / cfg.cluster_n + cfg.tile_n / cfg.cluster_m) * k_slice * elem / (model.sm_gbps * 1e3)
    hbm = (problem.n * problem.k + problem.m * problem.k + problem.m * problem.n) * problem.batch * elem / (
        model.hbm_tbps * 1e6)
    return max(waves * (max(mma, loads) * unit_factor) + model.split_us * (cfg.splits > 1) + model.wave_us * waves,
               hbm)


@dataclass(frozen=True)
class MidModel:
    """The cost model that picks configs for a few hundred tokens (chunked prefill, batched
    serving), where neither the weights' bandwidth nor the tensor cores alone bound the time and
    the SMs' share of tiles decides most of it. Per wave, the slower of a unit's MMA time (its
    tile x K slice at ``mac_per_us`` per SM, times the schedule's efficiency, less for tiles under
    128 wide) and its operand loads (A and B panels, shared over the cluster by multicast, at
    ``sm_gbps``), plus ``wave_us`` per wave and ``split_us`` for a split-K reduction; never under
    the HBM time of the operands. Fitted (rates in its own units: they rank, they do not predict
    microseconds) on the H200 with ``python -m cutedsl_backend sweep-decode --space mid --ms
    128,192,256,384,512 --models llama3-8b,llama3-70b,qwen2.5-7b,deepseek-v3`` (18 projections x 5 M,
    bf16): its picks measured 0.90x cuBLAS in geomean there, the best candidate per shape 0.94x,
    the heuristic before it 0.78x. 16-bit operands (what was measured)."""

    hbm_tbps: float = 4.2
    mac_per_us: float = 4.5e6
    sm_gbps: float = 100.0
    efficiency: tuple = (("pingpong", 64, 0.8), ("pingpong", 128, 0.8), ("cooperative", 128, 1.0),
                         ("cooperative", 256, 1.0))
    narrow_efficiency: float = 0.85
    split_us: float = 6.0
    wave_us: float = 5.0
    min_m: int = 65
    max_m: int = 512
    # its domain beyond M: batched problems and the gated epilogue too, or one batch, plain epilogues
    batched_and_gated: bool = True

    def time_us(self, problem: GemmProblem, cfg: GemmConfig, num_sms: int) -> float:
        eff = dict(((s, m), e) for s, m, e in self.efficiency)[(cfg.schedule, cfg.tile_m)]
        return wave_roofline_us(self, problem, cfg, num_sms, eff)

    @staticmethod
    def candidates(arch: str = "sm90a") -> list:
        """64- and 128-row tiles, with and without clusters and K slices (raster "n")."""
        out = [GemmConfig(64, tn, schedule="pingpong", splits=s, cluster_m=cm, arch=arch)
               for tn in (128, 192, 256) for s in (1, 2, 3, 4) for cm in (1, 2)]
        out += [GemmConfig(128, tn, schedule="pingpong", splits=s, arch=arch) for tn in (64, 128) for s in (1, 2, 3)]
        out += [GemmConfig(128, tn, splits=s, cluster_m=cl[0], cluster_n=cl[1], arch=arch)
                for tn in (128, 192, 256) for s in (1, 2, 3, 4) for cl in ((1, 1), (2, 1), (1, 2))]
        out += [GemmConfig(256, 128, splits=s, arch=arch) for s in (1, 2)]
        return out

    @classmethod
    def sweep_candidates(cls, arch: str = "sm90a") -> list:
        """What the tuning sweep (``sweep-decode --space mid``) times for the measured tables:
        :meth:`candidates` and 128-row tiles 160 and 224 wide. Those split widths such as 4608 or
        7168 into tile counts that fill their last wave further than the others
        (qwen2.5-7b's 4608 x 3584 at 1024 tokens: 192 tiles of 128 x 192, 1.45 waves; 232 of
        128 x 160, 1.76); and 64 x 64 ping-pong tiles with 1-2 K slices, the few-token sweep's
        tile, which at 128 tokens launches two CTAs per 64 weight rows with no reduction (the 16-bit
        table's pick at 128 tokens on 4096 x 4096 splits K in two). The model ranks
        :meth:`candidates` only (these tiles are unmeasured where no table is)."""
        return cls.candidates(arch) + [GemmConfig(128, tn, cluster_m=cl[0], cluster_n=cl[1], arch=arch)
                                       for tn in (160, 224) for cl in ((1, 1), (2, 1), (1, 2))] + [
            GemmConfig(64, 64, schedule="pingpong", splits=s, arch=arch) for s in (1, 2)]


MID_MODEL = MidModel()

# FP8 e4m3 with fp32 accumulation of every k-tile (torch._scaled_mm's default), 16-bit out. Fitted
# on an H100 with ``python -m cutedsl_backend sweep-decode --dtype fp8_tensorwise --space mid --ms
# 128,192,256,512 --models llama3-8b,qwen2.5-7b`` (8 projections x 4 M, tensorwise scales): its picks
# measured 0.926x torch._scaled_mm in geomean (per M 0.945 / 0.879 / 0.984 / 0.899), the ranking's
# picks before it 0.866x, the 16-bit MidModel's rates (not fitted on these data) 0.903x, the best
# MidModel candidate per shape 0.977x. Mostly a split-K reduction's cost: the K slices' fp32
# partials add to the promoted accumulators' traffic (split_us), so the FP8 picks split K less.
# Its domain is what was measured: one batch, no gated epilogue.
FP8_MID_MODEL = MidModel(mac_per_us=5.0e6, sm_gbps=95.0, narrow_efficiency=0.55, split_us=40.0, wave_us=9.0,
                         min_m=128, max_m=512, batched_and_gated=False)

# the operand classes (operand_class) whose few-hundred-token configs a fitted model picks
MID_MODELS = {"16bit": MID_MODEL, "fp8_precise": FP8_MID_MODEL}


def mid_choice(problem: GemmProblem, num_sms: int = 132, epilogue=None, model: Optional[MidModel] = None
               ) -> Optional[GemmConfig]:
    """sm90a, an operand class with a fitted model (``MID_MODELS``: 16-bit operands, or precise
    FP8 e4m3 with 16-bit out), model.min_m <= M <= model.max_m, and one batch and no gated epilogue
    where the model was measured on those only (``batched_and_gated``; ``model``: the operand
    class's unless given): the candidate the
    :class:`MidModel` ranks fastest among those that fit the problem and ``epilogue``; else None."""
    kind = operand_class(problem)
    model = model or (MID_MODELS.get(kind) if kind is not None else None)
    if problem.arch != "sm90a" or kind is None or model is None or not (model.min_m <= problem.m <= model.max_m):
        return None
    if not model.batched_and_gated and (problem.batch != 1 or (epilogue is not None and epilogue.gated)):
        return None
    ranked = sorted(model.candidates(), key=lambda c: (model.time_us(problem, c, num_sms), c.name))
    return next((c for c in ranked if fits(c, problem, epilogue)), None)


@dataclass(frozen=True)
class SwapModel:
    """The cost model that decides swap-AB (GemmConfig.swap_ab: out^T = b^T @ a^T, the weights
    along the tile's 64/128 rows, the tokens along its N side) for a few hundred tokens, and which
    swap config. A unit (tile x K slice) costs its MMA work over the schedule's efficiency (less
    for tiles under 128 wide), times ``swap_factor`` for a swapped tile; a launch pays that per
    wave plus ``wave_us`` per wave and ``split_us`` for a split-K reduction, never under the HBM
    time of the operands. The same time is computed for the mid-size pick (MidModel) and the
    lower wins.

    Fitted on an H100 (132 SMs, like the H200) with ``python -m cutedsl_backend sweep-decode --space
    swap`` over 16 projections of five models (llama3-8b, qwen2.5-7b, mistral-7b, gemma2-9b,
    phi3-mini) x M in {96, 128, 160, 192, 256} (bf16, nn.Linear layout): choosing between its best
    swap config and the mid-size pick took the geomean against cuBLAS from 0.854 (mid-size picks
    alone) to 0.904, the best measured candidate per shape being 0.932; fitted on three quarters
    of the shapes, the held-out quarter gained 0.02-0.06 each. The choice depends on the efficiency
    ratio and ``swap_factor`` (plateau 0.76-0.80); the rates and overheads move it little (+-25%:
    no change). Per M (geomean vs cuBLAS, mid-size picks -> with this model): 96: 0.844 -> 0.820
    (with the tiles of 128 tokens and up that sweep timed; see SWAP_MODEL for the 96-token tiles
    that start its domain at 96 tokens), 128: 0.908 -> 0.958, 160: 0.722 -> 0.781, 192: 0.852 ->
    0.992, 256: 0.916 -> 0.942 (0.933 before the 64 x 256 ping-pong tile left the candidates). Its
    domain is what was measured and won: sm90a, 16-bit operands, K-major A and B (the nn.Linear
    layout), one batch, ``min_m`` <= M <= ``max_m``."""

    mac_per_us: float = 2.32e6
    sm_gbps: float = 183.0
    pingpong_efficiency: float = 0.83
    cooperative_efficiency: float = 0.80
    narrow_efficiency: float = 0.67
    # tiles at least full_rate_from tokens wide run at the full rate where M is within
    # full_rate_tokens (narrower ones at narrow_efficiency); FULL_RATE_WIDTH and up everywhere
    full_rate_from: int = FULL_RATE_WIDTH
    full_rate_tokens: tuple = (0, 1 << 31)
    exact_widths: tuple = (160,)
    swap_factor: float = 0.78
    split_us: float = 0.9
    wave_us: float = 16.0
    hbm_tbps: float = 3.35
    min_m: int = 128
    max_m: int = 256

    def time_us(self, problem: GemmProblem, cfg: GemmConfig, num_sms: int) -> float:
        """Estimated time of ``cfg`` on the caller's ``problem`` (a swap config runs it swapped)."""
        eff = self.pingpong_efficiency if cfg.schedule == "pingpong" else self.cooperative_efficiency
        lo, hi = self.full_rate_tokens
        full_rate_from = self.full_rate_from if lo <= problem.m <= hi else FULL_RATE_WIDTH
        return wave_roofline_us(self, problem, cfg, num_sms, eff, self.swap_factor if cfg.swap_ab else 1.0,
                                full_rate_from)

    def candidates(self, arch: str = "sm90a") -> list:
        """Swap-AB configs: 128-row cooperative and 64-row ping-pong tiles over the weights; 32-64
        tokens per tile with 2-8 K slices, 128-256 with 1-4 (ping-pong: up to 192); with and
        without a cluster along the weights (what the model was fitted on); and tiles exactly
        ``exact_widths`` tokens wide with 1-2 K slices, so that a token count between the fitted
        widths does not pad to the next one (the H200's swap sweep at 160 tokens: the models'
        192-token tiles 0.776x cuBLAS in geomean, 160-token tiles the fastest candidate on 27 of
        29 shapes, 1.007x). The
        64 x 256 ping-pong tile is left out: on the H100 sweep it was no shape's best swap config
        at 256 tokens (0.63-0.86x cuBLAS), and the H200 validation, where the model picked it at
        256 tokens, measured it below the unswapped pick on each of its ten shapes (0.77-0.89x)."""
        widths = [(tn, s) for tn in (32, 64) for s in (2, 4, 8)] + [(tn, s) for tn in (128, 192, 256)
                                                                   for s in (1, 2, 4)]
        widths += [(tn, s) for tn in self.exact_widths for s in (1, 2)]
        return [GemmConfig(tm, tn, schedule=sched, splits=s, cluster_m=cm, arch=arch, swap_ab=True)
                for tm, sched in ((128, "cooperative"), (64, "pingpong")) for tn, s in widths for cm in (1, 2)
                if not (sched == "pingpong" and tn == 256)]

    @staticmethod
    def sweep_candidates(arch: str = "sm90a") -> list:
        """The swap-AB configs the tuning sweep (``sweep-decode --space swap``) times, for the
        measured tables: tokens per tile exactly 96 and 160 besides 64, 128, 192 and 256 (a token
        count between those otherwise pads to the next width), 1-2 K slices (1-4 at 64 tokens: two
        unsplit 64-token tiles along 128 tokens launch twice the CTAs of one 128-token tile with no
        reduction, as two 96-token tiles did at 192 tokens, the fastest there on most shapes; 4 at
        128 and 192 without a cluster: on the H100's swap sweeps at 96-256 tokens the 32-wide tiles,
        8 slices and the other 4-slice configs were never the fastest and within 2% of it in 1-2 of
        192 rows), and a cluster of two along the tokens (the weights multicast to both) for
        256-384 tokens in two tiles; and 64-row tiles 64-160 tokens wide without K slices in
        clusters of four along the weights (4 x 1, and 4 x 2 with two token tiles; cuBLAS runs
        4 x 2 at 80-160 tokens on 3-3.6k-wide weights), the fastest on most projections of 3-4k x
        3-4k at 96-320 tokens in the H100's cluster sweeps. The models rank :meth:`candidates`
        only: these widths and clusters are unmeasured where no table is."""
        widths = [(64, s) for s in (1, 2, 4)] + [(tn, s) for tn in (96, 128, 160, 192, 256) for s in (1, 2)]
        out = [GemmConfig(tm, tn, schedule=sched, splits=s, cluster_m=cm, arch=arch, swap_ab=True)
               for tm, sched in ((128, "cooperative"), (64, "pingpong")) for tn, s in widths for cm in (1, 2)
               if not (sched == "pingpong" and tn == 256)]
        out += [GemmConfig(tm, tn, schedule=sched, splits=4, arch=arch, swap_ab=True)
                for tm, sched in ((128, "cooperative"), (64, "pingpong")) for tn in (128, 192)]
        out += [GemmConfig(tm, tn, schedule=sched, cluster_n=2, arch=arch, swap_ab=True)
                for tm, sched in ((128, "cooperative"), (64, "pingpong")) for tn in (128, 160, 192)]
        return out + [GemmConfig(64, tn, schedule="pingpong", cluster_m=cm, cluster_n=cn, arch=arch, swap_ab=True)
                      for tn in (64, 96, 128, 160) for cm, cn in family(arch).four_row_clusters]


# 16-bit: swap-AB from 96 tokens with tiles exactly 96 tokens wide, at the full rate up to 128
# tokens. On the H200's swap sweep at 96 tokens (29 projections) the models' unswapped picks
# measured 0.898x cuBLAS and a 96-token swap tile was the fastest candidate on 26 shapes (1.020x for
# the best per shape); with these the picks are that sweep's fastest on 18 shapes, and the 19 whose
# new pick it timed went from 0.902x to 1.039x. Above 128 tokens a 96-token tile runs at the narrow
# rate: at 160 tokens the sweep's fastest were 160-token tiles, and no 16-bit sweep timed 96-token
# tiles at 161-192 tokens, where the picks are at 0.99x.
# Up to 320 tokens (two 160-token tiles): on the H100's sweeps at 320 tokens (`tune`: the mid-size
# and swap-AB spaces, 29 projections) the mid-size picks measured 0.805x cuBLAS and this model's,
# with 320 in its domain, 1.022x (26 shapes gain, 3 lose up to 0.30; the best candidate per shape
# 1.071x). Between 257 and 319 tokens its tiles' last one is partial (configs.edge).
SWAP_MODEL = SwapModel(min_m=96, max_m=320, exact_widths=(96, 160), full_rate_from=96, full_rate_tokens=(96, 128))
# precise FP8 (e4m3, every k-tile added in fp32; bf16 out; scalar scales), the 16-bit model's rates,
# not refitted. Replayed on the H100's fp8 swap sweep (`sweep-decode --space swap --dtype
# fp8_tensorwise --ms 128` and `192`, 29 projections of 8 models; each row times every swap
# candidate and FP8_MID_MODEL's pick against one torch._scaled_mm timing), choosing between its
# swap pick and FP8_MID_MODEL's takes the geomean from 0.893 to 0.925 (128: 0.921 -> 0.930, 192:
# 0.866 -> 0.920; cells below 0.90: 28 -> 18 of 58; the best candidate per shape 0.980). It wins
# most on the narrowest weights (N = 576: 0.58 -> 0.94-0.98) and the large ones at 192 tokens, and
# loses where N is 3-4.6k (192x3584x14336: 0.70 -> 0.40; 4096x4096: 0.79-0.81 -> 0.74). Rates
# grid-searched on four models' projections did not carry to the other four better than these, nor
# did a minimum weight size. Measured at 128 and 192 tokens: its domain.
#
# Its 96- and 160-token tiles, 96 at the full rate: on the H200's fp8 swap sweep at 192 tokens
# (`sweep-decode --space swap --dtype fp8_tensorwise --ms 192`, 29 projections of 8 models, every
# row timing every candidate) the 64 x 192 tiles it picked with the 16-bit model's widths measured
# 0.891x in geomean, two 96-token tiles along the tokens (twice the CTAs, no K split) were the
# fastest candidate on most shapes (the best per shape 1.095x), and with these widths its picks
# measured 0.986x (cells below 0.90: 19 -> 11). 96-token tiles run at the full rate from 161
# tokens only (at 136-160 tokens two of them would pad more than one 160-token tile, unmeasured).
FP8_SWAP_MODEL = SwapModel(max_m=192, exact_widths=(96, 160), full_rate_from=96, full_rate_tokens=(161, 192))
# the operand classes (operand_class) whose swap-AB choice a model makes
SWAP_MODELS = {"16bit": SWAP_MODEL, "fp8_precise": FP8_SWAP_MODEL}


def swap_choice(problem: GemmProblem, num_sms: int = 132, epilogue=None, pick: Optional[GemmConfig] = None,
                model: Optional[SwapModel] = None) -> Optional[GemmConfig]:
    """The swap-AB config the :class:`SwapModel` (``model``, else the operand class's in
    ``SWAP_MODELS``) ranks fastest for ``problem`` and ``epilogue`` (no residual: a swapped output
    is transposed), if it beats ``pick`` (the ranking's choice without swap) in that model; None
    outside the model's domain (sm90a, K-major A and B, one batch, row-major output, model.min_m
    <= M <= model.max_m; 16-bit in and out, or precise e4m3 with bf16 out and scalar scales) and
    where the output's rows are not whole 16-byte vectors (the swapped kernel stores them with TMA,
    in place)."""
    kind = operand_class(problem)
    model = model or (SWAP_MODELS.get(kind) if kind is not None else None)
    if (model is None or problem.arch != "sm90a" or problem.batch != 1
            or problem.a_major != "k" or problem.b_major != "k" or problem.c_major != "n"
            or not (model.min_m <= problem.m <= model.max_m)
            or problem.n * dtype_bits(problem.out_dtype) % 128):
        return None
    if kind == "16bit" and problem.out_dtype != problem.dtype:
        return None
    if kind == "fp8_precise" and (problem.out_dtype != "bfloat16" or epilogue is None
                                  or (epilogue.scale_a, epilogue.scale_b) != ("scalar", "scalar")):
        return None
    times = {c: model.time_us(problem, c, num_sms) for c in model.candidates(problem.arch)}
    best = next((c for c in sorted(times, key=lambda c: (times[c], c.name)) if fits(c, problem, epilogue)), None)
    if best is None or (pick is not None and model.time_us(problem, pick, num_sms) <= times[best]):
        return None
    return best
