"""The validation matrix, defined once: nox, pytest, the CLI and the workflows read it from here.

A cell is (arch, dtype, out_dtype, a_major, b_major, epilogue, config); each cell has a compile
gate (budget, required SASS, no spills; runs anywhere) and a GPU gate (numerics against torch;
runs on a GPU of the cell's arch). Tags: quick (CPU CI, minutes), standard (a GPU runner per
commit), full (a release).
"""

from __future__ import annotations

import itertools
from dataclasses import asdict, dataclass

from ..configs import GemmConfig, config_space, family, quick_configs
from ..epilogue import EpilogueSpec
from ..problem import GemmProblem

TAGS = ("quick", "standard", "full")
# epilogue name -> spec builder (bias and residual in the output dtype)
EPILOGUES = {
    "none": lambda od: EpilogueSpec(),
    "bias": lambda od: EpilogueSpec(bias="col", bias_dtype=od),
    "bias+relu": lambda od: EpilogueSpec(bias="col", bias_dtype=od, activation="relu"),
    "bias+gelu_tanh": lambda od: EpilogueSpec(bias="col", bias_dtype=od, activation="gelu_tanh"),
    "bias+silu": lambda od: EpilogueSpec(bias="col", bias_dtype=od, activation="silu"),
    # an aligned residual (TMA-loaded on sm90a) and a misaligned one (gathered)
    "residual+alpha/beta": lambda od: EpilogueSpec(residual=True, residual_dtype=od, residual_aligned=True),
    "residual-misaligned": lambda od: EpilogueSpec(residual=True, residual_dtype=od),
    # fp8 (scaled_mm) cells
    "tensorwise-scales": lambda od: EpilogueSpec(scale_a="scalar", scale_b="scalar"),
    "rowwise-scales": lambda od: EpilogueSpec(scale_a="row", scale_b="col"),
    "rowwise-scales+bias+gelu_tanh": lambda od: EpilogueSpec(scale_a="row", scale_b="col", bias="col",
                                                             bias_dtype=od, activation="gelu_tanh"),
    # gated MLP (gemm_gated: act(a @ w_gate^T) * (a @ w_up^T)), K-major weights
    "gated-silu": lambda od: EpilogueSpec(gated="silu"),
    "gated-gelu_tanh": lambda od: EpilogueSpec(gated="gelu_tanh"),
}
FP8_EPILOGUES = ("tensorwise-scales", "rowwise-scales", "rowwise-scales+bias+gelu_tanh")
GATED_EPILOGUES = ("gated-silu", "gated-gelu_tanh")
# The GPU test suite's axes (the nox `gpu` sessions, one per (arch, dtype, epilogue family)):
# plain GEMMs, fused epilogues (bias, activations, residual, alpha/beta, also through
# torch.compile), fp8 scaled GEMMs with their scales. Tests say their family with
# pytest.mark.epilogue(...); fp8 tests cover every e4m3/e5m2 mix under float8_e4m3fn.
GPU_EPILOGUE_FAMILIES = ("none", "fused", "scales")
GPU_TEST_CELLS = (("bfloat16", "none"), ("bfloat16", "fused"), ("float16", "none"), ("float16", "fused"),
                  ("float8_e4m3fn", "scales"))
LAYOUTS = (("k", "n"), ("k", "k"), ("m", "n"), ("m", "k"))
# Instructions each kernel family must contain (one of each tuple).
REQUIRED_SASS = {
    ("sm90a", 16): (("HGMMA",), ("UTMALDG",)),
    ("sm90a", 8): (("QGMMA",), ("UTMALDG",)),
    ("sm100a", 16): (("UTCHMMA",), ("UTMALDG",)),
    ("sm100a", 8): (("UTCQMMA",), ("UTMALDG",)),
}
# Representative shapes for the GPU gate: tails in M, N, K, a batch, many tiles per CTA.
GPU_SHAPES = {
    "quick": [(1, 200, 392, 520)],
    "standard": [(1, 200, 392, 520), (3, 328, 456, 264), (2, 1000, 2056, 776)],
    "full": [(1, 200, 392, 520), (3, 328, 456, 264), (2, 1000, 2056, 776), (1, 4096, 4096, 4096),
             (1, 16, 8192, 1024)],
}


@dataclass(frozen=True)
class Cell:
    arch: str
    dtype: str
    out_dtype: str
    a_major: str
    b_major: str
    epilogue: str
    config: GemmConfig

    @property
    def id(self) -> str:
        return (f"{self.arch}/{self.dtype}->{self.out_dtype}/a{self.a_major}b{self.b_major}/"
                f"{self.epilogue}/{self.config.name}")

    def epilogue_spec(self) -> EpilogueSpec:
        return EPILOGUES[self.epilogue](self.out_dtype)

    @property
    def family(self) -> str:
        return f"{self.arch}/gemm" + ("" if self.epilogue == "none" else "+epilogue")

    def problem(self, m=4096, n=4096, k=4096, batch=1) -> GemmProblem:
        return GemmProblem(m, n, k, batch, self.dtype, self.out_dtype, self.a_major, self.b_major,
                           self.arch)

    def to_dict(self) -> dict:
        d = asdict(self)
        d["config"] = self.config.name
        return d


def epilogue_configs(arch: str) -> list[GemmConfig]:
    """Two configs per arch for the epilogue cells: sm90a cooperative + pingpong, sm100a 1-CTA + 2-CTA."""
    q = quick_configs(arch)
    return [q[0], q[3]] if arch == "sm90a" else [q[0], q[4]]


def fp8_configs(arch: str) -> list[GemmConfig]:
    """sm90a: configs that hold precise fp8's three accumulators (a cooperative and a pingpong one);
    sm100a: a 1-CTA and a 2-CTA config (tcgen05 accumulates fp8 in fp32 tensor memory)."""
    if arch == "sm100a":
        return [GemmConfig(128, 128, cluster_n=2, raster="m", arch=arch),
                GemmConfig(256, 128, cluster_m=2, arch=arch, two_cta=True)]
    return [GemmConfig(128, 128, cluster_n=2, schedule="cooperative", raster="m", arch=arch),
            GemmConfig(64, 128, schedule="pingpong", arch=arch)]


def gated_configs(arch: str) -> list[GemmConfig]:
    """The gated epilogue's cells: sm90a a cooperative 128x256 and a pingpong 128x128 tile (the
    clusters the ranking offers it); sm100a a 1-CTA 128x256 tile with A multicast, a 1-CTA 128x192
    with B multicast and a 2-CTA 256x256 pair."""
    if arch == "sm100a":
        return [GemmConfig(128, 256, cluster_n=2, arch=arch), GemmConfig(128, 192, cluster_m=2, arch=arch),
                GemmConfig(256, 256, cluster_m=2, two_cta=True, arch=arch)]
    return [GemmConfig(128, 256, cluster_n=2, arch=arch), GemmConfig(128, 128, schedule="pingpong", arch=arch)]


def dtype_pairs(tag: str):
    pairs = [("bfloat16", "bfloat16"), ("float16", "float16")]
    if tag != "quick":
        pairs += [("bfloat16", "float32"), ("float16", "float32")]
    return pairs


def configs_for(arch: str, tag: str) -> list[GemmConfig]:
    if tag == "full":
        return config_space(arch)
    return quick_configs(arch)


def cells(tag: str = "quick", archs=("sm90a", "sm100a")) -> list[Cell]:
    """Every cell of the matrix for ``tag``; archs without kernels yet give no cells."""
    out = []
    for arch in archs:
        if not quick_configs(arch):
            continue  # no kernels for this arch in this build: reported by unbuilt_archs()
        for (dt, od), (am, bm), cfg in itertools.product(dtype_pairs(tag), LAYOUTS, configs_for(arch, tag)):
            out.append(Cell(arch, dt, od, am, bm, "none", cfg))
        # epilogues: every kind on a cooperative and a pingpong config (all configs for full)
        epi_cfgs = configs_for(arch, tag) if tag == "full" else epilogue_configs(arch)
        for (dt, od), name, cfg in itertools.product(dtype_pairs(tag), EPILOGUES, epi_cfgs):
            if name != "none" and name not in FP8_EPILOGUES + GATED_EPILOGUES:
                out.append(Cell(arch, dt, od, "k", "n", name, cfg))
        if family(arch).gated:
            # the gated epilogue: the input dtype out, K-major weights (nn.Linear's), both A majors
            for (dt, _), name, cfg, am in itertools.product(dtype_pairs("quick"), GATED_EPILOGUES,
                                                           gated_configs(arch), "km"):
                out.append(Cell(arch, dt, dt, am, "k", name, cfg))
        # fp8: e4m3 x e4m3, K-major operands (torch._scaled_mm's contract), bf16 out
        fp8_outs = ("bfloat16",) if tag == "quick" else ("bfloat16", "float16", "float32")
        for od, name, cfg in itertools.product(fp8_outs, FP8_EPILOGUES, fp8_configs(arch)):
            out.append(Cell(arch, "float8_e4m3fn", od, "k", "k", name, cfg))
    return out


def unbuilt_archs(archs) -> dict:
    """Archs of the matrix that have no kernels in this build, with the reason."""
    return {a: "sm100a kernels are not implemented yet (Blackwell family issue)"
            for a in archs if not quick_configs(a)}


def sass_digests() -> dict:
    """{kernel: SHA-256 of its SASS} for every quick config of both archs on two layouts and with
    the fused epilogue, plus the few-token kernels (split-K, short A loads): compiled without a GPU
    and without the caches. Identical before and after a change that must not change generated code."""
    import hashlib

    from ..compiler import compile_gemm
    from ..epilogue import EpilogueSpec

    fused = EpilogueSpec(bias="col", bias_dtype="bfloat16", activation="gelu_tanh")
    kernels: list = []
    for arch in ("sm90a", "sm100a"):
        for cfg in quick_configs(arch):
            kernels.append((arch, cfg, "k", "n", None))
            kernels.append((arch, cfg, "m", "k", None))
            kernels.append((arch, cfg, "k", "k", fused))
    for cfg in (GemmConfig(64, 96, schedule="pingpong", splits=3, a_rows=16), GemmConfig(128, 128, splits=2)):
        kernels.append(("sm90a", cfg, "k", "k", None))
    gated = EpilogueSpec(gated="silu", bias="col", bias_dtype="bfloat16")
    for arch in ("sm90a", "sm100a"):
        kernels.append((arch, gated_configs(arch)[0], "k", "k", gated))
    out = {}
    for arch, cfg, a_major, b_major, epi in kernels:
        k = compile_gemm(8, 1048, 776, dtype="bfloat16", arch=arch, a_major=a_major, b_major=b_major, config=cfg,
                         epilogue=epi, use_cache=False)
        name = f"{cfg.name}/a{a_major}b{b_major}/{'none' if epi is None else 'gated' if epi.gated else 'fused'}"
        out[name] = hashlib.sha256(k.sass().encode()).hexdigest()[:16]
    return out
