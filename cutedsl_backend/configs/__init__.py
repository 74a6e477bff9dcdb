"""GEMM kernel configurations: the config value, the per-architecture families (rules, space,
quick set, kernel class), the shared resource model, validity, ranking and measured overrides.

Pure Python (no CuTe DSL import), so the rules can be unit-tested and used to prune Inductor
candidates cheaply. The kernel classes read a :class:`GemmConfig`; nothing else decides tiling.

  config.py     GemmConfig and its name
  resources.py  shared memory per stage, registers, tile counts, split-K workspace, constants
  family.py     ArchFamily: what differs per architecture
  sm90.py       the Hopper family          sm100.py   the Blackwell family
  families.py   the registry (a new architecture: its module plus one line there)
  rules.py      check_config: shared rules, the family's, shared memory
  heuristic.py  the roofline score, its cluster tie-break, the widths that fill the waves
  ranking.py    wide tile, decode, mid-size and swap-AB cost models, the order of choices, default_config
  tuning.py     measured overrides as typed data with their reasons
  measured.py   per-GPU measured config tables for known projections (data in tables/)
"""

from .config import MAX_SPLITS, RASTERS, SCHEDULES, GemmConfig, natural_tile_k
from .families import (
    FAMILIES,
    config_space,
    epilogue_groups,
    epilogue_smem_bytes,
    epilogue_tile,
    family,
    max_stages,
    quick_configs,
    resolve_config,
)
from .ranking import (
    DECODE_MODEL,
    FP8_MID_MODEL,
    MID_MODEL,
    MID_MODELS,
    SWAP_MODEL,
    WIDE_TILE,
    WIDE_TILE_BASE,
    DecodeModel,
    MidModel,
    SwapModel,
    decode_choice,
    default_config,
    dispatched_entry,
    heuristic_score,
    mid_choice,
    operand_class,
    rank_configs,
    swap_choice,
    wave_efficiency,
    wide_tile_choice,
)
from .resources import (
    EPI_STAGES,
    EPI_TILE_N,
    MAX_ACC_REGS_PER_THREAD,
    MAX_ACC_REGS_PER_THREAD_PROMOTED,
    MAX_MMA_N,
    PROMOTED_ACC_COPIES,
    RES_STAGES,
    SM90_MAX_TILE_N,
    SM100_ACC_STAGES,
    SMEM_RESERVED,
    TMEM_COLUMNS,
    acc_regs_per_thread,
    ctas_per_mma,
    k_slices,
    launch_tiles,
    mma_atom_n,
    promoted_acc_copies,
    smem_bytes_per_stage,
    split_k_workspace,
    stream_k_shares,
)
from .rules import check_config, fits, is_valid, kernel_view, valid_configs
from .tuning import TUNED_SM90, TunedRule, tuned_choice

__all__ = [
    "DECODE_MODEL", "EPI_STAGES", "EPI_TILE_N", "FAMILIES", "MAX_ACC_REGS_PER_THREAD",
    "MAX_ACC_REGS_PER_THREAD_PROMOTED", "MAX_MMA_N", "MAX_SPLITS", "MID_MODEL", "MID_MODELS", "FP8_MID_MODEL",
    "PROMOTED_ACC_COPIES",
    "RASTERS", "RES_STAGES", "SCHEDULES", "SM90_MAX_TILE_N", "SM100_ACC_STAGES", "SMEM_RESERVED",
    "SWAP_MODEL", "SwapModel", "TMEM_COLUMNS", "TUNED_SM90", "WIDE_TILE", "WIDE_TILE_BASE", "DecodeModel",
    "GemmConfig", "MidModel",
    "TunedRule", "acc_regs_per_thread", "check_config", "config_space", "ctas_per_mma", "decode_choice",
    "default_config", "dispatched_entry", "epilogue_groups", "epilogue_smem_bytes", "epilogue_tile", "family", "fits",
    "kernel_view",
    "heuristic_score", "is_valid", "k_slices", "launch_tiles", "max_stages", "mid_choice", "operand_class",
    "mma_atom_n",
    "natural_tile_k", "promoted_acc_copies", "quick_configs", "rank_configs", "resolve_config",
    "smem_bytes_per_stage", "split_k_workspace", "stream_k_shares", "swap_choice", "tuned_choice", "valid_configs",
    "wave_efficiency", "wide_tile_choice",
]
