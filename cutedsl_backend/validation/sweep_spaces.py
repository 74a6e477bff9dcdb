"""The candidate spaces of the tuning sweeps (``sweep-decode --space``), the operands a sweep row
measures, and how sweep files are read. Pure Python."""

from __future__ import annotations

from ..configs.heuristic import WAVE_WIDTHS


def decode_candidates(arch: str = "sm90a") -> list:
    """The few-token configs the decode sweep times: configs.DecodeModel.sweep_candidates (each M
    times those loading the rows of A that configs.decode_a_rows gives it)."""
    from ..configs import DECODE_MODEL

    return DECODE_MODEL.sweep_candidates(arch)


def mid_candidates(arch: str = "sm90a") -> list:
    """Configs for a few hundred tokens: configs.MidModel.sweep_candidates (the tables' space; the
    model ranks its own :meth:`~cutedsl_backend.configs.MidModel.candidates`)."""
    from ..configs import MidModel

    return MidModel.sweep_candidates(arch)


def swap_candidates(arch: str = "sm90a") -> list:
    """Swap-AB configs: configs.SwapModel.sweep_candidates (the tables' space; the model ranks its
    own :meth:`~cutedsl_backend.configs.SwapModel.candidates`, which the sweep adds where picked)."""
    from ..configs import SwapModel

    return SwapModel.sweep_candidates(arch)


def prior_candidates(prior, n: int, k: int, m: int) -> list:
    """The configs a ``prior`` table (configs.measured.MeasuredTable, measured on another GPU) names
    for projection (n, k) near ``m`` tokens, each also with the clusters 1x1, 2x1 and 1x2, and a
    64-row swap-AB tile up to 160 tokens wide without K slices also with 4x1 and 4x2 (where the
    H100's cluster sweeps found those fastest): the candidates of a sweep that re-measures that
    table on this GPU (a dozen or two per cell instead of the whole space; which cluster wins moved
    between the H100 and H200). Near: up to 64 tokens the few-token entry that would serve ``m``
    (the smallest measured M at or above it loading the same rows of A, configs.decode_a_rows),
    else the entries measured within a factor 2 of ``m``."""
    from ..configs.config import DECODE_MAX_M, decode_a_rows

    mine = [e for e in prior.entries if (e.n, e.k) == (n, k) and e.config is not None]
    if m <= DECODE_MAX_M:
        serving = [e for e in mine if m <= e.m <= DECODE_MAX_M and decode_a_rows(e.m) == decode_a_rows(m)]
        near = [min(serving, key=lambda e: e.m).config.tiling()] if serving else []
    else:
        near = [e.config.tiling() for e in mine if m / 2 <= e.m <= 2 * m]
    return list(dict.fromkeys(c.replace(cluster_m=cm, cluster_n=cn) for c in near
                              for cm, cn in ((c.cluster_m, c.cluster_n), (1, 1), (2, 1), (1, 2))
                              + (four_row_clusters(c.arch) if _four_row_candidate(c) else ())))


def four_row_clusters(arch: str = "sm90a") -> tuple:
    """The clusters of four row tiles ``arch``'s kernel takes (configs.family; none on sm100a)."""
    from ..configs.families import family

    return family(arch).four_row_clusters


def _four_row_candidate(cfg) -> bool:
    """Whether a prior sweep also times ``cfg`` in clusters of four weight tiles: a 64-row swap-AB
    tile up to 160 tokens wide without K slices (:func:`cluster_candidates`' kind)."""
    return cfg.swap_ab and cfg.tile_m == 64 and cfg.splits == 1 and cfg.tile_n <= CLUSTER_WIDTHS[-1]


# the token widths of the 64-row swap-AB tiles clustered four along the weights (80: in 4 x 2
# clusters 4-5% faster than the FP8 picks at 144 tokens on 4608 x 3584 and 320 on 9216 x 3072,
# 10% there with 10 stages; H100 probes)
CLUSTER_WIDTHS = (32, 64, 80, 96, 128, 160)
# and of the 128-row ones, above this many tokens (96: in 2 x 1 clusters 18-19% faster than the
# FP8 picks at 288 tokens on 4608 x 3584 and 10240 x 8192, H100 probes)
WIDE_CLUSTER_WIDTHS = (96, 128, 160, 192, 256)
WIDE_CLUSTER_FROM = 192
# the most token tiles a cluster sweep's candidate cuts the tokens into
CLUSTER_MAX_TOKEN_TILES = 4


def cluster_candidates(prior, n: int, k: int, m: int, dtype: str = "bfloat16") -> list:
    """The configs of a sweep that tries four-row clusters (:func:`four_row_clusters`: 4x1 and 4x2)
    against a table's choice: the entry of ``prior`` (this GPU's table) serving (n, k) at ``m``
    tokens, if any, then 64-row ping-pong swap-AB tiles of each :data:`CLUSTER_WIDTHS` width that
    cuts the tokens into at most :data:`CLUSTER_MAX_TOKEN_TILES` tiles, without a cluster and with
    4 x 1 and 4 x 2 (four weight tiles share the tokens' panel by multicast, the two token tiles of
    4 x 2 the weights'), no K slices: the shape cuBLAS ran at 80-160 tokens on the H100's 3072- and
    3584-wide weights (nvjet 64 x W tiles in 4 x 2 clusters, no split-K: ``probe-configs
    --peer-kernels``). Above :data:`WIDE_CLUSTER_FROM` tokens also 128-row cooperative swap tiles
    of each :data:`WIDE_CLUSTER_WIDTHS` width within as many tiles, in 2 x 1, 4 x 1 and 4 x 2
    (cuBLAS ran 256 x 96 in 4 x 1 at 288 tokens on 10240 x 8192). Up to 64 tokens instead one token
    tile 16, 32, 48 or 64 wide holding them all, over 64-row weight tiles in 1 x 1, 2 x 1 and 4 x 1
    clusters, with one or two K slices (cuBLAS ran 64 x 16 tiles in 4 x 1 clusters at 16 tokens;
    such an entry serves every M of its few-token range, configs.measured.same_decode_work)."""
    from ..configs import GemmConfig
    from ..configs.config import DECODE_MAX_M

    problem, spec = sweep_problem(dtype, m, n, k)
    entry = prior.entry(problem, spec) if prior is not None else None
    out = [entry.config.tiling()] if entry is not None else []
    four = four_row_clusters(problem.arch)
    if m <= DECODE_MAX_M:
        # one token tile as wide as the tokens (16, 32, 48 or 64), the weights in 64-row
        # tiles alone or in 2 x 1 / 4 x 1 clusters, with and without two K slices
        w = -(-m // 16) * 16
        return list(dict.fromkeys(out + [
            GemmConfig(64, w, schedule="pingpong", cluster_m=cm, splits=s, swap_ab=True)
            for cm in (1, 2, four[0][0] if four else 1) for s in (1, 2)]))
    out += [GemmConfig(64, w, schedule="pingpong", cluster_m=cm, cluster_n=cn, swap_ab=True)
            for w in CLUSTER_WIDTHS if -(-m // w) <= CLUSTER_MAX_TOKEN_TILES for cm, cn in ((1, 1), *four)]
    if m > WIDE_CLUSTER_FROM:
        out += [GemmConfig(128, w, cluster_m=cm, cluster_n=cn, swap_ab=True)
                for w in WIDE_CLUSTER_WIDTHS if -(-m // w) <= CLUSTER_MAX_TOKEN_TILES for cm, cn in ((2, 1), *four)]
    return list(dict.fromkeys(out))


# a width is tried where the share of the SMs' wave slots it fills (configs.wave_efficiency, which
# counts neither cluster padding nor K slices) exceeds the cell's baseline's by this much
WAVE_GAIN = 0.02


def wave_candidates(prior, n: int, k: int, m: int, dtype: str = "bfloat16", num_sms: int = 132) -> list:
    """The configs of a sweep that tries tile widths cutting a projection into whole waves
    (``sweep-decode --space waves``) against a table's choice: the entry of ``prior`` (this GPU's
    table) serving (n, k) at ``m`` tokens, if any (and the models' pick where that entry was
    measured at another M), else the models' pick (and the pick without the models' waves width,
    configs.heuristic.waves_choice, where that took it), then 128-row cooperative
    tiles of each :data:`WAVE_WIDTHS` width, without a cluster and in 2 x 1 and 1 x 2, where the
    width's wave efficiency (configs.wave_efficiency over ``num_sms``) exceeds the entry's (else
    the pick's) by more than :data:`WAVE_GAIN`. Where few tiles make the waves
    (a few hundred tokens on 4608 x 3584, 576 x 7168 at 4096) a width off the 64-column grid is
    how cuBLAS keeps every SM busy."""
    from ..configs import GemmConfig, default_config, rank_configs, wave_efficiency

    problem, spec = sweep_problem(dtype, m, n, k)
    entry = prior.entry(problem, spec) if prior is not None else None
    pick = default_config(problem, num_sms, spec).tiling()
    base = entry.config.tiling() if entry is not None else pick
    target = wave_efficiency(base, problem.swapped() if base.swap_ab else problem, num_sms) + WAVE_GAIN
    # an entry measured at another M (it serves up to sqrt(2) below its own) is weighed against the
    # models' pick here too: a width that won at 1024 tokens can lose at 896 (H100, fp8 7168 x 16384);
    # and a pick the models' waves width took (configs.heuristic.waves_choice), against the pick it replaced
    models = [pick, rank_configs(problem, num_sms, epilogue=spec, waves=False)[0].tiling()]
    out = [base] + (models if entry is None or entry.m != m else [])
    for w in WAVE_WIDTHS:
        tile = GemmConfig(128, w)
        if wave_efficiency(tile, problem, num_sms) > target:
            out += [tile.replace(cluster_m=cm, cluster_n=cn) for cm, cn in ((1, 1), (2, 1), (1, 2))]
    return list(dict.fromkeys(out))


def sweep_problem(dtype: str, m: int, n: int, k: int):
    """(problem, epilogue spec) a ``sweep-decode`` row of ``dtype`` (:data:`SWEEP_OPERANDS`) times:
    nn.Linear's layout on sm90a, bf16 out; e4m3 with scalar scales for the fp8 dtypes."""
    from ..configs.measured import SWEEP_OPERANDS
    from ..epilogue import EpilogueSpec
    from ..problem import GemmProblem

    if dtype not in SWEEP_OPERANDS:
        raise ValueError(f"sweep row dtype {dtype!r}: one of {', '.join(SWEEP_OPERANDS)}")
    fp8 = dtype.startswith("fp8")
    problem = GemmProblem(m, n, k, 1, "float8_e4m3fn" if fp8 else "bfloat16", "bfloat16", "k", "k", "sm90a",
                          fast_accum=dtype == "fp8_tensorwise_fast")
    return problem, (EpilogueSpec(scale_a="scalar", scale_b="scalar") if fp8 else None)


def read_json(path):
    """The JSON in ``path``, gzip-compressed where its name ends in ``.gz`` (as stored results are)."""
    import gzip
    import json

    with (gzip.open if str(path).endswith(".gz") else open)(path, "rt") as f:
        return json.load(f)


def load_sweep_rows(paths) -> list:
    """The rows of ``sweep-decode --json`` files (``.json`` or ``.json.gz``)."""
    return [row for path in paths for row in read_json(path)]
