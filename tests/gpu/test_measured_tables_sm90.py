"""This GPU's measured config tables (configs.measured) on the GPU: where a table serves a call,
the eager dispatcher runs the table's config, and the result is right against float64 on a
NaN-poisoned output (bf16, fp16 and fp8 e4m3 with scalar scales; every named entry, at the
measured M and at an M just below it, a tail in the last tile). Skipped with the reason without an sm90 GPU or without
a table measured on (or borrowed by) this GPU model."""

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend as cb  # noqa: E402
from cutedsl_backend.configs.measured import MEASURED  # noqa: E402
from cutedsl_backend.epilogue import EpilogueSpec  # noqa: E402
from cutedsl_backend.plan import PLANS  # noqa: E402
from cutedsl_backend.problem import GemmProblem  # noqa: E402
from cutedsl_backend.validation.tolerances import compare, compare_fp8  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("none")]
SEED = 9090
SCALAR = EpilogueSpec(scale_a="scalar", scale_b="scalar")


def _shape(config) -> tuple:
    """What a config decides about the launch (stages and k-tile resolved or not)."""
    return (config.tile_m, config.tile_n, config.cluster_m, config.cluster_n, config.schedule, config.splits,
            config.swap_ab)


def _served(operands: str) -> list:
    """(m, entry) for every named entry of the ``operands`` tables serving this GPU (its own and
    those it borrows, configs.measured.BORROWED_TABLES) that the dispatcher serves at its own M and
    one token fewer: a table names configs from timing sweeps, which do not check results, so each
    config a table can run is checked here."""
    gpu = torch.cuda.get_device_name()
    tables = [t for t in MEASURED.for_gpu(gpu) if t.operands == operands]
    if not tables:
        pytest.skip(f"not run: no measured {operands} config table for {gpu}")
    # an entry another table's shadows (or a borrowed few-token one) is not served, so not checked
    picked = sorted((e for t in tables for e in t.entries if e.config is not None), key=lambda e: (e.m, e.n * e.k))
    dtype = "bfloat16" if operands == "16bit" else "float8_e4m3fn"
    spec = None if operands == "16bit" else SCALAR
    out = []
    for e in picked:
        for m in (e.m, e.m - 1):
            problem = GemmProblem(m, e.n, e.k, 1, dtype, "bfloat16", "k", "k", "sm90a")
            served = MEASURED.served(problem, gpu, spec)
            if served is not None and served[0] is e:
                out.append((m, e))
    assert out, "a table with named entries serves at least their own M"
    return out


@pytest.mark.parametrize("dtype", ["bfloat16", "float16"])
def test_the_dispatcher_runs_the_tables_config_and_is_right(dtype):
    dt = getattr(torch, dtype)
    g = torch.Generator(device="cuda").manual_seed(SEED)
    for m, e in _served("16bit"):
        a = torch.randn(m, e.k, device="cuda", generator=g).to(dt)
        w = torch.randn(e.n, e.k, device="cuda", generator=g).to(dt)
        out = torch.full((m, e.n), float("nan"), device="cuda", dtype=dt)
        PLANS.clear()
        cb.gemm(a, w.t(), out=out)
        ran = PLANS.newest()
        assert _shape(ran.kernel.config) == _shape(e.config), (m, e)
        check = compare(out, a.double() @ w.double().t(), dtype, e.k)
        assert check["ok"], (m, e, check)


def test_the_dispatcher_runs_the_fp8_tables_config_and_is_right():
    g = torch.Generator(device="cuda").manual_seed(SEED + 1)
    f8 = torch.float8_e4m3fn
    for m, e in _served("fp8_precise"):
        a = (torch.randn(m, e.k, device="cuda", generator=g) * 2).to(f8)
        w = (torch.randn(e.n, e.k, device="cuda", generator=g) * 2).to(f8)
        sa = torch.rand((), device="cuda", generator=g) + 0.5
        sb = torch.rand((), device="cuda", generator=g) + 0.5
        out = torch.full((m, e.n), float("nan"), device="cuda", dtype=torch.bfloat16)
        PLANS.clear()
        cb.scaled_mm(a, w.t(), sa, sb, out=out)
        assert _shape(PLANS.newest().kernel.config) == _shape(e.config), (m, e)
        ref = (a.double() @ w.double().t()) * sa.double() * sb.double()
        check = compare_fp8(out, ref, "bfloat16", e.k)
        assert check["ok"], (m, e, check)
