"""``probe-configs`` on the CPU: the cases of one (dtype, shape) checked one by one and timed in one
alternated set with their peer, a refused config a row naming the rule, the pick labelled with
the config the dispatcher runs, and the command's argument errors."""

from types import SimpleNamespace

import pytest

from cutedsl_backend.problem import UnsupportedGemmError
from cutedsl_backend.validation.probe_configs import ProbeCalls, config_ab

NAMED = "sm90a_pingpong_64x64xauto_c1x1_sauto_rn8_a16"


def _fakes(times: dict, refuse: str = ""):
    made, timed = [], []

    def make_calls(ops, cfg):
        made.append((ops.dtype, None if cfg is None else cfg.name, ops.m))

        def check():
            if cfg is not None and cfg.name == refuse:
                raise UnsupportedGemmError(f"a_rows 16: the problem's M={ops.m} is larger")
            return {"ok": True, "rel_l2": 1e-3}

        return ProbeCalls(lambda: None, lambda: None, check)

    # the operands the fake calls are made from: their dtype, M and the peer's call
    make_calls.operands = lambda dtype, m, n, k: SimpleNamespace(dtype=dtype, m=m, peer=lambda: None)

    def time_calls(fns, rounds):
        timed.append((sorted(fns), rounds))
        return {name: {"ms": times[name], "runs": [times[name] * 0.99, times[name], times[name] * 1.02]}
                for name in fns}

    return made, timed, make_calls, time_calls


def test_the_configs_of_a_shape_are_timed_together_with_their_peer():
    made, timed, make_calls, time_calls = _fakes({"sm90a_x (pick)": 0.010, NAMED: 0.008, "peer": 0.009})
    rows = config_ab([("bfloat16", "pick", (16, 4096, 4096)), ("bfloat16", NAMED, (16, 4096, 4096))], rounds=3,
                     log=lambda *a: None, time_calls=time_calls,
                     make_calls=make_calls, make_operands=make_calls.operands,
                     dispatched=lambda *a: "sm90a_x")
    assert made == [("bfloat16", None, 16), ("bfloat16", NAMED, 16)]
    assert timed == [(sorted(["sm90a_x (pick)", NAMED, "peer"]), 3)]
    by = {r["config"]: r for r in rows}
    assert by[NAMED]["ratio"] == pytest.approx(0.009 / 0.008) and by["sm90a_x (pick)"]["ratio"] == pytest.approx(0.9)
    assert by[NAMED]["ours_range"] == [pytest.approx(0.008 * 0.99), pytest.approx(0.008 * 1.02)]
    assert all(r["correct"] and r["peer_ms"] == 0.009 for r in rows)


def test_a_refused_config_is_a_row_naming_the_rule_and_is_not_timed():
    made, timed, make_calls, time_calls = _fakes({"peer": 0.009}, refuse=NAMED)
    rows = config_ab([("fp8_rowwise", NAMED, (64, 4096, 4096))], log=lambda *a: None, time_calls=time_calls,
                     make_calls=make_calls, make_operands=make_calls.operands, dispatched=lambda *a: "unused")
    assert timed == [] and len(rows) == 1 and "a_rows" in rows[0]["refused"] and "ours_ms" not in rows[0]


def test_a_pick_the_models_cannot_name_and_a_timing_failure_are_rows_not_crashes():
    made, timed, make_calls, time_calls = _fakes({"peer": 0.009, NAMED: 0.008})

    def no_pick(*a):
        raise UnsupportedGemmError("contiguous extent of out (1001)")

    def peer_refuses(fns, rounds):
        raise RuntimeError("mat2 shape must be divisible by 16")

    rows = config_ab([("bfloat16", "pick", (16, 1001, 4096)), ("bfloat16", NAMED, (16, 1001, 4096))],
                     log=lambda *a: None, time_calls=peer_refuses,
                     make_calls=make_calls, make_operands=make_calls.operands, dispatched=no_pick)
    assert rows[0]["config"] == "pick" and "1001" in rows[0]["refused"]
    assert rows[1]["config"] == NAMED and "divisible" in rows[1]["error"] and len(rows) == 2


def test_the_peers_kernels_are_named_on_every_timed_row_of_their_shape_after_all_timings():
    made, timed, make_calls, time_calls = _fakes({"sm90a_x (pick)": 0.010, NAMED: 0.008, "peer": 0.009},
                                                 refuse=NAMED)
    profiled = []

    def peer_kernels(call):
        profiled.append(len(timed))  # after how many timed sets
        return [{"name": f"nvjet_{len(profiled)}", "launches": 1, "us": 5.0}]

    cases = [("bfloat16", NAMED, (64, 4096, 4096)), ("bfloat16", "pick", (64, 4096, 4096)),
             ("bfloat16", "pick", (16, 4096, 4096))]
    rows = config_ab(cases, log=lambda *a: None, time_calls=time_calls, make_calls=make_calls,
                     make_operands=make_calls.operands, dispatched=lambda *a: "sm90a_x", peer_kernels=peer_kernels)
    assert profiled == [2, 2]  # once per timed shape, after both were timed
    refused, first, second = rows
    assert "refused" in refused and "peer_kernels" not in refused
    assert first["m"] == 64 and first["peer_kernels"][0]["name"] == "nvjet_1"
    assert second["m"] == 16 and second["peer_kernels"][0]["name"] == "nvjet_2"


@pytest.mark.parametrize("argv, message", [
    (["--shapes", "16x1032x4096", "--dtypes", "fp8_rowwise"], "multiples of 16"),
    (["--shapes", "16x4096"], "--shapes"),
    (["--shapes", "16x4096x4096", "--dtypes", "int8"], "--dtypes"),
    (["--shapes", "16x4096x4096", "--configs", "not_a_config"], "--configs"),
    (["--shapes", "16x4096x4096", "--rounds", "0"], "--rounds"),
])
def test_bad_arguments_are_refused_by_name(argv, message, capsys, monkeypatch):
    torch = pytest.importorskip("torch")
    from cutedsl_backend.cli import main

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # past the GPU gate: the arguments decide
    with pytest.raises(SystemExit) as e:
        main(["probe-configs", *argv])
    assert e.value.code == 2 and message in capsys.readouterr().err
