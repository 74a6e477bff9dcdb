"""`python -m cutedsl_backend picks`: the dispatcher's config and its source per perf-sweep cell,
and against a stored sweep the cells whose config changed (validation.picks). No GPU."""

import json

from cutedsl_backend.validation.picks import band, picks, picks_markdown
from cutedsl_backend.validation.shape_sweep import _config_choice


def test_the_sources_follow_the_gpu_models_tables():
    alone = picks("quick", ["bfloat16"])
    assert {c["source"] for c in alone["cells"]} == {"models"} and alone["gpu"] is None
    h100 = picks("quick", ["bfloat16"], gpu="NVIDIA H100 80GB HBM3")
    assert "measured table" in {c["source"] for c in h100["cells"]}
    h200 = picks("quick", ["bfloat16"], gpu="NVIDIA H200")
    borrowed = [c for c in h200["cells"] if c["source"] == "borrowed table"]
    assert borrowed and all(c["table_gpu"] == "NVIDIA H100 80GB HBM3" and c["m"] > 64 for c in borrowed)
    assert h200["sources"]["bfloat16"]["borrowed table"] == len(borrowed)
    for c in h200["cells"]:
        assert c["config"] == _config_choice("bfloat16", c["m"], c["n"], c["k"], gpu="NVIDIA H200")[0]


def _stored(cells, ratio_of, gate=0.85):
    return {"perf": {"gate_min_ratio": gate, "device": "NVIDIA H200", "results": [
        {"dtype": c["dtype"], "m": c["m"], "n": c["n"], "k": c["k"], "ratio": ratio_of(c), "config": config}
        for c, config in cells] + [{"shape": "1x2x3", "ratio": 1.0, "config": "x"}]}}  # a row of an older schema


def test_against_a_stored_sweep_the_changed_and_the_slow_unchanged_cells_are_counted():
    now = picks("quick", ["bfloat16"], gpu="NVIDIA H200")["cells"]
    same, moved, fast, launched = now[0], now[1], now[2], now[3]
    other = "sm90a_cooperative_128x256xauto_c1x1_sauto_rn8_k3"
    assert other not in {same["config"], moved["config"]}
    # the stored config with a moved last tile ("_edge") or launched dependent ("_pdl") is the same
    # config as the sweeps compare them; a ratio of 0.87 is slow only under the stored gate (0.85: not)
    stored = _stored([(same, same["config"] + ("" if same["config"].endswith("_edge") else "_edge")),
                      (moved, other), (fast, fast["config"]), (launched, launched["config"] + "_pdl")],
                     lambda c: 0.8 if c is same or c is moved else 0.87)
    result = picks("quick", ["bfloat16"], gpu="NVIDIA H200", against=stored)
    assert result["against"] == {"device": "NVIDIA H200", "cells": 4, "rows_unreadable": 1, "compared": 4}
    assert [(c["m"], c["n"]) for c in result["slow_unchanged"]] == [(same["m"], same["n"])]
    counts = result["compared"]["bfloat16"]
    keys = ("changed_ok", "changed_slow", "same_ok", "same_slow")
    total = {key: sum(b[key] for b in counts.values()) for key in keys}
    assert total == {"changed_ok": 0, "changed_slow": 1, "same_ok": 2, "same_slow": 1}
    assert counts[band(moved["m"])]["changed_slow"] == 1
    text = "\n".join(picks_markdown(result))
    assert "Slow then, the same config now" in text and f"{same['m']}x{same['n']}x{same['k']}" in text


def test_picks_command_writes_its_cells(tmp_path, capsys):
    from cutedsl_backend.cli import main

    out = tmp_path / "picks.json"
    assert main(["picks", "--tag", "quick", "--dtypes", "fp8_tensorwise", "--gpu", "NVIDIA H200",
                 "--ms", "192", "--json", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["gpu"] == "NVIDIA H200" and {c["m"] for c in result["cells"]} == {192}
    # the H200's own FP8 table serves 192 tokens (where its entry names the models' pick: "models")
    assert "borrowed table" not in {c["source"] for c in result["cells"]} and len(result["cells"]) == 2
    assert "Picks on NVIDIA H200" in capsys.readouterr().out


def test_a_sweep_shapes_file_is_read_as_a_report_is():
    """`sweep-shapes --json` keeps its rows at the top level, a report under ``perf``."""
    now = picks("quick", ["bfloat16"], gpu="NVIDIA H200")["cells"]
    report = _stored([(c, c["config"]) for c in now[:2]], lambda c: 0.8)
    flat = report["perf"]
    a, b = (picks("quick", ["bfloat16"], gpu="NVIDIA H200", against=x) for x in (report, flat))
    assert a["compared"] == b["compared"] and len(a["slow_unchanged"]) == 2


def test_a_report_that_ran_no_gpu_has_no_cells_to_compare():
    result = picks("quick", ["bfloat16"], gpu="NVIDIA H200", against={"perf": None, "results": []})
    assert result["slow_unchanged"] == [] and not any(
        sum(n.values()) for bands in result["compared"].values() for n in bands.values())
