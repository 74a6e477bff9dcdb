"""GEMM kernel configurations: the per-architecture config space, validity rules and heuristics.

Pure Python (no CuTe DSL import), so the rules can be unit-tested and used to prune Inductor
candidates cheaply. The kernel classes read a :class:`GemmConfig`; nothing else decides tiling.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re
from dataclasses import dataclass
from typing import Iterable, Optional

from .problem import ARCHS, GemmProblem, UnsupportedGemmError, dtype_bits

# Shared memory per CTA that a kernel may use (bytes): the sm90/sm100 227 KiB opt-in limit.
SMEM_CAPACITY = {"sm90a": 232448, "sm100a": 232448}
# Bytes reserved in shared memory for pipeline barriers and alignment padding.
SMEM_RESERVED = 1024
# Output tiles staged in shared memory per epilogue warp group before their TMA store.
EPI_STAGES = 4
# Epilogue sub-tile width (columns of the CTA tile stored per step).
EPI_TILE_N = 32
# Residual sub-tiles in flight per epilogue warp group when TMA loads them (sm90a): the next
# ones load while the current one is applied. Four: the cooperative epilogue is not overlapped
# with a mainloop, so its loads need the slack; on the 128x256 cooperative and 128x128 ping-pong
# bf16 tiles four cost no more A/B stages than two.
RES_STAGES = 4
# Accumulator registers a thread may hold without spilling (fp32 accumulators): 160 for the
# cooperative 128x320 and ping-pong 128x160 tiles, which compile without local memory.
MAX_ACC_REGS_PER_THREAD = 160
# precise fp8 holds the accumulator three times (the running fp32 sum and two k-tile partials
# that alternate, one in the tensor cores while the other is added) where that fits, else twice
# (one partial: each k-tile's add waits for its WGMMAs; see promoted_acc_copies)
PROMOTED_ACC_COPIES = 3
MAX_ACC_REGS_PER_THREAD_PROMOTED = 192

SCHEDULES = ("cooperative", "pingpong")
RASTERS = ("n", "m")
_NAME_FORM = "<arch>_<schedule>_<M>x<N>x<K|auto>_c<m>x<n>_s<stages|auto>_r<raster><group>[_2cta][_k<splits>][_a<rows>]"
_NAME_RE = re.compile(
    r"(?P<arch>sm90a|sm100a)_(?P<schedule>cooperative|pingpong)_(?P<tm>\d+)x(?P<tn>\d+)x(?P<tk>\d+|auto)"
    r"_c(?P<cm>\d+)x(?P<cn>\d+)_s(?P<stages>\d+|auto)_r(?P<raster>[nm])(?P<group>\d+)(?P<two_cta>_2cta)?"
    r"(?:_k(?P<splits>\d+))?(?:_a(?P<a_rows>\d+))?")
# split-K: at most this many K slices per output tile (each slice's fp32 partial goes through the
# workspace; past 16 the partials' traffic outweighs the weights' on any shape this serves)
MAX_SPLITS = 16


@dataclass(frozen=True)
class GemmConfig:
    """One kernel configuration.

    - ``tile_m`` x ``tile_n`` x ``tile_k``: the CTA tile. ``tile_k`` of 0 means "the natural K tile
      for the dtype" (64 for 16-bit inputs, 128 for fp8).
    - ``cluster_m`` x ``cluster_n``: thread-block cluster; A is multicast along N, B along M.
    - ``schedule``: ``"cooperative"`` (two math warp groups share one tile) or ``"pingpong"``
      (two math warp groups work on alternate tiles, one's epilogue overlapping the other's
      mainloop).
    - ``stages``: shared-memory pipeline depth; 0 means "as many as fit".
    - ``raster``: ``"n"`` sweeps bands of ``group`` tile rows along N (inside a band consecutive
      tiles step down its rows first); ``"m"`` sweeps bands of ``group`` tile columns along M.
      Clusters running together then share operand panels in L2.
    - ``arch``: the target the config was written for (``sm90a`` or ``sm100a``).
    - ``two_cta``: sm100a only, one MMA spread over a CTA pair (cta_group::2).
    - ``splits``: split-K, the K range of every output tile cut into this many slices computed
      by different CTAs; each slice writes its fp32 partial to a workspace, and the CTA that
      finishes a tile's last slice sums the partials in slice order (so the result does not depend
      on which CTA finished last: bitwise deterministic) and runs the epilogue. For problems with
      fewer output tiles than SMs (few tokens against a narrow weight).
    - ``a_rows``: rows of A each load brings (0: ``tile_m``). Fewer, for problems whose M is at
      most ``a_rows``: the rows past M would otherwise be filled out of bounds, load after load
      (TMA's out-of-bounds fill measured slow on the H200); the rows never loaded feed only
      output rows past M, which are never stored. sm90a, K-major A.
    """

    tile_m: int = 128
    tile_n: int = 256
    tile_k: int = 0
    cluster_m: int = 1
    cluster_n: int = 1
    schedule: str = "cooperative"
    stages: int = 0
    raster: str = "n"
    group: int = 8
    arch: str = "sm90a"
    two_cta: bool = False
    splits: int = 1
    a_rows: int = 0

    @property
    def name(self) -> str:
        s = (
            f"{self.arch}_{self.schedule}_{self.tile_m}x{self.tile_n}x{self.tile_k or 'auto'}"
            f"_c{self.cluster_m}x{self.cluster_n}_s{self.stages or 'auto'}_r{self.raster}{self.group}"
        )
        return s + ("_2cta" if self.two_cta else "") + (f"_k{self.splits}" if self.splits != 1 else "") + (
            f"_a{self.a_rows}" if self.a_rows else "")

    def key(self) -> tuple:
        return dataclasses.astuple(self)

    @property
    def shape(self) -> tuple:
        """What the kernel computes per CTA: schedule, tile and cluster (raster order, group,
        stages and tile_k aside; those variants measure within a few percent of each other)."""
        return (self.schedule, self.tile_m, self.tile_n, self.cluster_m, self.cluster_n, self.two_cta, self.splits,
                self.a_rows)

    @classmethod
    def from_name(cls, name: str) -> "GemmConfig":
        """The config whose :attr:`name` is ``name`` (the inverse of ``name``; Inductor's generated
        code carries configs by name)."""
        m = _NAME_RE.fullmatch(name)
        if m is None:
            raise UnsupportedGemmError(f"config name {name!r}: not of the form {_NAME_FORM}")
        g = m.groupdict()
        auto = lambda v: 0 if v == "auto" else int(v)  # noqa: E731
        return cls(tile_m=int(g["tm"]), tile_n=int(g["tn"]), tile_k=auto(g["tk"]), cluster_m=int(g["cm"]),
                   cluster_n=int(g["cn"]), schedule=g["schedule"], stages=auto(g["stages"]), raster=g["raster"],
                   group=int(g["group"]), arch=g["arch"], two_cta=bool(g["two_cta"]),
                   splits=int(g["splits"] or 1), a_rows=int(g["a_rows"] or 0))

    def replace(self, **kw) -> "GemmConfig":
        return dataclasses.replace(self, **kw)

    def resolved(self, problem: GemmProblem, epilogue=None) -> "GemmConfig":
        """The config with tile_k and stages filled in for ``problem``'s dtypes (and the shared
        memory ``epilogue``, an EpilogueSpec, stages)."""
        tile_k = self.tile_k or natural_tile_k(problem.dtype)
        cfg = dataclasses.replace(self, tile_k=tile_k)
        if not cfg.stages:
            cfg = dataclasses.replace(cfg, stages=max_stages(cfg, problem, epilogue))
        return cfg


def natural_tile_k(dtype: str) -> int:
    """128 bytes of K per smem row: the widest (128B) swizzle for the dtype."""
    return 1024 // dtype_bits(dtype)


def epilogue_groups(cfg: GemmConfig) -> int:
    """Warp groups that each own a private set of epilogue buffers."""
    return 2 if (cfg.arch == "sm90a" and cfg.schedule == "pingpong") else 1


def ctas_per_mma(cfg: GemmConfig) -> int:
    """sm100a cta_group::2 spreads one MMA tile over a CTA pair."""
    return 2 if cfg.two_cta else 1


def epilogue_tile(cfg: GemmConfig) -> tuple[int, int]:
    if cfg.arch == "sm90a" and cfg.schedule == "pingpong":
        return (64, EPI_TILE_N)
    return (min(128, cfg.tile_m // ctas_per_mma(cfg)), EPI_TILE_N)


def smem_bytes_per_stage(cfg: GemmConfig, problem: GemmProblem) -> int:
    """Per CTA: its share of the A tile and (conservatively, on sm100a too) the whole B tile."""
    tile_k = cfg.tile_k or natural_tile_k(problem.dtype)
    return (cfg.tile_m // ctas_per_mma(cfg) + cfg.tile_n) * tile_k * dtype_bits(problem.dtype) // 8


def epilogue_smem_bytes(cfg: GemmConfig, problem: GemmProblem, epilogue=None) -> int:
    """The output staging buffers, plus the per-tile vectors ``epilogue`` (an EpilogueSpec)
    stages, per epilogue group."""
    em, en = epilogue_tile(cfg)
    vectors = epilogue.staged_vector_bytes(cfg.tile_m // ctas_per_mma(cfg), cfg.tile_n) if epilogue else 0
    residual = 0
    if epilogue is not None and epilogue.residual_tma and cfg.arch == "sm90a":
        residual = em * en * dtype_bits(epilogue.residual_dtype) // 8 * RES_STAGES
    return (em * en * dtype_bits(problem.out_dtype) // 8 * EPI_STAGES + vectors + residual) * epilogue_groups(cfg)


def max_stages(cfg: GemmConfig, problem: GemmProblem, epilogue=None) -> int:
    cap = SMEM_CAPACITY[cfg.arch] - SMEM_RESERVED - epilogue_smem_bytes(cfg, problem, epilogue)
    return max(0, min(8, cap // smem_bytes_per_stage(cfg, problem)))


# the widest WGMMA (and TMA box) is 256: the one wider tile (sm90a cooperative, SM90_MAX_TILE_N)
# issues two instructions of half the width
MAX_MMA_N = 256
SM90_MAX_TILE_N = 320


def mma_atom_n(cfg: GemmConfig) -> int:
    """The N of one sm90 WGMMA instruction for ``cfg``'s tile (tile_n, or half of it past 256)."""
    return cfg.tile_n if cfg.tile_n <= MAX_MMA_N else cfg.tile_n // 2


def acc_regs_per_thread(cfg: GemmConfig) -> int:
    """fp32 accumulator registers per math thread on sm90 (sm100 keeps them in TMEM)."""
    threads = 128 * (2 if cfg.schedule == "cooperative" else 1)
    return cfg.tile_m * cfg.tile_n // threads


def check_config(cfg: GemmConfig, problem: GemmProblem, epilogue=None) -> None:
    """Raise UnsupportedGemmError naming the first rule ``cfg`` breaks for ``problem`` (with the
    shared memory an ``epilogue`` EpilogueSpec needs)."""
    if cfg.arch not in ARCHS:
        raise UnsupportedGemmError(f"config arch {cfg.arch!r}: must be one of {ARCHS}")
    if cfg.arch != problem.arch:
        raise UnsupportedGemmError(
            f"config arch {cfg.arch} does not match the problem's arch {problem.arch}"
        )
    if cfg.schedule not in SCHEDULES:
        raise UnsupportedGemmError(f"schedule {cfg.schedule!r}: must be one of {SCHEDULES}")
    if cfg.raster not in RASTERS:
        raise UnsupportedGemmError(f"raster {cfg.raster!r}: must be one of {RASTERS}")
    if not (1 <= cfg.group <= 64):
        raise UnsupportedGemmError(f"group {cfg.group}: must be in 1..64")
    if not (1 <= cfg.splits <= MAX_SPLITS):
        raise UnsupportedGemmError(f"splits {cfg.splits}: must be in 1..{MAX_SPLITS}")
    if (cfg.cluster_m, cfg.cluster_n) not in ((1, 1), (2, 1), (1, 2), (2, 2)):
        raise UnsupportedGemmError(
            f"cluster {cfg.cluster_m}x{cfg.cluster_n}: must be 1x1, 2x1, 1x2 or 2x2"
        )
    tile_k = cfg.tile_k or natural_tile_k(problem.dtype)
    if tile_k != natural_tile_k(problem.dtype):
        raise UnsupportedGemmError(
            f"tile_k {tile_k}: must be {natural_tile_k(problem.dtype)} (128 bytes) for {problem.dtype}"
        )
    if cfg.a_rows:
        if cfg.arch != "sm90a" or problem.a_major != "k":
            raise UnsupportedGemmError("a_rows: loading fewer rows of A than the tile is for sm90a with a K-major A")
        if cfg.a_rows % 8 or not (8 <= cfg.a_rows <= min(64, cfg.tile_m)):
            raise UnsupportedGemmError(f"a_rows {cfg.a_rows}: must be a multiple of 8 in 8..{min(64, cfg.tile_m)}")
        if problem.m > cfg.a_rows:
            raise UnsupportedGemmError(
                f"a_rows {cfg.a_rows}: the problem's M={problem.m} is larger (rows past a_rows would not be loaded)")
    if cfg.splits > 1:
        if cfg.arch != "sm90a":
            raise UnsupportedGemmError("splits: split-K is implemented for sm90a only")
        k_tiles = math.ceil(problem.k / tile_k)
        if split_k_workspace(problem, cfg)[1] >= 1 << 31:
            raise UnsupportedGemmError(f"splits {cfg.splits}: the split-K workspace would exceed 2^31 elements")
        if cfg.splits > k_tiles:
            raise UnsupportedGemmError(
                f"splits {cfg.splits}: more K slices than the {k_tiles} k-tiles of K={problem.k} "
                "(a slice would be empty)")
    max_n = SM90_MAX_TILE_N if (cfg.arch == "sm90a" and cfg.schedule == "cooperative") else MAX_MMA_N
    # sm90a takes one epilogue sub-tile wide tiles (few tokens: more tiles to spread the weights over)
    min_n = EPI_TILE_N if cfg.arch == "sm90a" else 2 * EPI_TILE_N
    if cfg.tile_n % EPI_TILE_N or not (min_n <= cfg.tile_n <= max_n):
        raise UnsupportedGemmError(f"tile_n {cfg.tile_n}: must be a multiple of 32 in {min_n}..{max_n}")
    if cfg.arch == "sm90a":
        if cfg.two_cta:
            raise UnsupportedGemmError("two_cta is an sm100a option")
        if MAX_MMA_N < cfg.tile_n != SM90_MAX_TILE_N:
            raise UnsupportedGemmError(
                f"tile_n {cfg.tile_n}: past {MAX_MMA_N} only {SM90_MAX_TILE_N} (two 160-wide WGMMAs)")
        if cfg.tile_n > MAX_MMA_N and problem.b_major != "k":
            raise UnsupportedGemmError(
                f"tile_n {cfg.tile_n}: wider than one WGMMA ({MAX_MMA_N}), it is split in two, which needs B "
                "K-major (an N-major B's 64-column swizzle blocks do not split at the half)")
        allowed_m = (128, 256) if cfg.schedule == "cooperative" else (64, 128)
        if cfg.tile_m not in allowed_m:
            raise UnsupportedGemmError(
                f"tile_m {cfg.tile_m}: the {cfg.schedule} schedule takes tile_m in {allowed_m}"
            )
        if problem.promote_fp8 and not promoted_acc_copies(cfg):
            raise UnsupportedGemmError(
                f"tile {cfg.tile_m}x{cfg.tile_n} ({cfg.schedule}): precise fp8 keeps at least two fp32 "
                f"accumulators, {2 * acc_regs_per_thread(cfg)} registers per thread, over "
                f"{MAX_ACC_REGS_PER_THREAD_PROMOTED} (use fast_accum=True or a smaller tile)"
            )
        if acc_regs_per_thread(cfg) > MAX_ACC_REGS_PER_THREAD:
            raise UnsupportedGemmError(
                f"tile {cfg.tile_m}x{cfg.tile_n} ({cfg.schedule}) needs "
                f"{acc_regs_per_thread(cfg)} accumulator registers per thread, over "
                f"{MAX_ACC_REGS_PER_THREAD} (it would spill)"
            )
    else:
        check_sm100_rules(cfg)
    stages = cfg.stages or max_stages(cfg, problem, epilogue)
    need = stages * smem_bytes_per_stage(cfg, problem) + epilogue_smem_bytes(cfg, problem, epilogue)
    need += SMEM_RESERVED
    if stages < 2 or need > SMEM_CAPACITY[cfg.arch]:
        raise UnsupportedGemmError(
            f"shared memory: {stages} stages of {cfg.tile_m}x{cfg.tile_n}x{tile_k} need {need} bytes,"
            f" over the {SMEM_CAPACITY[cfg.arch]} available (or fewer than 2 stages fit)"
        )


# Tensor memory: 512 fp32 columns per SM; the accumulator is double-buffered (tile_n columns each).
TMEM_COLUMNS = 512
SM100_ACC_STAGES = 2


def check_sm100_rules(cfg: GemmConfig) -> None:
    if cfg.schedule != "cooperative":
        raise UnsupportedGemmError(
            "schedule: sm100a has one schedule (an MMA warp feeding double-buffered tensor memory); "
            "use 'cooperative'")
    allowed_m = (128, 256) if cfg.two_cta else (64, 128)
    if cfg.tile_m not in allowed_m:
        raise UnsupportedGemmError(
            f"tile_m {cfg.tile_m}: sm100a {'2-CTA' if cfg.two_cta else '1-CTA'} MMA takes tile_m in {allowed_m}")
    if cfg.two_cta and cfg.cluster_m % 2:
        raise UnsupportedGemmError("cluster: 2-CTA (cta_group::2) needs cluster_m a multiple of 2")
    if cfg.tile_n * SM100_ACC_STAGES > TMEM_COLUMNS:
        raise UnsupportedGemmError(
            f"tile_n {cfg.tile_n}: {SM100_ACC_STAGES} accumulators need {cfg.tile_n * SM100_ACC_STAGES} "
            f"tensor-memory columns, over {TMEM_COLUMNS}")


def is_valid(cfg: GemmConfig, problem: GemmProblem) -> bool:
    try:
        check_config(cfg, problem)
    except UnsupportedGemmError:
        return False
    return True


def config_space(arch: str = "sm90a") -> list[GemmConfig]:
    """Every config the tuner may consider for ``arch`` (before the per-problem validity check)."""
    out: list[GemmConfig] = []
    if arch == "sm100a":
        for two_cta, tms, clusters in ((False, (64, 128), ((1, 1), (1, 2), (2, 1))),
                                       (True, (128, 256), ((2, 1), (2, 2)))):
            for tm in tms:
                for tn in (64, 128, 192, 256):
                    for cl in clusters:
                        for raster in RASTERS:
                            out.append(GemmConfig(tile_m=tm, tile_n=tn, cluster_m=cl[0], cluster_n=cl[1],
                                                  raster=raster, arch=arch, two_cta=two_cta))
        return out
    if arch == "sm90a":
        for schedule, tms in (("cooperative", (128, 256)), ("pingpong", (64, 128))):
            for tm in tms:
                for tn in (64, 128, 192, 256):
                    for cl in ((1, 1), (2, 1), (1, 2)):
                        for raster in RASTERS:
                            out.append(
                                GemmConfig(
                                    tile_m=tm, tile_n=tn, cluster_m=cl[0], cluster_n=cl[1],
                                    schedule=schedule, raster=raster, arch=arch,
                                )
                            )
    return out


def valid_configs(problem: GemmProblem, space: Optional[Iterable[GemmConfig]] = None) -> list[GemmConfig]:
    return [c for c in (space or config_space(problem.arch)) if is_valid(c, problem)]


def promoted_acc_copies(cfg: GemmConfig) -> int:
    """Precise fp8's fp32 accumulator copies per thread for ``cfg`` (sm90a): 3 (the sum and two
    alternating k-tile partials, so the tensor cores never wait for an add) where they fit in
    MAX_ACC_REGS_PER_THREAD_PROMOTED, else 2 (one partial: each k-tile's add waits for its WGMMAs,
    the other warp group's WGMMAs fill that gap), else 0 (the tile does not fit)."""
    regs = acc_regs_per_thread(cfg)
    return next((c for c in (PROMOTED_ACC_COPIES, 2) if c * regs <= MAX_ACC_REGS_PER_THREAD_PROMOTED), 0)


def _tiles(problem: GemmProblem, cfg: GemmConfig) -> int:
    return math.ceil(problem.m / cfg.tile_m) * math.ceil(problem.n / cfg.tile_n) * problem.batch


def launch_tiles(problem: GemmProblem, cfg: GemmConfig) -> int:
    """CTA tiles a launch of ``cfg`` covers: the tile grid rounded up to whole clusters along M
    and N (the kernels' TileGrid; a cluster's CTAs past the edge load and store nothing but still
    hold an SM)."""
    rows = math.ceil(math.ceil(problem.m / cfg.tile_m) / cfg.cluster_m) * cfg.cluster_m
    cols = math.ceil(math.ceil(problem.n / cfg.tile_n) / cfg.cluster_n) * cfg.cluster_n
    return rows * cols * problem.batch


def split_k_workspace(problem: GemmProblem, cfg: GemmConfig) -> tuple[int, int]:
    """(int32 counters, fp32 elements) of the split-K workspace of ``cfg`` on ``problem``: one
    arrival counter per CTA tile (zero before a launch; the kernel leaves them zero) and one fp32
    partial tile per K slice of every CTA tile. (0, 0) without split-K."""
    if cfg.splits == 1:
        return (0, 0)
    tiles = launch_tiles(problem, cfg)
    return (tiles, tiles * cfg.splits * cfg.tile_m * cfg.tile_n)


def k_slices(k_tiles: int, splits: int) -> list[tuple[int, int]]:
    """The [begin, end) k-tile range of each K slice: as even as integers allow (the kernels
    compute slice s as [s * k_tiles // splits, (s + 1) * k_tiles // splits))."""
    return [(s * k_tiles // splits, (s + 1) * k_tiles // splits) for s in range(splits)]


def heuristic_score(cfg: GemmConfig, problem: GemmProblem, num_sms: int = 132) -> float:
    """Estimated relative time (lower is better) of ``cfg`` on ``problem``.

    A roofline per wave: each wave of persistent tiles costs the larger of its math time and
    its operand traffic; partial last waves and tile padding are paid in full. Larger tiles read
    less operand data per flop, clusters cut L2->SM traffic by multicasting.
    """
    tiles = _tiles(problem, cfg)
    waves = math.ceil(tiles / num_sms)
    tile_k = cfg.tile_k or natural_tile_k(problem.dtype)
    k_pad = math.ceil(problem.k / tile_k) * tile_k
    math_per_tile = cfg.tile_m * cfg.tile_n * k_pad
    mcast_a = cfg.cluster_n
    mcast_b = cfg.cluster_m
    bytes_per_tile = (cfg.tile_m / mcast_a + cfg.tile_n / mcast_b) * k_pad * dtype_bits(problem.dtype) / 8
    # ~ bf16 dense rate per SM vs L2 bandwidth per SM: one byte per ~ 128 MACs balances them.
    per_tile = max(math_per_tile, bytes_per_tile * 160)
    # pingpong hides the epilogue; cooperative pays it, more so when K is short.
    epi = cfg.tile_m * cfg.tile_n * (2 if cfg.schedule == "cooperative" else 0.5) * 16
    # small tiles waste issue slots on the tensor cores
    eff = 1.0 if cfg.tile_m * cfg.tile_n >= 128 * 128 else 1.12
    return waves * (per_tile * eff + epi)


@functools.lru_cache(maxsize=4096)
def default_config(problem: GemmProblem, num_sms: int = 132, epilogue=None) -> GemmConfig:
    """The pick for ``problem`` (with its ``epilogue`` EpilogueSpec): a measured override, else the
    heuristic's best (see :func:`heuristic_score`); memoized."""
    ranked = rank_configs(problem, num_sms=num_sms, epilogue=epilogue)
    if not ranked:
        raise UnsupportedGemmError(f"no valid kernel config for {problem.describe()}")
    return ranked[0]


def rank_configs(problem: GemmProblem, num_sms: int = 132, top_k: Optional[int] = None,
                 epilogue=None) -> list[GemmConfig]:
    """Valid configs for ``problem`` sorted by the heuristic, best first (measured overrides for
    the problem and its ``epilogue`` first)."""
    cands = [c for c in valid_configs(problem) if epilogue is None or _fits(c, problem, epilogue)]
    tuned = tuned_choice(problem, epilogue)
    # precise fp8 tiles with one k-tile partial (promoted_acc_copies 2) rank after the overlapped
    # ones, except where a measured override (_TUNED_SM90) picks one
    cands.sort(key=lambda c: (c != tuned, problem.promote_fp8 and promoted_acc_copies(c) == 2,
                              heuristic_score(c, problem, num_sms), c.name))
    wide = wide_tile_choice(problem, num_sms, epilogue) if tuned is None else None
    if wide is not None and cands and cands[0].shape == WIDE_TILE_BASE.shape:
        cands.insert(0, wide)  # a tile outside the tuner's space, in place of the one it was measured against
    decode = decode_choice(problem, num_sms, epilogue) if tuned is None else None
    if decode is not None:
        cands.insert(0, decode)  # split-K and short A loads: outside the tuner's space
    mid = mid_choice(problem, num_sms, epilogue) if tuned is None and decode is None else None
    if mid is not None:
        cands.insert(0, mid)
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
    max_m: int = 64
    widths: tuple = (64, 96, 128, 192, 256)
    splits: tuple = (1, 2, 3, 4, 6, 8)

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


def decode_choice(problem: GemmProblem, num_sms: int = 132, epilogue=None,
                  model: DecodeModel = DECODE_MODEL) -> Optional[GemmConfig]:
    """sm90a, M <= model.max_m: the ping-pong 64-row tile whose width and K slices (split-K) the
    :class:`DecodeModel` ranks fastest, loading only the first 16 or 32 rows of a K-major A when M
    fits in them; None elsewhere (and where nothing fits the problem and ``epilogue``)."""
    if problem.arch != "sm90a" or problem.m > model.max_m:
        return None
    a_rows = 0
    if problem.a_major == "k":
        a_rows = 16 if problem.m <= 16 else 32 if problem.m <= 32 else 0
    ranked = sorted((model.time_us(problem, tn, s, num_sms), tn, s) for tn in model.widths for s in model.splits)
    for _, tn, s in ranked:
        cfg = GemmConfig(64, tn, schedule="pingpong", splits=s, a_rows=a_rows)
        if _fits(cfg, problem, epilogue):
            return cfg
    return None


def _fits(cfg: GemmConfig, problem: GemmProblem, epilogue) -> bool:
    try:
        check_config(cfg, problem, epilogue)
    except UnsupportedGemmError:
        return False
    return True


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
    if not _fits(WIDE_TILE, problem, epilogue):
        return None
    gain = wave_efficiency(WIDE_TILE, problem, num_sms) - wave_efficiency(WIDE_TILE_BASE, problem, num_sms)
    return WIDE_TILE if gain >= 0.01 else None


def tuned_choice(problem: GemmProblem, epilogue=None) -> Optional[GemmConfig]:
    """A measured override for the shape class of ``problem`` and its ``epilogue`` (rules in
    _TUNED_SM90), if any."""
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
    for rule in _TUNED_SM90:
        if (rule.get("operands", "16bit") == operands and rule.get("epilogue") == kind
                and rule["min_m"] <= problem.m <= rule["max_m"] and problem.n >= rule["min_n"]):
            cfg = GemmConfig(**rule["config"])
            return cfg if _fits(cfg, problem, epilogue) else None
    return None


# Overrides measured with `python -m cutedsl_backend sweep` / `sweep-epilogue` / `sweep-fp8` on the
# H200: rules {"operands" ("16bit", the default, or "fp8_precise"), "epilogue" (None or
# "residual_gathered"), "min_m", "max_m", "min_n", "config": {...}}. Plain
# GEMMs: the heuristic alone decides (its picks for the prefill shapes measured within 1-4% of the
# sweep's best on 2026-12-02). A gathered residual (misaligned) read in the cooperative schedule's
# epilogue is not overlapped with any mainloop, so there ping-pong wins: 4096x14336x4096 bf16
# ping-pong 128x128 c2x1 0.770 ms against the cooperative 128x256 c2x1's 0.823
# (bare GEMM 0.712). A TMA-loaded residual takes the heuristic's cooperative pick: a
# sweep and interleaved A/B (`python -m cutedsl_backend probe-epilogue`) measured it 1.0-1.3% faster than ping-pong.
# Precise fp8 (`sweep-fp8 --modes precise`): the one-partial cooperative 128x192
# c2x1 was the fastest config at 8192^3 (tensorwise 0.914 ms, rowwise 0.964; the best two-partial
# tile, 128x128 c2x1, 0.932 / 0.992) and tied or fastest at 4096x14336x4096 (0.422 / 0.447 against
# 0.422 / 0.455), where the heuristic's pick, 128x128 c1x2, took 0.951 / 0.451 ms (tensorwise).
# The one-partial ping-pong 64x192 took 1.33-1.47 ms at 8192^3: one-partial tiles otherwise still
# rank last (rank_configs). The rule covers what was swept: e4m3 x e4m3 -> bf16 with scales only
# (no bias, residual or activation) and K >= 4096 (tuned_choice checks those).
_TUNED_SM90: list[dict] = [
    {"epilogue": "residual_gathered", "min_m": 1024, "max_m": 1 << 31, "min_n": 4096,
     "config": {"tile_m": 128, "tile_n": 128, "cluster_m": 2, "schedule": "pingpong"}},
    {"operands": "fp8_precise", "epilogue": None, "min_m": 4096, "max_m": 1 << 31, "min_n": 8192,
     "config": {"tile_m": 128, "tile_n": 192, "cluster_m": 2, "schedule": "cooperative", "raster": "n"}},
]


def quick_configs(arch: str = "sm90a") -> list[GemmConfig]:
    """The configs every CI run compiles: both schedules, clusters, small and large tiles."""
    if arch == "sm90a":
        return [
            GemmConfig(128, 256, cluster_m=2, schedule="cooperative"),
            GemmConfig(128, 128, cluster_n=2, schedule="cooperative", raster="m"),
            GemmConfig(256, 128, schedule="cooperative"),
            GemmConfig(128, 128, schedule="pingpong"),
            GemmConfig(64, 256, cluster_m=2, schedule="pingpong"),
            GemmConfig(64, 64, schedule="pingpong", raster="m", group=1),
        ]
    return [
        GemmConfig(128, 192, arch="sm100a"),
        GemmConfig(128, 128, cluster_n=2, arch="sm100a", raster="m"),
        GemmConfig(64, 128, cluster_n=2, arch="sm100a", group=1),
        GemmConfig(256, 128, cluster_m=2, arch="sm100a", two_cta=True),
        GemmConfig(256, 192, cluster_m=2, arch="sm100a", two_cta=True),
    ]


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

    def time_us(self, problem: GemmProblem, cfg: GemmConfig, num_sms: int) -> float:
        elem = dtype_bits(problem.dtype) / 8
        tile_k = natural_tile_k(problem.dtype)
        waves = math.ceil(launch_tiles(problem, cfg) * cfg.splits / num_sms)
        k_slice = math.ceil(math.ceil(problem.k / tile_k) / cfg.splits) * tile_k
        eff = dict(((s, m), e) for s, m, e in self.efficiency)[(cfg.schedule, cfg.tile_m)]
        eff *= 1.0 if cfg.tile_n >= 128 else self.narrow_efficiency
        mma = cfg.tile_m * cfg.tile_n * k_slice / (self.mac_per_us * eff)
        loads = (cfg.tile_m / cfg.cluster_n + cfg.tile_n / cfg.cluster_m) * k_slice * elem / (self.sm_gbps * 1e3)
        hbm = (problem.n * problem.k + problem.m * problem.k + problem.m * problem.n) * problem.batch * elem / (
            self.hbm_tbps * 1e6)
        return max(waves * max(mma, loads) + self.split_us * (cfg.splits > 1) + self.wave_us * waves, hbm)

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


MID_MODEL = MidModel()


def mid_choice(problem: GemmProblem, num_sms: int = 132, epilogue=None, model: MidModel = MID_MODEL
               ) -> Optional[GemmConfig]:
    """sm90a, 16-bit operands, model.min_m <= M <= model.max_m: the candidate the
    :class:`MidModel` ranks fastest among those that fit the problem and ``epilogue``; else None."""
    if problem.arch != "sm90a" or not (model.min_m <= problem.m <= model.max_m) or dtype_bits(problem.dtype) != 16:
        return None
    ranked = sorted(model.candidates(), key=lambda c: (model.time_us(problem, c, num_sms), c.name))
    return next((c for c in ranked if _fits(c, problem, epilogue)), None)
