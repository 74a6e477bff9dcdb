"""A table update checked on the perf gate's cells (validation.table_check, ``table-check``): the
updated entries whose cells ran slower with the update than without, on one machine, are put back
as the old table had them; cells that ran the same kernel in both runs do not count."""

import argparse
import gzip
import json

import pytest

from cutedsl_backend.configs import GemmConfig
from cutedsl_backend.configs.measured import MeasuredEntry, MeasuredTable
from cutedsl_backend.validation.table_check import checked_table, entry_verdicts, load_perf_rows, unchecked

GPU = "NVIDIA Test GPU"
N, K = 4096, 4096
PICK16 = GemmConfig.from_name("sm90a_pingpong_64x64xauto_c1x1_sauto_rn8_a16")
SWAP16 = GemmConfig.from_name("sm90a_pingpong_64x16xauto_c4x1_sauto_rn8_swap")  # serves 2-16 tokens
SWAP16_C1 = GemmConfig.from_name("sm90a_pingpong_64x16xauto_c1x1_sauto_rn8_swap")
WIDE = GemmConfig.from_name("sm90a_cooperative_128x128xauto_c1x1_sauto_rn8")


def table(*entries, operands="16bit"):
    return MeasuredTable(GPU, "sm90a", operands, "made", tuple(MeasuredEntry(N, K, m, cfg, 0.01, 0.01, 0.011)
                                                               for m, cfg in entries))


def row(m, config, ratio, dtype="bfloat16", correct=True):
    return {"id": f"sm90a/sweep/{dtype}/{m}x{N}x{K}", "gate": "perf", "dtype": dtype, "m": m, "n": N, "k": K,
            "config": config, "ratio": ratio, "correct": correct}


def raised(m, dtype="bfloat16"):
    """A cell that raised: run_cell's row has no config and no ratio."""
    return {"id": f"sm90a/sweep/{dtype}/{m}x{N}x{K}", "gate": "perf", "dtype": dtype, "m": m, "n": N, "k": K,
            "status": "fail", "reason": "RuntimeError"}


def test_an_entry_slower_over_the_cells_it_changed_is_put_back():
    old = table((16, SWAP16_C1))
    new = table((1, SWAP16_C1), (16, SWAP16))  # 16 tokens changed, a 1-token entry added
    before = [row(1, "a1 pick", 1.00), row(4, SWAP16_C1.name, 1.10), row(16, SWAP16_C1.name, 1.20),
              row(8, "same", 1.00), row(64, "other", 1.0)]
    after = [row(1, SWAP16_C1.name, 1.03), row(4, SWAP16.name, 1.00), row(16, SWAP16.name, 1.14),
             row(8, "same", 0.50),  # served by the 16-token entry, the same kernel both times: not counted
             row(64, "other", 0.5)]
    verdicts = entry_verdicts(old, new, before, after)
    assert [(v.entry.m, len(v.cells)) for v in verdicts] == [(1, 1), (16, 2)]
    assert verdicts[0].change == pytest.approx(1.03)
    assert verdicts[1].change == pytest.approx(((1.00 / 1.10) * (1.14 / 1.20)) ** 0.5)
    checked, back = checked_table(old, new, verdicts, "the A/B")
    assert [v.entry.m for v in back] == [16]
    assert [(e.m, e.config) for e in checked.entries] == [(1, SWAP16_C1), (16, SWAP16_C1)]
    assert checked.source.startswith("made; then checked on the perf gate's cells (the A/B): put back 4096 x 4096 "
                                     "at 16 tokens (0.929x)")


def test_a_new_entry_put_back_is_dropped_and_a_wrong_or_raising_one_goes_whatever_its_speed():
    old = table((16, SWAP16))
    new = table((1, SWAP16_C1), (16, PICK16))
    before = [row(1, "a1 pick", 1.00), row(16, SWAP16.name, 1.00)]
    after = [row(1, SWAP16_C1.name, 0.90), row(16, PICK16.name, 1.50, correct=False)]
    verdicts = entry_verdicts(old, new, before, after)
    assert [v.wrong for v in verdicts] == [False, True]
    checked, back = checked_table(old, new, verdicts, "ab")
    assert len(back) == 2 and [(e.m, e.config) for e in checked.entries] == [(16, SWAP16)]
    # a cell that raised after the update (no ratio, no config) judges its entry wrong
    verdicts = entry_verdicts(old, new, before, [row(1, SWAP16_C1.name, 1.2), raised(16)])
    assert [(v.entry.m, v.wrong, len(v.cells)) for v in verdicts] == [(1, False, 1), (16, True, 0)]
    assert "at 16 tokens (0.000x, a wrong result or a raise)" in checked_table(old, new, verdicts, "ab")[0].source
    # within the default margin an entry stays; nothing put back leaves the table as it was
    kept, none = checked_table(old, new, entry_verdicts(old, new, before[:1], [row(1, SWAP16_C1.name, 0.99)]), "ab")
    assert none == [] and kept is new


def test_cells_an_added_entry_leaves_to_no_entry_count_against_it():
    """An entry added at 12 tokens ends the 16-token swap entry's range there; a wide tile measured
    at 12 does not serve 4 or 8 tokens (beyond sqrt(2)), so the models run them: the 12-token
    entry is behind that change."""
    old = table((16, SWAP16))
    new = table((12, WIDE), (16, SWAP16))
    before = [row(4, SWAP16.name, 1.0), row(8, SWAP16.name, 1.0), row(12, SWAP16.name, 1.0)]
    after = [row(4, "models", 0.5), row(8, "models", 0.5), row(12, WIDE.name, 1.0)]
    (verdict,) = entry_verdicts(old, new, before, after)
    assert verdict.entry.m == 12 and len(verdict.cells) == 3 and verdict.change == pytest.approx(0.5 ** (2 / 3))


def test_what_is_left_unjudged_and_what_is_refused():
    old = table((16, SWAP16))
    new = table((1, PICK16), (16, SWAP16))
    # other operand classes' rows, other gates and cells missing from one run are left out
    before = [row(1, "a1 pick", 1.0, dtype="fp8_tensorwise"), row(1, "a1 pick", 1.0, dtype="fp8_rowwise")]
    after = [{**r, "config": "another", "ratio": 0.5} for r in before]
    after += [row(1, PICK16.name, 0.5), {**row(1, "x", 0.5), "gate": "gpu", "id": "other"}]
    assert entry_verdicts(old, new, before, after) == []
    assert [(e.m, e.config) for e in unchecked(old, new, [])] == [(1, PICK16)]
    with pytest.raises(ValueError, match="twice"):
        entry_verdicts(old, new, [row(1, "a", 1.0), row(1, "b", 1.0)], [])
    with pytest.raises(ValueError, match="no update"):
        entry_verdicts(table(), table(operands="fp8_precise"), [], [])


def test_table_check_on_the_command_line(tmp_path, capsys):
    from cutedsl_backend.cli import tuning

    files = {"old.json": table((16, SWAP16_C1)).to_json(), "new.json": table((1, PICK16), (16, SWAP16)).to_json(),
             "after.json": {"results": [row(8, SWAP16.name, 1.0), row(16, SWAP16.name, 1.0), raised(32)]}}
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))
    with gzip.open(tmp_path / "before.json.gz", "wt") as f:
        json.dump({"results": [row(8, SWAP16_C1.name, 1.1), row(16, SWAP16_C1.name, 1.1)]}, f)
    assert [r["m"] for r in load_perf_rows([tmp_path / "after.json"])] == [8, 16, 32]
    parser = argparse.ArgumentParser()
    tuning._table_check_arguments(parser)
    args = parser.parse_args(["--old", str(tmp_path / "old.json"), "--new", str(tmp_path / "new.json"),
                              "--before", str(tmp_path / "before.json.gz"), "--after", str(tmp_path / "after.json"),
                              "--source", "sweep-shapes twice", "-o", str(tmp_path / "out.json")])
    assert tuning._table_check(args, parser) == 0
    out = capsys.readouterr().out
    assert "put back   16x4096x4096" in out and f"unchecked  1x4096x4096 {PICK16.name}" in out
    out = MeasuredTable.from_json(json.loads((tmp_path / "out.json").read_text()))
    assert [(e.m, e.config) for e in out.entries] == [(1, PICK16), (16, SWAP16_C1)]
    args.min_change = 0.85  # below the loss (1/1.1): kept
    assert tuning._table_check(args, parser) == 0
    assert "kept       16x4096x4096" in capsys.readouterr().out
    (tmp_path / "other.json").write_text(json.dumps(table(operands="fp8_precise").to_json()))
    args.new = str(tmp_path / "other.json")
    with pytest.raises(SystemExit):  # another class's table
        tuning._table_check(args, parser)
