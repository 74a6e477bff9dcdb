"""The decision cache: what an autotune with our candidates found is kept on disk and narrows
the next compile of the same GEMM in any process (one config, or none where ours lost)."""

import json

import pytest

torch = pytest.importorskip("torch")
F = torch.nn.functional

from cutedsl_backend.inductor import decisions  # noqa: E402
from cutedsl_backend.inductor.state import STATE  # noqa: E402

from .conftest import compile_and_code, rand  # noqa: E402


def entries():
    p = decisions.path()
    return json.loads(p.read_text()) if p.exists() else {}


def recompile(fn, *args):
    torch._dynamo.reset()
    STATE.decisions.clear()  # as a new process would: read from disk
    return compile_and_code(fn, *args)


def test_recorded_then_narrowed_to_one_config(inductor, feedback):
    a, b = rand(256, 128), rand(128, 192)
    fn = (lambda a, b: a @ b)
    compile_and_code(fn, a, b)
    assert len(feedback.ours("mm")) == 3
    (entry,) = entries().values()
    assert entry["config"].startswith("sm90a_") and entry["ours_ms"] > 0 and entry["theirs_ms"] > 0
    feedback.rounds.clear()
    entry["theirs_ms"] = entry["ours_ms"]  # a close call: offer the recorded config alone
    decisions.path().write_text(json.dumps({next(iter(entries())): entry}))
    recompile(fn, a, b)
    assert [d for _, d in feedback.ours("mm")] == [f"cutedsl {entry['config']}"]


def test_lost_is_not_offered_again(inductor, feedback, debug_log):
    a, b = rand(256, 128), rand(128, 192)
    fn = (lambda a, b: a @ b)
    compile_and_code(fn, a, b)
    (k, entry), = entries().items()
    entry.update(ours_ms=2.0, theirs_ms=1.0)
    decisions.path().write_text(json.dumps({k: entry}))
    feedback.rounds.clear()
    recompile(fn, a, b)
    assert feedback.ours() == []
    assert any("decision cache" in r.getMessage() for r in debug_log.records)


@pytest.mark.parametrize("outcome", ["won", "lost"])
def test_fused_op_skips_the_autotune(inductor, feedback, debug_log, outcome, monkeypatch):
    from torch._inductor.virtualized import V

    from cutedsl_backend.inductor import choices
    from cutedsl_backend.inductor.state import NO_PLAIN_CANDIDATES

    x, w, b = rand(256, 128), rand(192, 128), rand(192)
    fn = (lambda x, w, b: F.relu(F.linear(x, w, b)))
    compile_and_code(fn, x, w, b)
    k = next(k for k in entries() if "cutedsl_fused" in k)
    entry = entries()[k]
    entry.update(ours_ms=1.0, theirs_ms=2.0) if outcome == "won" else entry.update(ours_ms=2.0, theirs_ms=1.0)
    decisions.path().write_text(json.dumps({k: entry}))
    feedback.rounds.clear()
    marked = []  # per template request: was the GEMM one left unfused after its recorded loss?
    restrict = choices.aten_only_where_lost
    monkeypatch.setattr(choices, "aten_only_where_lost", lambda t: (
        marked.append(bool(V.graph.current_node.meta.get(NO_PLAIN_CANDIDATES))), restrict(t))[1])
    out, code = recompile(fn, x, w, b)
    # the left-unfused GEMM's own autotune goes through the ATen-only restriction
    assert (True in marked) == (outcome == "lost"), marked
    assert not [r for r in feedback.rounds if r[0].startswith("cutedsl_fused_")]
    if outcome == "won":
        assert f"kernel_config='{entry['config']}'" in code and "activation='relu'" in code
    else:
        assert "activation='relu'" not in code
        assert feedback.ours() == []  # nor plain candidates for the GEMM left unfused
        assert any("left unfused" in r.getMessage() for r in debug_log.records)  # the graph Inductor saw
    torch.testing.assert_close(out.float(), fn(x.float(), w.float(), b.float()), atol=0.1, rtol=0.02)


def test_verdicts():
    assert decisions.verdict(None) == "unknown"
    assert decisions.verdict({"ours_ms": 1.0, "theirs_ms": None}) == "won"
    assert decisions.verdict({"ours_ms": 1.0, "theirs_ms": 1.01}) == "close"
    assert decisions.verdict({"ours_ms": 1.0, "theirs_ms": 1.2}) == "won"
    assert decisions.verdict({"ours_ms": 1.2, "theirs_ms": 1.0}) == "lost"


@pytest.mark.parametrize("outcome", ["won", "lost", "close"])
def test_gated_chain_keeps_its_decision(inductor, feedback, debug_log, outcome):
    """The gated MLP's autotune is recorded like the fused chains'; the next compile of the same
    block takes our recorded config without an autotune (won), puts the unfused ops back at once
    (lost), or autotunes the recorded config alone against them (close)."""
    import cutedsl_backend.inductor as cbi

    class Gated(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.gate, self.up = torch.nn.Linear(64, 128, bias=False), torch.nn.Linear(64, 128, bias=False)

        def forward(self, x):
            return F.silu(self.gate(x)) * self.up(x)

    cbi.enable(device_arch=lambda d: "sm90a", gated_mlp=True)
    model, x = Gated().to(torch.bfloat16), rand(32, 64)
    with torch.no_grad():
        compile_and_code(model, x)
    gated = [(k, e) for k, e in entries().items() if "cutedsl_fused_gemm_gated" in k]
    assert len(gated) == 1 and gated[0][1]["config"].startswith("sm90a_"), entries()
    (k, entry), = gated
    ours_ms = {"won": 1.0, "lost": 2.0, "close": 1.0}[outcome]
    entry.update(ours_ms=ours_ms, theirs_ms=2.0 if outcome == "won" else 1.0)
    decisions.path().write_text(json.dumps({k: entry}))
    feedback.rounds.clear()
    with torch.no_grad():
        out, code = recompile(model, x)
    rounds = [name for name, _ in feedback.rounds if name == "cutedsl_fused_gemm_gated"]
    if outcome == "close":
        assert rounds == ["cutedsl_fused_gemm_gated"]
        ours = [d for n, d in feedback.ours("cutedsl_fused_gemm_gated") if n.startswith("cutedsl_gemm_gated")]
        assert ours == [f"cutedsl gated {entry['config']}"]
    else:
        assert rounds == [] and any("decision cache" in r.getMessage() for r in debug_log.records)
        assert ("cutedsl_gemm_gated" in code) == (outcome == "won"), code[-3000:]
        assert not [c for c in feedback.ours() if c[0].startswith("cutedsl_gemm")]  # no plain candidates either
    torch.testing.assert_close(out.float(), model(x).float(), atol=0.05, rtol=0.05)


def test_keys_tell_dynamic_from_static_and_the_accumulation_modes(inductor):
    """A dynamic offer (the per-call dispatcher) and a static one at the same hint, and FP8's two
    accumulation modes, are separate decisions."""
    import dataclasses
    from types import SimpleNamespace

    from cutedsl_backend.epilogue import EpilogueSpec
    from cutedsl_backend.problem import make_problem

    def offer(dynamic=False, fast=False):
        problem = make_problem(32, 128, 64, dtype="float8_e4m3fn", b_major="k", out_dtype="bfloat16", fast_accum=fast)
        return SimpleNamespace(problem=problem, epilogue=EpilogueSpec(), dynamic=dynamic)

    keys = {decisions.key("op", offer(d, f), "gpu") for d in (False, True) for f in (False, True)}
    assert len(keys) == 4
    assert dataclasses.is_dataclass(offer().problem)


def test_a_failed_candidate_settles_nothing(inductor):
    """An autotune where our best or the other side timed as inf (a failed candidate) is not
    recorded: it would fix the verdict for every later compile of the build."""
    from types import SimpleNamespace

    class Choice(SimpleNamespace):
        __hash__ = object.__hash__  # a dict key, as Inductor's choices are

    ours = Choice(cutedsl_decision="k", cutedsl_config="sm90a_cfg")
    theirs = Choice()
    for timings in ({ours: float("inf"), theirs: 1.0}, {ours: 1.0, theirs: float("inf")}):
        decisions.feedback_saver(timings, "n", [], list(timings))
        assert "k" not in entries()
    decisions.feedback_saver({ours: 1.0, theirs: 2.0}, "n", [], [ours, theirs])
    assert entries()["k"] == {"config": "sm90a_cfg", "ours_ms": 1.0, "theirs_ms": 2.0}
