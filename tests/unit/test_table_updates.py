"""Four-row clusters and table updates on the CPU: which architectures take 4 x 1 and 4 x 2
clusters, ``config-table --update`` (only the cells a sweep measured again change, and only past
the noise margin or where the entry was found wrong) and its command line, and ``sweep-decode
--space clusters|waves``'s arguments."""

import argparse
import json
from unittest import mock

import pytest

from cutedsl_backend.configs import GemmConfig
from cutedsl_backend.configs.measured import MeasuredEntry, MeasuredTable, table_from_sweeps, updated_table
from cutedsl_backend.configs.rules import check_config
from cutedsl_backend.problem import GemmProblem, UnsupportedGemmError

GPU = "NVIDIA Test GPU"
SWAP = GemmConfig(64, 192, schedule="pingpong", swap_ab=True)
COOP = GemmConfig(128, 192, cluster_n=2)
C4 = GemmConfig(64, 96, schedule="pingpong", cluster_m=4, cluster_n=2, swap_ab=True)


def table(*entries, gpu=GPU):
    return MeasuredTable(gpu, "sm90a", "16bit", "unit test", tuple(entries))


def linear(m, n=3584, k=3584):
    return GemmProblem(m, n, k, 1, "bfloat16", "bfloat16", "k", "k", "sm90a")


def entry(m, config, n=3584, k=3584):
    return MeasuredEntry(n, k, m, config, 0.010, 0.011, 0.012)


def row(m, times, pick, n=3584, k=3584, peer=0.02, wrong=None):
    r = {"m": m, "n": n, "k": k, "dtype": "bfloat16", "peer_ms": peer, "pick": pick.name,
         "times": {c.name: t for c, t in times.items()}}
    return {**r, "wrong": {c.name: float("nan") for c in wrong}} if wrong else r


def test_four_row_clusters_are_for_sm90a_only():
    check_config(C4.replace(swap_ab=False), GemmProblem(4096, 4096, 4096))
    sm100 = GemmProblem(4096, 4096, 4096, arch="sm100a")
    with pytest.raises(UnsupportedGemmError, match="four-row clusters are verified on sm90a only"):
        check_config(GemmConfig(128, 128, cluster_m=4, arch="sm100a"), sm100)


def test_an_update_changes_only_the_swept_cells_and_only_past_the_noise_margin():
    """A swept cell names its fastest config where it beat the table's own entry by more than the
    margin in the same sweep; within the margin, or where the entry was not timed, the entry stays;
    an unswept cell stays; a new cell is chosen as a fresh table chooses."""
    old = table(entry(96, SWAP), entry(160, SWAP), entry(192, COOP), entry(256, COOP))
    rows = [row(96, {SWAP: 0.012, C4: 0.010}, pick=COOP),     # 20% faster than the entry: named
            row(160, {SWAP: 0.0101, C4: 0.010}, pick=COOP),   # 1%: the entry stays
            row(192, {C4: 0.005}, pick=COOP),                  # the entry was not timed: it stays
            row(128, {C4: 0.010, COOP: 0.012}, pick=COOP)]     # a new cell
    new = updated_table(old, rows, "update test")
    assert [(e.m, e.config) for e in new.entries] == [(96, C4), (128, C4), (160, SWAP), (192, COOP), (256, COOP)]
    assert new.entries[0].ms == 0.010 and new.entries[0].peer_ms == 0.02
    assert new.source == "unit test; then updated: update test" and new.gpu == GPU
    with pytest.raises(ValueError, match="fp8_precise operands"):
        updated_table(old, [{**rows[0], "dtype": "fp8_tensorwise"}], "x")


def test_an_entry_the_sweep_found_wrong_is_replaced_whatever_the_margin():
    """A table never names a config whose result the sweep found wrong (or that raised): such an
    entry gives way to the fastest config that ran right, even one slower than the margin allows."""
    old = table(entry(192, COOP))
    new = updated_table(old, [row(192, {C4: 0.0101, SWAP: 0.0103}, pick=SWAP, wrong=[COOP])], "update test")
    assert [(e.m, e.config) for e in new.entries] == [(192, SWAP)]  # the pick, within 3% of the fastest
    new = updated_table(old, [row(192, {C4: 0.008, SWAP: 0.011}, pick=SWAP, wrong=[COOP])], "update test")
    assert new.entries[0].config == C4


def test_a_few_token_swap_entry_needs_its_range_s_first_token_count_timed():
    """A few-token swap-AB entry serves its M's whole range (1-16 for 16), but its token rows past
    M are TMA fills that cost time: an update names one only where the same config also ran at the
    range's first token count no slower than the pick there."""
    a16 = GemmConfig(64, 64, schedule="pingpong", a_rows=16)
    a1 = a16.replace(a_rows=1)
    s16 = GemmConfig(64, 16, schedule="pingpong", cluster_m=4, swap_ab=True)
    old = table(entry(16, a16))
    at16 = row(16, {a16: 0.010, s16: 0.008}, pick=a16)
    assert updated_table(old, [at16], "u").entries[0].config == a16  # 1 token not timed: it stays
    slow_at_1 = row(1, {a1: 0.009, s16: 0.0095}, pick=a1)
    new = updated_table(old, [at16, slow_at_1], "u")
    assert [(e.m, e.config) for e in new.entries] == [(1, a1), (16, a16)]  # and the new 1-token cell takes the pick
    fast_at_1 = row(1, {a1: 0.009, s16: 0.0088}, pick=a1)  # no slower than the pick
    new = updated_table(old, [at16, fast_at_1], "u")
    assert [(e.m, e.config) for e in new.entries] == [(1, a1), (16, s16)]
    # a 1-token swap entry serves only 1 token: measured where it serves
    assert updated_table(old, [row(1, {a1: 0.010, s16: 0.008}, pick=a1)], "u").entries[0].config == s16


def test_a_fresh_table_names_a_few_token_swap_entry_as_an_update_does():
    """``table_from_sweeps`` (``config-table`` without ``--update``) applies the same low-end rule:
    a few-token swap-AB winner at 16 tokens is named only where it also ran no slower than the
    pick at 1 token; else the pick, and no entry where the pick was not timed either."""
    a16 = GemmConfig(64, 64, schedule="pingpong", a_rows=16)
    a1 = a16.replace(a_rows=1)
    s16 = GemmConfig(64, 16, schedule="pingpong", cluster_m=4, swap_ab=True)
    at16 = row(16, {a16: 0.010, s16: 0.008}, pick=a16)
    assert [(e.m, e.config) for e in table_from_sweeps([at16], GPU, "t").entries] == [(16, a16)]
    slow_at_1 = row(1, {a1: 0.009, s16: 0.0095}, pick=a1)
    assert [(e.m, e.config) for e in table_from_sweeps([at16, slow_at_1], GPU, "t").entries] == [(1, a1), (16, a16)]
    fast_at_1 = row(1, {a1: 0.009, s16: 0.0088}, pick=a1)
    assert [(e.m, e.config) for e in table_from_sweeps([at16, fast_at_1], GPU, "t").entries] == [(1, a1), (16, s16)]
    pick_untimed = row(16, {s16: 0.008}, pick=a16)
    assert table_from_sweeps([pick_untimed], GPU, "t").entries == ()


def test_config_table_update_on_the_command_line(tmp_path, capsys):
    from cutedsl_backend.cli import tuning

    old = table(entry(96, SWAP), entry(160, SWAP))
    (tmp_path / "old.json").write_text(json.dumps(old.to_json()))
    (tmp_path / "sweep.json").write_text(json.dumps([row(96, {SWAP: 0.012, C4: 0.010}, pick=COOP)]))
    parser = argparse.ArgumentParser()
    tuning._config_table_arguments(parser)
    argv = [str(tmp_path / "sweep.json"), "--source", "s", "-o", str(tmp_path / "new.json"),
            "--update", str(tmp_path / "old.json")]
    assert tuning._config_table(parser.parse_args([*argv, "--gpu", GPU]), parser) == 0
    out = capsys.readouterr().out
    assert f"96x3584x3584: {C4.name}" in out and "1 of 2 entries changed" in out
    new = MeasuredTable.from_json(json.loads((tmp_path / "new.json").read_text()))
    assert [(e.m, e.config) for e in new.entries] == [(96, C4), (160, SWAP)]
    with pytest.raises(SystemExit):  # another GPU's table
        tuning._config_table(parser.parse_args([*argv, "--gpu", "NVIDIA Other"]), parser)


H100_16BIT = "cutedsl_backend/configs/tables/nvidia-h100-80gb-hbm3-16bit.json"


@pytest.mark.parametrize("argv", [
    ["--space", "clusters"],                                   # no table
    ["--space", "clusters", "--prior", H100_16BIT],
    ["--space", "waves", "--ms", "1024"],                      # no table
    ["--space", "waves", "--prior", H100_16BIT, "--ms", "1024"],
    ["--space", "waves", "--prior", H100_16BIT],               # the default token counts, all a few
])
def test_a_sweep_against_this_gpus_table_needs_it(argv):
    """--space clusters and waves: without --prior refused; with the H100's table on a machine that
    is not an H100 (here: another GPU, as torch reports it) too, before anything is swept; waves
    also at few-token counts."""
    from cutedsl_backend.cli import tuning
    from cutedsl_backend.validation import tuning_sweeps as ts

    parser = argparse.ArgumentParser()
    tuning._sweep_decode_arguments(parser)
    with mock.patch.object(ts, "sweep_decode", side_effect=AssertionError("not to be swept")), \
            mock.patch("torch.cuda.is_available", return_value=True), \
            mock.patch("torch.cuda.get_device_name", return_value="NVIDIA Other GPU"), pytest.raises(SystemExit):
        tuning._sweep_decode(parser.parse_args(argv), parser)


def test_a_few_token_swap_entry_serves_its_range_when_one_token_tile_holds_it():
    """A swap-AB tile of 64 weight rows whose token tile holds the measured M does the same work
    for fewer tokens (the rows past M are TMA fills): its entry serves the few-token range of its M
    (1-16, 17-32, 33-64), like the unswapped few-token entries."""
    s16 = GemmConfig(64, 16, schedule="pingpong", cluster_m=4, swap_ab=True)
    s32 = GemmConfig(64, 32, schedule="pingpong", splits=2, swap_ab=True)
    s64 = GemmConfig(64, 64, schedule="pingpong", swap_ab=True)
    t = table(entry(16, s16), entry(32, s32), entry(64, s64))
    assert [t.choice(linear(m)) for m in (1, 9, 16)] == [s16] * 3
    assert [t.choice(linear(m)) for m in (17, 32)] == [s32] * 2 and [t.choice(linear(m)) for m in (33, 64)] == [s64] * 2
    # a wider token tile measured at 16 does not reach past its range; 12 is within sqrt(2) anyway
    assert table(entry(16, s64)).choice(linear(1)) == s64
    assert table(entry(32, s64)).choice(linear(16)) is None  # 16 is the 1-16 range's
    # an entry at 8 tokens serves 1-8, leaving 9-16 to the 16-token entry
    t = table(entry(8, s16), entry(16, s32.replace(splits=1)))
    assert t.choice(linear(1)) == s16 and t.choice(linear(12)) == s32.replace(splits=1)


def test_a_tables_entry_outranks_a_measured_override(tmp_path, monkeypatch):
    """The FP8 override (configs.tuning: 128 x 192 in 2 x 1 from 4096 tokens on wide weights) is a
    shape-class rule; a table's entry was timed on its GPU at its projection beside the pick the
    override made, so on that GPU the entry runs (the H100's 128 x 176 at 4096 x 14336 x 4096 ran
    5% faster than the override's tile), and elsewhere, a GPU that borrows the table included, the
    override still does."""
    from cutedsl_backend.configs import default_config, rank_configs
    from cutedsl_backend.configs.measured import MEASURED
    from cutedsl_backend.configs.tuning import tuned_choice
    from cutedsl_backend.epilogue import EpilogueSpec

    scalar = EpilogueSpec(scale_a="scalar", scale_b="scalar")
    problem = GemmProblem(4096, 14336, 4096, 1, "float8_e4m3fn", "bfloat16", "k", "k", "sm90a")
    override = tuned_choice(problem, scalar)
    assert override is not None and rank_configs(problem, epilogue=scalar, gpu=GPU)[0] == override
    named = GemmConfig(128, 176, cluster_m=2)
    fp8 = MeasuredTable(GPU, "sm90a", "fp8_precise", "unit test", (entry(4096, named, n=14336, k=4096),))
    (tmp_path / "t.json").write_text(json.dumps(fp8.to_json()))
    monkeypatch.setattr(MEASURED, "directory", tmp_path)
    monkeypatch.setattr(MEASURED, "_tables", None)
    default_config.cache_clear()
    try:
        assert rank_configs(problem, epilogue=scalar, gpu=GPU)[0] == named
        assert default_config(problem, epilogue=scalar, gpu=GPU).tiling() == named
        assert rank_configs(problem, epilogue=scalar, gpu="NVIDIA Other")[0] == override
        # a borrowed entry (timed on the lender) does not: the H200 borrows the H100's tables
        lender = MeasuredTable("NVIDIA H100 80GB HBM3", "sm90a", "fp8_precise", "unit test",
                               (entry(4096, named, n=14336, k=4096),))
        (tmp_path / "t.json").write_text(json.dumps(lender.to_json()))
        monkeypatch.setattr(MEASURED, "_tables", None)
        default_config.cache_clear()
        assert rank_configs(problem, epilogue=scalar, gpu="NVIDIA H100 80GB HBM3")[0] == named
        assert MEASURED.choice(problem, "NVIDIA H200", scalar) == named  # it serves the H200 ...
        assert rank_configs(problem, epilogue=scalar, gpu="NVIDIA H200")[0] == override  # ... not over an override
    finally:
        default_config.cache_clear()
