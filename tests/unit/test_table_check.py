"""A table update checked on the perf gate's cells (validation.table_check, ``table-check``): the
updated entries whose cells ran slower with the update than without, on one machine, are put back
as the old table had them; cells that ran the same kernel in both runs do not count."""

import argparse
import json

import pytest

from cutedsl_backend.configs import GemmConfig
from cutedsl_backend.configs.measured import MeasuredEntry, MeasuredTable
from cutedsl_backend.validation.table_check import checked_table, entry_verdicts, load_perf_rows

GPU = "NVIDIA Test GPU"
N, K = 4096, 4096
PICK16 = GemmConfig.from_name("sm90a_pingpong_64x64xauto_c1x1_sauto_rn8_a16")
SWAP16 = GemmConfig.from_name("sm90a_pingpong_64x16xauto_c4x1_sauto_rn8_swap")  # serves 2-16 tokens
SWAP16_C1 = GemmConfig.from_name("sm90a_pingpong_64x16xauto_c1x1_sauto_rn8_swap")


def table(*entries, n=N):
    return MeasuredTable(GPU, "sm90a", "16bit", "made", tuple(MeasuredEntry(n, K, m, cfg, 0.01, 0.01, 0.011)
                                                             for m, cfg in entries))


def row(m, config, ratio, n=N, correct=True):
    return {"id": f"sm90a/sweep/bfloat16/{m}x{n}x{K}", "gate": "perf", "dtype": "bfloat16", "m": m, "n": n, "k": K,
            "config": config, "ratio": ratio, "correct": correct}


def test_an_entry_slower_over_the_cells_it_serves_is_put_back():
    old = table((16, SWAP16_C1))
    new = table((1, SWAP16_C1), (16, SWAP16))  # 16 tokens changed, a 1-token entry added
    before = [row(1, "a1 pick", 1.00), row(4, SWAP16_C1.name, 1.10), row(16, SWAP16_C1.name, 1.20),
              row(64, "other", 1.0)]
    after = [row(1, SWAP16_C1.name, 1.03), row(4, SWAP16.name, 1.00), row(16, SWAP16.name, 1.14),
             row(64, "other", 0.5)]  # 64 tokens: the same kernel before and after, not counted
    verdicts = entry_verdicts(old, new, before, after)
    assert [(v.entry.m, len(v.cells)) for v in verdicts] == [(1, 1), (16, 2)]
    assert verdicts[0].change == pytest.approx(1.03)
    assert verdicts[1].change == pytest.approx(((1.00 / 1.10) * (1.14 / 1.20)) ** 0.5)
    checked, back = checked_table(old, new, verdicts, "the A/B")
    assert [v.entry.m for v in back] == [16]
    assert [(e.m, e.config) for e in checked.entries] == [(1, SWAP16_C1), (16, SWAP16_C1)]
    assert checked.source.startswith("made; then checked on the perf gate's cells (the A/B): put back 4096 x 4096 "
                                     "at 16 tokens")


def test_a_new_entry_put_back_is_dropped_and_a_wrong_one_goes_whatever_its_speed():
    old = table((16, SWAP16))
    new = table((1, SWAP16_C1), (16, PICK16))
    before = [row(1, "a1 pick", 1.00), row(16, SWAP16.name, 1.00)]
    after = [row(1, SWAP16_C1.name, 0.90), row(16, PICK16.name, 1.50, correct=False)]
    verdicts = entry_verdicts(old, new, before, after)
    assert [v.wrong for v in verdicts] == [False, True]
    checked, back = checked_table(old, new, verdicts, "ab")
    assert len(back) == 2 and [(e.m, e.config) for e in checked.entries] == [(16, SWAP16)]
    # within the default margin an entry stays; nothing put back leaves the table as it was
    kept, none = checked_table(old, new, entry_verdicts(old, new, before[:1], [row(1, SWAP16_C1.name, 0.99)]), "ab")
    assert none == [] and kept is new


def test_tables_of_another_class_or_gpu_are_no_update_of_each_other():
    other = MeasuredTable(GPU, "sm90a", "fp8_precise", "made", ())
    with pytest.raises(ValueError, match="no update"):
        entry_verdicts(table(), other, [], [])


def test_table_check_on_the_command_line(tmp_path, capsys):
    from cutedsl_backend.cli import tuning

    files = {"old.json": table((16, SWAP16_C1)).to_json(), "new.json": table((16, SWAP16)).to_json(),
             "before.json": {"results": [row(8, SWAP16_C1.name, 1.1), row(16, SWAP16_C1.name, 1.1)]},
             "after.json": {"results": [row(8, SWAP16.name, 1.0), row(16, SWAP16.name, 1.0)]}}
    for name, data in files.items():
        (tmp_path / name).write_text(json.dumps(data))
    assert len(load_perf_rows([tmp_path / "after.json"])) == 2
    parser = argparse.ArgumentParser()
    tuning._table_check_arguments(parser)
    args = parser.parse_args(["--old", str(tmp_path / "old.json"), "--new", str(tmp_path / "new.json"),
                              "--before", str(tmp_path / "before.json"), "--after", str(tmp_path / "after.json"),
                              "--source", "sweep-shapes twice", "-o", str(tmp_path / "out.json")])
    assert tuning._table_check(args, parser) == 0
    assert "put back   16x4096x4096" in capsys.readouterr().out
    out = MeasuredTable.from_json(json.loads((tmp_path / "out.json").read_text()))
    assert [(e.m, e.config) for e in out.entries] == [(16, SWAP16_C1)]
    args.min_change = 0.85  # below the loss (1/1.1): kept
    assert tuning._table_check(args, parser) == 0
    assert "kept       16x4096x4096" in capsys.readouterr().out
    (tmp_path / "other.json").write_text(json.dumps(MeasuredTable(GPU, "sm90a", "fp8_precise", "m", ()).to_json()))
    args.new = str(tmp_path / "other.json")
    with pytest.raises(SystemExit):  # another class's table
        tuning._table_check(args, parser)
