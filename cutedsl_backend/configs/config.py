"""The config value: what a compiled kernel's tiling is (tile, cluster, schedule, stages, raster,
split-K, A rows), its name (Inductor's generated code carries configs by name) and the natural K
tile per dtype. Pure Python."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from ..problem import UnsupportedGemmError, dtype_bits

SCHEDULES = ("cooperative", "pingpong")
RASTERS = ("n", "m")
_NAME_FORM = ("<arch>_<schedule>_<M>x<N>x<K|auto>_c<m>x<n>_s<stages|auto>_r<raster><group>[_2cta][_k<splits>]"
              "[_a<rows>][_swap][_edge][_sk][_pdl]")
_NAME_RE = re.compile(
    r"(?P<arch>sm90a|sm100a)_(?P<schedule>cooperative|pingpong)_(?P<tm>\d+)x(?P<tn>\d+)x(?P<tk>\d+|auto)"
    r"_c(?P<cm>\d+)x(?P<cn>\d+)_s(?P<stages>\d+|auto)_r(?P<raster>[nm])(?P<group>\d+)(?P<two_cta>_2cta)?"
    r"(?:_k(?P<splits>\d+))?(?:_a(?P<a_rows>\d+))?(?P<swap_ab>_swap)?(?P<edge>_edge)?(?P<stream_k>_sk)?(?P<pdl>_pdl)?")
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
    - ``swap_ab``: compute out^T = b^T @ a^T (GemmProblem.swapped): the weights fill the tile's M
      side (64-row WGMMAs) and the tokens its N side, which takes any multiple of 8 (a few hundred
      tokens in one tile, no rows wasted); the kernel stores the column-major out^T, which is the
      row-major out. The tile and cluster fields then describe the swapped problem. sm90a (sm100a:
      compile-verified).
    - ``edge``: the last tile along M and along N starts where it ends at the output's edge (it
      overlaps the tile before it, whose rows it computes again and stores with the same values)
      instead of reaching past it, so no load of A or B reaches past M or N where the extent is
      at least a tile (a K tail still does). TMA's out-of-bounds fill is slow: on the H100 a
      swap-AB launch at 288 tokens (its last 160-token tile 32 rows short) took 1.48x its time at
      320. sm90a; the dispatcher takes it where configs.edge's policy says so.
    - ``stream_k``: the launch's k-tiles (every tile's K range, tile after tile) dealt out evenly
      over the persistent clusters, one contiguous share each, so every SM has the same work
      whatever the tile count (split-K cuts each tile alike, and a tile count just past a wave
      leaves most SMs idle for a second one). A tile whose K range more than one share covers
      is summed as split-K's are (fp32 partials through the workspace, added in share order by
      whichever finishes last: bitwise deterministic for a given GPU, whose SM count sets the
      shares). sm90a, without ``splits``.
    - ``pdl``: launched as a programmatic dependent launch, so the kernel's prologue (barrier
      setup, descriptor prefetch) runs while the kernel before it on the stream finishes; the
      kernel waits for that one's results (``griddepcontrol.wait``) before its first global
      memory access, and lets the next one start once its loads are issued. What a short launch
      pays per call, not what it computes. Both families (sm100a: compile-verified); the
      dispatcher's policy (configs.as_run) takes it on sm90a, where it is measured.
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
    swap_ab: bool = False
    edge: bool = False
    stream_k: bool = False
    pdl: bool = False

    @property
    def name(self) -> str:
        s = (
            f"{self.arch}_{self.schedule}_{self.tile_m}x{self.tile_n}x{self.tile_k or 'auto'}"
            f"_c{self.cluster_m}x{self.cluster_n}_s{self.stages or 'auto'}_r{self.raster}{self.group}"
        )
        return s + ("_2cta" if self.two_cta else "") + (f"_k{self.splits}" if self.splits != 1 else "") + (
            f"_a{self.a_rows}" if self.a_rows else "") + ("_swap" if self.swap_ab else "") + (
            "_edge" if self.edge else "") + ("_sk" if self.stream_k else "") + ("_pdl" if self.pdl else "")

    def key(self) -> tuple:
        t = dataclasses.astuple(self)
        # the fields added last (swap_ab, edge, stream_k, pdl) only up to the last one set: the
        # keys of configs without them are the keys that predate them
        added = [self.swap_ab, self.edge, self.stream_k, self.pdl]
        while added and not added[-1]:
            added.pop()
        return t[:len(t) - 4 + len(added)]

    @property
    def shape(self) -> tuple:
        """What the kernel computes per CTA: schedule, tile and cluster (raster order, group,
        stages and tile_k aside; those variants measure within a few percent of each other)."""
        return (self.schedule, self.tile_m, self.tile_n, self.cluster_m, self.cluster_n, self.two_cta, self.splits,
                self.a_rows, self.swap_ab, self.edge, self.stream_k)

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
                   splits=int(g["splits"] or 1), a_rows=int(g["a_rows"] or 0), swap_ab=bool(g["swap_ab"]),
                   edge=bool(g["edge"]), stream_k=bool(g["stream_k"]), pdl=bool(g["pdl"]))

    def replace(self, **kw) -> "GemmConfig":
        return dataclasses.replace(self, **kw)

    def tiling(self) -> "GemmConfig":
        """This config as tables and tuning sweeps name it: without how the dispatcher runs it
        (``edge``, ``pdl``: configs.as_run's policies, layered on whichever config is picked; a
        load of A that policy fitted to M keeps its rows)."""
        return dataclasses.replace(self, edge=False, pdl=False)


def natural_tile_k(dtype: str) -> int:
    """128 bytes of K per smem row: the widest (128B) swizzle for the dtype."""
    return 1024 // dtype_bits(dtype)


# the most tokens a few-token (decode) config serves: one 64-row tile along M
DECODE_MAX_M = 64


# A loads shorter than one 8-row swizzle atom (GemmConfig.a_rows): the few-token loads at 1-8 tokens
SHORT_A_ROWS = (1, 2, 4)


def fitted_a_rows(m: int) -> int:
    """The fewest rows of A a load may bring for ``m`` tokens: the power of two at or above ``m``
    up to 8 (1, 2, 4, 8), else 0 (no shorter load than the config's own)."""
    return next((r for r in (*SHORT_A_ROWS, 8) if m <= r), 0)


def decode_a_rows(m: int, a_major: str = "k") -> int:
    """The rows of A a few-token config loads for ``m`` tokens (GemmConfig.a_rows): 16 up to 16
    tokens, 32 up to 32 (a K-major A only), else the whole 64-row tile (0)."""
    if a_major != "k" or m > 32:
        return 0
    return 16 if m <= 16 else 32
