"""The gated epilogue on a Blackwell GPU (compute capability 10.x): ``act(a @ w_gate^T + b_gate) *
(a @ w_up^T + b_up)`` in one GEMM (two half-width tcgen05 MMAs per k-block) against a float64
reference over tails in M, N and K, every gated activation, 1-CTA and 2-CTA tiles with B
multicast, split-K (bitwise deterministic), both weight forms and FP8 with rowwise scales.
Collected everywhere; skipped with the reason "needs an sm100 GPU" on any other device, and listed
as not run (never passed) by the validation report."""

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend as cb  # noqa: E402
from cutedsl_backend.configs import GemmConfig  # noqa: E402
from cutedsl_backend.epilogue import GATED_ACTIVATIONS  # noqa: E402
from cutedsl_backend.validation.tolerances import GATED_TERMS, compare, compare_fp8  # noqa: E402

from .operands import check_gated_over_shapes, gated_operands, gated_reference  # noqa: E402

pytestmark = [pytest.mark.gpu("sm100"), pytest.mark.epilogue("fused")]
SEED = 7160
SHAPES = [(1, 64, 64), (7, 136, 520), (200, 264, 512), (1000, 1024, 256), (4096, 512, 4096)]  # M, N, K
CONFIGS = [GemmConfig(128, 256, cluster_n=2, arch="sm100a"), GemmConfig(64, 128, arch="sm100a"),
           GemmConfig(256, 256, cluster_m=2, two_cta=True, arch="sm100a"),
           GemmConfig(128, 192, cluster_m=2, arch="sm100a"), GemmConfig(128, 128, splits=3, arch="sm100a")]


@pytest.mark.parametrize("act", GATED_ACTIVATIONS)
@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_gated_numerics_over_tails(act, dtype):
    check_gated_over_shapes(SHAPES, act, dtype, SEED)


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: c.name)
def test_gated_configs_with_biases(cfg):
    for i, (m, n, k) in enumerate(SHAPES[1:]):
        a, wg, wu = gated_operands(m, n, k, torch.bfloat16, SEED + 10 + i)
        g = torch.Generator(device="cuda").manual_seed(SEED + 20 + i)
        bg, bu = (torch.randn(n, device="cuda", generator=g).to(torch.bfloat16) for _ in range(2))
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        cb.gemm_gated(a, wg, wu, bias_gate=bg, bias_up=bu, config=cfg, out=out)
        c = compare(out, gated_reference(a, wg, wu, "silu", bg, bu), "bfloat16", k, activation="silu",
                    terms=GATED_TERMS)
        assert c["ok"], (cfg.name, m, n, k, c)
        assert torch.equal(cb.gemm_gated(a, w_gate_up=torch.cat([wg, wu]), bias_gate_up=torch.cat([bg, bu]),
                                         config=cfg), out)


def test_split_k_is_deterministic():
    a, wg, wu = gated_operands(16, 1024, 4096, torch.bfloat16, SEED + 30)
    cfg = GemmConfig(128, 128, splits=4, arch="sm100a")
    first = cb.gemm_gated(a, wg, wu, config=cfg)
    for _ in range(3):
        assert torch.equal(cb.gemm_gated(a, wg, wu, config=cfg), first)


@pytest.mark.parametrize("fast", [True, False], ids=["fast_accum", "precise"])
def test_gated_fp8_rowwise(fast):
    f8 = torch.float8_e4m3fn
    g = torch.Generator(device="cuda").manual_seed(SEED + 40)
    for m, n, k in ((200, 264, 1024), (16, 512, 2048)):
        a = (torch.randn(m, k, device="cuda", generator=g) * 2).to(f8)
        wg, wu = ((torch.randn(n, k, device="cuda", generator=g) * 2).to(f8) for _ in range(2))
        sa = torch.rand(m, 1, device="cuda", generator=g) / 16 + 0.01
        sg, su = (torch.rand(n, device="cuda", generator=g) / 16 + 0.01 for _ in range(2))
        out = torch.full((m, n), float("nan"), device="cuda", dtype=torch.bfloat16)
        cb.gemm_gated(a, wg, wu, scale_a=sa, scale_gate=sg, scale_up=su, use_fast_accum=fast, out=out)
        da = a.double() * sa.double()
        ref = gated_reference(da, wg.double() * sg.double()[:, None], wu.double() * su.double()[:, None], "silu")
        c = compare_fp8(out, ref, "bfloat16", k, activation="silu", fast_accum=fast, terms=GATED_TERMS)
        assert c["ok"], (m, n, k, c)
