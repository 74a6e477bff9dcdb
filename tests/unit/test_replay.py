"""`python -m cutedsl_backend replay`: the dispatcher's current choices scored on stored sweep rows,
each row against its own peer; rows that did not time today's choice are reported, not scored."""

import gzip
import json

import pytest

from cutedsl_backend.configs import default_config
from cutedsl_backend.problem import GemmProblem
from cutedsl_backend.validation.replay import replay
from cutedsl_backend.validation.sweep_spaces import load_sweep_rows


def _row(m, n, k, times, pick, peer=0.010, dtype="bfloat16"):
    return {"m": m, "n": n, "k": k, "dtype": dtype, "peer_ms": peer, "pick": pick, "times": times}


def test_replay_scores_todays_pick_against_each_rows_own_peer(tmp_path):
    now = default_config(GemmProblem(192, 4096, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")).name
    assert now != "sm90a_cooperative_128x128xauto_c1x1_sauto_rn8"  # (the swept pick below stands apart)
    scored = _row(192, 4096, 4096, {now: 0.008, "sm90a_cooperative_128x128xauto_c1x1_sauto_rn8": 0.0125,
                                    "other": 0.005}, pick="sm90a_cooperative_128x128xauto_c1x1_sauto_rn8")
    unmeasured = _row(128, 4096, 4096, {"sm90a_cooperative_128x128xauto_c1x1_sauto_rn8": 0.01},
                      pick="sm90a_cooperative_128x128xauto_c1x1_sauto_rn8", peer=0.02)
    path = tmp_path / "rows.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump([scored, unmeasured], f)
    result = replay(load_sweep_rows([str(path)]))
    assert result["all"]["cells"] == 1 and len(result["not_measured"]) == 1
    assert result["all"]["swept_pick"] == pytest.approx(0.8) and result["all"]["now"]["models"] == pytest.approx(1.25)
    assert result["all"]["best"] == pytest.approx(2.0)
    assert result["all"]["below_gate_swept_pick"] == 1 and result["all"]["below_gate_now"] == {"models": 0}
    assert list(result["per_m"]) == [192]


def test_replay_refuses_rows_of_an_unknown_dtype():
    with pytest.raises(ValueError, match="row dtype"):
        replay([_row(16, 64, 64, {"x": 1.0}, pick="x", dtype="float32")])


def test_replay_scores_a_moved_pick_by_its_config_as_the_sweeps_timed_it():
    """The dispatcher's pick at 449 tokens moves its last tiles (configs.edge); the sweeps timed the
    candidates unmoved, so the row is scored by the same config unmoved, not left out."""
    now = default_config(GemmProblem(449, 4096, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a"))
    assert now.edge
    row = _row(449, 4096, 4096, {now.replace(edge=False).name: 0.008, "other": 0.005}, pick="other")
    result = replay([row])
    assert result["all"]["cells"] == 1 and result["all"]["now"] == {"models": pytest.approx(1.25)}


def test_replay_scores_rankings_side_by_side_on_the_rows_that_timed_every_pick(tmp_path, monkeypatch):
    """The models alone and with a GPU model's table, on the same rows: a row that did not time
    one ranking's pick is left out for all of them."""
    from cutedsl_backend.configs import GemmConfig
    from cutedsl_backend.configs.measured import MEASURED, MeasuredEntry, MeasuredTable

    problem = GemmProblem(192, 4096, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")
    models = default_config(problem).name
    measured = GemmConfig(128, 128, cluster_m=2)
    assert measured.name != models
    table = MeasuredTable("NVIDIA Test GPU", "sm90a", "16bit", "unit test",
                          (MeasuredEntry(4096, 4096, 192, measured, 0.005, 0.010, 0.008),))
    (tmp_path / "t.json").write_text(json.dumps(table.to_json()))
    monkeypatch.setattr(MEASURED, "directory", tmp_path)
    monkeypatch.setattr(MEASURED, "_tables", None)
    default_config.cache_clear()
    try:
        both = _row(192, 4096, 4096, {models: 0.010, measured.name: 0.008}, pick=models)
        # the same shape in another sweep, its own peer: one shape, the geomean of its two rows
        again = _row(192, 4096, 4096, {models: 0.020, measured.name: 0.010}, pick=models, peer=0.020)
        one = _row(180, 4096, 4096, {models: 0.010}, pick=models)  # the table's pick not timed
        other = _row(180, 4096, 4096, {measured.name: 0.010, "x": 0.01}, pick="x")  # the models' not timed
        result = replay([both, again, one, other], gpus=(None, "NVIDIA Test GPU"))
        alone = replay([one], gpus=(None, "NVIDIA Test GPU"))
        monkeypatch.setattr(MEASURED, "enabled", False)
        default_config.cache_clear()
        assert replay([both], gpus=(None, "NVIDIA Test GPU"))["tables"] is False
    finally:
        default_config.cache_clear()
    assert result["rankings"] == ["models", "NVIDIA Test GPU"] and result["tables"] and result["borrowed_tables"]
    assert result["all"]["cells"] == 1 and result["rows_scored"] == 2 and result["rows_not_measured"] == 2
    assert result["all"]["now"] == {"models": pytest.approx(1.0), "NVIDIA Test GPU": pytest.approx((1.25 * 2) ** 0.5)}
    assert result["cells"][0]["configs"] == {"models": models, "NVIDIA Test GPU": measured.name}
    # one shape not scored, naming the pick neither of its rows timed
    (unscored,) = result["not_measured"]
    assert (unscored["m"], unscored["configs"]) == (180, [])
    assert alone["not_measured"][0]["configs"] == [measured.name]


def test_replay_command_says_which_tables_ranked(tmp_path, capsys):
    """`replay --no-borrowed-tables` (the other half of an A/B) says so on its output and in its JSON."""
    from cutedsl_backend.cli import main
    from cutedsl_backend.configs.measured import MEASURED

    now = default_config(GemmProblem(192, 4096, 4096, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")).name
    rows = tmp_path / "rows.json"
    rows.write_text(json.dumps([_row(192, 4096, 4096, {now: 0.008}, pick=now)]))
    try:
        assert main(["replay", str(rows), "--no-borrowed-tables", "--json", str(tmp_path / "out.json")]) == 0
    finally:
        MEASURED.borrowing = True
        default_config.cache_clear()
    assert "own tables only" in capsys.readouterr().out
    assert json.loads((tmp_path / "out.json").read_text())["borrowed_tables"] is False
