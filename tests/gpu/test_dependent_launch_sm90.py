"""Programmatic dependent launch on a Hopper GPU (GemmConfig.pdl): a kernel launched before the
one ahead of it finished must still read that one's results and must not overwrite what it still
reads. Chains of back-to-back launches (each reading the output before it; each overwriting the
input before it; split-K launches sharing one workspace), eagerly and replayed from a CUDA graph,
against float64; the dispatcher's picks with the policy on. Skipped, with the reason, without an
sm90 GPU."""

import pytest

torch = pytest.importorskip("torch")

import cutedsl_backend as cb  # noqa: E402
from cutedsl_backend.configs import GemmConfig  # noqa: E402
from cutedsl_backend.validation.tolerances import compare  # noqa: E402

pytestmark = [pytest.mark.gpu("sm90"), pytest.mark.epilogue("none")]
PDL = [GemmConfig(64, 96, schedule="pingpong", splits=2, a_rows=16, pdl=True),
       GemmConfig(64, 64, schedule="pingpong", pdl=True),
       GemmConfig(128, 256, cluster_m=2, pdl=True),
       GemmConfig(128, 128, splits=3, pdl=True)]
SEED = 7370


def _weights(n, k, count, g):
    return [(torch.randn(n, k, device="cuda", generator=g) / k**0.5).to(torch.bfloat16) for _ in range(count)]


@pytest.mark.parametrize("cfg", PDL, ids=lambda c: c.name)
@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
def test_a_chain_reads_each_result_before_it(cfg, graph):
    """x -> x W0^T -> (x W0^T) W1^T -> ...: each launch reads the output of the one before."""
    g = torch.Generator(device="cuda").manual_seed(SEED)
    m = 16 if cfg.a_rows else 200
    x = torch.randn(m, 1024, device="cuda", generator=g).to(torch.bfloat16)
    ws = _weights(1024, 1024, 8, g)
    outs = [torch.full((m, 1024), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in ws]

    def chain():
        h = x
        for w, o in zip(ws, outs):
            h = cb.gemm(h, w.t(), config=cfg, out=o)

    chain()
    torch.cuda.synchronize()
    for o in outs:
        o.fill_(float("nan"))
    if not graph:
        torch.cuda._sleep(50_000_000)  # the GPU busy while the host queues the chain: launches back to back
        chain()
    else:
        captured = torch.cuda.CUDAGraph()
        with torch.cuda.graph(captured):
            chain()
        for o in outs:
            o.fill_(float("nan"))
        captured.replay()
    torch.cuda.synchronize()
    for i, (w, o) in enumerate(zip(ws, outs)):  # each against its input as it was left (a launch
        inp = x if i == 0 else outs[i - 1]     # that read it early read NaN or other values)
        m_ = compare(o, inp.double() @ w.double().t(), "bfloat16", 1024)
        assert m_["ok"], (i, m_)


@pytest.mark.epilogue("fused")
@pytest.mark.parametrize("cfg", PDL, ids=lambda c: c.name)
def test_a_launch_does_not_overwrite_what_the_one_before_still_reads(cfg):
    """y = x W^T + r with a long K, then a short-K launch that writes into r: launched early, it
    would finish before the first one's epilogue reads r (a write-after-read hazard)."""
    g = torch.Generator(device="cuda").manual_seed(SEED + 1)
    m = 16 if cfg.a_rows else 200
    (w_long,) = _weights(1024, 16384, 1, g)
    (w_short,) = _weights(1024, 256, 1, g)  # 4 k-tiles: room for the split-K configs' slices
    x_long = torch.randn(m, 16384, device="cuda", generator=g).to(torch.bfloat16)
    x_short = torch.randn(m, 256, device="cuda", generator=g).to(torch.bfloat16)
    rs = [torch.randn(m, 1024, device="cuda", generator=g).to(torch.bfloat16) for _ in range(6)]
    kept = [r.clone() for r in rs]
    ys = [torch.full((m, 1024), float("nan"), device="cuda", dtype=torch.bfloat16) for _ in rs]
    torch.cuda._sleep(50_000_000)  # launches queue back to back
    for r, y in zip(rs, ys):
        cb.gemm(x_long, w_long.t(), residual=r, config=cfg, out=y)
        cb.gemm(x_short, w_short.t(), config=cfg, out=r)  # overwrites the residual the launch before reads
    torch.cuda.synchronize()
    ref = x_long.double() @ w_long.double().t()
    for i, (r, y) in enumerate(zip(kept, ys)):
        m_ = compare(y, ref + r.double(), "bfloat16", 16384)
        assert m_["ok"], (i, m_)
        m_ = compare(rs[i], x_short.double() @ w_short.double().t(), "bfloat16", 256)
        assert m_["ok"], (i, m_)


def test_the_dispatchers_picks_with_the_policy_on(monkeypatch):
    """configs.as_run's dependent launch on: the picks carry pdl and stay right across the
    decode, mid-size and prefill ranges."""
    from cutedsl_backend.configs import default_config
    from cutedsl_backend.configs.as_run import DEPENDENT_LAUNCH
    from cutedsl_backend.plan import PLANS
    from cutedsl_backend.problem import GemmProblem

    def linear(m):
        return GemmProblem(m, 4096, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")

    monkeypatch.setattr(DEPENDENT_LAUNCH, "enabled", True)
    default_config.cache_clear()
    PLANS.clear()
    try:
        g = torch.Generator(device="cuda").manual_seed(SEED + 2)
        (w,) = _weights(4096, 4096, 1, g)
        for m in (1, 16, 64, 96, 200, 449, 2048):
            assert default_config(linear(m)).pdl, m
            x = torch.randn(m, 4096, device="cuda", generator=g).to(torch.bfloat16)
            out = torch.full((m, 4096), float("nan"), device="cuda", dtype=torch.bfloat16)
            for _ in range(3):
                cb.gemm(x, w.t(), out=out)
            m_ = compare(out, x.double() @ w.double().t(), "bfloat16", 4096)
            assert m_["ok"], (m, m_)
    finally:
        monkeypatch.setattr(DEPENDENT_LAUNCH, "enabled", False)
        default_config.cache_clear()
        PLANS.clear()
