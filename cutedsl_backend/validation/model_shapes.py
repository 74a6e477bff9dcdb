"""The shapes users run: linear projections of public model families x the whole token range.

A projection ``y = x @ W^T`` of an ``nn.Linear(K, N)`` is a GEMM (M, N, K) with M the number of
tokens in the step (decode: the batch; prefill: the prompt chunk) and B = W^T, K-major. Sizes are
from the models' published configurations (hidden size, heads x head dim, intermediate size); fused
projections (q|k|v, gate|up) are one GEMM as serving stacks run them.

Pure Python: the sweep (``shape_sweep``), the perf gate and their tests read these lists.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional


@dataclass(frozen=True)
class Projection:
    model: str
    name: str
    n: int
    k: int

    @property
    def label(self) -> str:
        return f"{self.model} {self.name} {self.n}x{self.k}"


def _family(model: str, **projections) -> list:
    return [Projection(model, name, n, k) for name, (n, k) in projections.items()]


# (N, K) per projection; qkv = (heads + 2 kv heads) x head dim, gate_up = 2 x intermediate
MODEL_PROJECTIONS: list = (
    _family("llama3-8b", qkv=(6144, 4096), o=(4096, 4096), gate_up=(28672, 4096), down=(4096, 14336))
    + _family("llama3-70b", qkv=(10240, 8192), o=(8192, 8192), gate_up=(57344, 8192), down=(8192, 28672))
    + _family("mixtral-8x7b", qkv=(6144, 4096), expert_w1=(14336, 4096), expert_w2=(4096, 14336))
    + _family("qwen2.5-7b", qkv=(4608, 3584), o=(3584, 3584), gate_up=(37888, 3584), down=(3584, 18944))
    + _family("qwen2.5-72b", qkv=(10240, 8192), gate_up=(59136, 8192), down=(8192, 29568))
    + _family("gemma2-9b", qkv=(8192, 3584), o=(3584, 4096), gate_up=(28672, 3584), down=(3584, 14336))
    + _family("deepseek-v3", q_a=(1536, 7168), kv_a=(576, 7168), q_b=(24576, 1536), o=(7168, 16384),
              dense_gate_up=(36864, 7168), dense_down=(7168, 18432))
    + _family("phi3-mini", qkv=(9216, 3072), o=(3072, 3072), gate_up=(16384, 3072), down=(3072, 8192))
)

# the token counts of the sweep: decode batches, chunked prefill, prefill; plus a few odd ones
M_ALL = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 160, 192, 256, 320, 384, 512, 768, 1024, 1536, 2048,
         3072, 4096, 8192, 16384)
M_ODD = (3, 77, 200, 1000, 2500)
# standard: the decode and prefill points, some of the bucket bounds the config tables are measured
# at (validation.tune), and six token counts that are none of those bounds (80 ... 896), which a
# table serves from the next bound up: the gate measures the tables out of sample too
M_STANDARD = (1, 4, 16, 32, 64, 80, 96, 128, 144, 160, 192, 224, 256, 288, 320, 448, 512, 896, 1024, 2048, 4096)
M_QUICK = (1, 16, 128, 192, 4096)

# dtypes the sweep runs: 16-bit GEMMs against torch.matmul (cuBLAS), fp8 against torch._scaled_mm
# gated_silu: the gated MLP in one GEMM (gemm_gated on the gate_up projections, N = 2 x intermediate)
# against cuBLAS on the concatenated weight + torch's silu(g) * u
SWEEP_DTYPES = ("bfloat16", "float16", "fp8_tensorwise", "fp8_rowwise", "gated_silu")
# the largest problem a tag times (FLOPs; the sweep's time budget): larger cells are not in it
MAX_FLOPS = {"quick": 2e12, "standard": 4e12, "full": 2e13}


def unique_shapes(projections) -> list:
    """One projection per (N, K) (models share shapes), in first-seen order."""
    seen, out = set(), []
    for p in projections:
        if (p.n, p.k) not in seen:
            seen.add((p.n, p.k))
            out.append(p)
    return out


def sweep_cells(tag: str, dtypes=SWEEP_DTYPES, ms: Optional[tuple] = None) -> list:
    """(dtype, projection, M) cells of the sweep for ``tag``: quick, a handful (two llama3-8b
    projections at five M); standard, every model's distinct shapes at the M of M_STANDARD (some of
    the measured tables' bounds and token counts that are none of them); full, every shape at every
    M and the odd M; each up to the tag's MAX_FLOPS. ``ms``: these token counts instead of the
    tag's (e.g. those between a measured config table's, to check what it serves there)."""
    if tag == "quick":
        shapes = [p for p in MODEL_PROJECTIONS if p.model == "llama3-8b" and p.name in ("o", "gate_up")]
        tag_ms = M_QUICK
    elif tag == "standard":
        shapes, tag_ms = unique_shapes(MODEL_PROJECTIONS), M_STANDARD
    elif tag == "full":
        shapes, tag_ms = unique_shapes(MODEL_PROJECTIONS), tuple(sorted(M_ALL + M_ODD))
    else:
        raise ValueError(f"tag {tag!r}: quick, standard or full")
    if ms is None:
        ms = tag_ms
    elif not ms or min(ms) < 1:
        raise ValueError(f"token counts must be positive: {ms}")
    else:
        ms = tuple(sorted(set(ms)))
    return [(d, p, m) for d in dtypes for p in shapes for m in ms if 2 * m * p.n * p.k <= MAX_FLOPS[tag]
            and (not d.startswith("gated") or "gate_up" in p.name)]


def operand_bytes(m: int, n: int, k: int, dtype: str) -> int:
    """Bytes a GEMM must move at least once: A, B (the weights) and the output (bf16 for fp8)."""
    in_bytes = 1 if dtype.startswith("fp8") else 2
    out_bytes = m * n if dtype.startswith("gated") else m * n * 2  # gated: N / 2 output columns
    return (m * k + n * k) * in_bytes + out_bytes
