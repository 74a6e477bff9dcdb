"""The tuning sweeps' logic on the CPU (their timings need a GPU): ``sweep-gated`` and
``sweep-decode`` run every candidate, check each result against float64, leave a wrong one out of
the times, and report the pick beside the fastest candidate and the peers."""

import pytest

torch = pytest.importorskip("torch")


def test_sweep_gated_checks_results_and_reports_the_pick(monkeypatch):
    import cutedsl_backend as cb
    from cutedsl_backend.validation import tuning_sweeps as ts

    compiled = []
    monkeypatch.setattr(ts, "precompile", lambda pairs, workers=None: [
        compiled.append(p[1].name) or (p[1].name, 0.0, None) for p in pairs])
    broken = {}

    def gated(a, w_gate, w_up, *, config, out):
        # torch's result, except for the configs the test breaks: one pairs the wrong columns,
        # one never writes its last rows (the previous candidate's values must not pass for them)
        y = (torch.nn.functional.silu(a.float() @ w_gate.float().t()) * (a.float() @ w_up.float().t())).to(out.dtype)
        if config.name == broken.get("rolled"):
            return out.copy_(y.roll(1, dims=1))
        if config.name == broken.get("short"):
            out[:-8].copy_(y[:-8])
            return out
        return out.copy_(y)

    monkeypatch.setattr(cb, "gemm_gated", gated)
    calls = []

    def timer(fn):
        fn()
        calls.append(fn)
        return 1.0 + len(calls) * 1e-3  # distinct, increasing: the earliest timed is the fastest

    from cutedsl_backend.configs import default_config
    from cutedsl_backend.epilogue import EpilogueSpec
    from cutedsl_backend.problem import GemmProblem

    m, n, k = 16, 64, 128
    cands = ts.gated_candidates(GemmProblem(m, 2 * n, k, 1, "bfloat16", "bfloat16", "k", "k", "sm90a"),
                                EpilogueSpec(gated="silu"))
    broken.update(rolled=cands[-1].name, short=cands[-2].name)
    lines = []
    rows = ts.sweep_gated(ms=(m,), n=n, k=k, log=lines.append, device="cpu", timer=timer, arch="sm90a")
    (row,) = rows
    assert set(row["peer_ms"]) == {"cublas+silu_mul", "cublas_gemm"}
    assert row["pick"] == default_config(GemmProblem(m, 2 * n, k, 1, "bfloat16", "bfloat16", "k", "k", "sm90a"),
                                         epilogue=EpilogueSpec(gated="silu")).name
    assert row["pick"] in row["times"]
    for name in broken.values():
        assert name not in row["times"] and name in row["errors"], name
        assert any("WRONG" in line and name in line for line in lines), name
    assert set(row["times"]) == {c.name for c in cands} - set(broken.values())
    assert any(line.startswith(f"{m}x{2 * n}x{k}: cuBLAS + silu*mul") for line in lines)
    assert sorted(compiled) == sorted(c.name for c in cands)
    assert any(c.cluster_m == 2 for c in cands)  # B multicast is among the swept


def test_sweep_decode_checks_results_and_a_table_never_names_a_wrong_config(monkeypatch):
    import cutedsl_backend as cb
    from cutedsl_backend.configs import default_config
    from cutedsl_backend.configs.measured import table_from_sweeps
    from cutedsl_backend.validation import sweep_spaces as sp
    from cutedsl_backend.validation import tuning_sweeps as ts

    monkeypatch.setattr(ts, "precompile", lambda pairs, workers=None: [(p[1].name, 0.0, None) for p in pairs])
    cands = sp.swap_candidates()
    broken = {"rolled": cands[0].name, "short": cands[1].name, "raises": cands[2].name}

    def gemm(a, b, *, config, out):
        # torch's result, except for the configs the test breaks: one shifts the columns, one never
        # writes its last rows (the previous candidate's values must not pass for them), one raises
        y = (a.float() @ b.float()).to(out.dtype)
        if config.name == broken["rolled"]:
            return out.copy_(y.roll(1, dims=1))
        if config.name == broken["short"]:
            out[:-8].copy_(y[:-8])
            return out
        if config.name == broken["raises"]:
            raise RuntimeError("launch failed")
        return out.copy_(y)

    monkeypatch.setattr(cb, "gemm", gemm)
    timed = []

    def timer(fn):
        timed.append(fn)
        return 1.0 + len(timed) * 1e-3  # distinct, increasing: the earliest timed is the fastest

    lines = []
    rows = ts.sweep_decode(ms=(96,), space="swap", models=["phi3-mini"], log=lines.append, device="cpu",
                           timer=timer)
    assert rows
    for row in rows:
        assert set(broken.values()) <= set(row["wrong"]) and not set(broken.values()) & set(row["times"])
        problem, _ = sp.sweep_problem("bfloat16", 96, row["n"], row["k"])
        assert row["times"] and row["pick"] == default_config(problem).name
    assert any("WRONG" in line and broken["rolled"] in line for line in lines)
    assert any("RuntimeError" in line and broken["raises"] in line for line in lines)
    table = table_from_sweeps(rows, "NVIDIA H200", "test")
    assert table.entries and not {e.config.name for e in table.entries} & set(broken.values())


def test_the_decode_sweep_times_the_configs_loading_the_rows_m_needs(monkeypatch):
    """At 16 tokens the few-token sweep times the 16-row A loads of every width (32 and 160 wide
    too, which the model does not rank) and K split, besides the models' pick; no 32- or 64-row
    load (more traffic for the same result)."""
    import cutedsl_backend as cb
    from cutedsl_backend.configs import DECODE_MODEL
    from cutedsl_backend.validation import tuning_sweeps as ts

    monkeypatch.setattr(ts, "precompile", lambda pairs, workers=None: [(p[1].name, 0.0, None) for p in pairs])
    monkeypatch.setattr(cb, "gemm", lambda a, b, *, config, out: out.copy_((a.float() @ b.float()).to(out.dtype)))
    rows = ts.sweep_decode(ms=(16,), space="decode", models=["phi3-mini"], log=lambda *a: None, device="cpu",
                           timer=lambda fn: 1.0)
    assert rows
    for row in rows:
        timed = {name for name in row["times"] if name != row["pick"]}
        assert timed and all(name.endswith("_a16") for name in timed)
        widths = {int(name.split("_")[2].split("x")[1]) for name in timed}
        assert widths == {32, 160, *DECODE_MODEL.widths}
    # --stream-k: each of them without K slices in its stream-K form too
    rows = ts.sweep_decode(ms=(16,), space="decode", models=["phi3-mini"], log=lambda *a: None, device="cpu",
                           timer=lambda fn: 1.0, stream_k=True)
    for row in rows:
        streamed = {name.removesuffix("_sk") for name in row["times"] if name.endswith("_sk")}
        unsplit = {name for name in row["times"] if not name.endswith("_sk") and "_k" not in name.split("rn8")[1]}
        assert streamed and streamed == unsplit


def test_a_prior_tables_sweep_times_its_configs_near_each_cell_and_the_picks():
    """sweep-decode --space prior: per cell exactly the configs another GPU's table names for that
    projection near M (up to 64 tokens the few-token entry that would serve M), each with clusters
    1x1, 2x1 and 1x2 (a 64-row swap tile without K slices 4x1 and 4x2 too), plus the models' pick
    and the ranking's best unswapped config - checked against float64 and timed like any sweep's;
    never another projection's configs."""
    import argparse
    from unittest import mock

    import cutedsl_backend as cb
    from cutedsl_backend.configs import GemmConfig, default_config, is_valid, rank_configs
    from cutedsl_backend.configs.measured import MeasuredEntry, MeasuredTable
    from cutedsl_backend.validation import sweep_spaces as sp
    from cutedsl_backend.validation import tuning_sweeps as ts

    o, qkv = (3072, 3072), (9216, 3072)  # phi3-mini's o and qkv projections
    near = GemmConfig(64, 128, schedule="pingpong", cluster_n=2, swap_ab=True)
    far = GemmConfig(128, 256, cluster_m=2)
    few = GemmConfig(64, 64, schedule="pingpong", splits=4, a_rows=16)
    wide = GemmConfig(128, 192, cluster_n=2)
    prior = MeasuredTable("NVIDIA Other", "sm90a", "16bit", "test", tuple(
        MeasuredEntry(n, k, m, c, 0.01, 0.01, 0.01)
        for (n, k), m, c in ((o, 16, few), (o, 32, few.replace(a_rows=32)), (o, 192, near), (o, 1024, far),
                             (o, 160, None), (qkv, 128, wide))))
    assert sp.prior_candidates(prior, *o, 128) == [near, near.replace(cluster_n=1),
                                                   near.replace(cluster_m=2, cluster_n=1),
                                                   near.replace(cluster_m=4, cluster_n=1),  # a 64-row unsplit
                                                   near.replace(cluster_m=4, cluster_n=2)]  # swap tile: 4-row too
    assert sp.prior_candidates(prior, *o, 16) == [few, few.replace(cluster_m=2), few.replace(cluster_n=2)]
    assert sp.prior_candidates(prior, *o, 8) == sp.prior_candidates(prior, *o, 16)  # 16 serves 1-16
    assert sp.prior_candidates(prior, *o, 24)[0] == few.replace(a_rows=32)  # 32 serves 17-32
    assert sp.prior_candidates(prior, *o, 48) == []  # no entry loads a whole 64-row tile
    assert sp.prior_candidates(prior, 4096, 4096, 128) == []
    compiled = []

    def gemm(a, b, *, config, out):
        return out.copy_((a.float() @ b.float()).to(out.dtype))

    with mock.patch.object(ts, "precompile", lambda pairs, workers=None: [
            compiled.append(p[1]) or (p[1].name, 0.0, None) for p in pairs]), mock.patch.object(cb, "gemm", gemm):
        rows = ts.sweep_decode(ms=(128,), space="prior", prior=prior, models=["phi3-mini"], log=lambda *a: None,
                               device="cpu", timer=lambda fn: 1.0)
    assert set(compiled) == set(sp.prior_candidates(prior, *o, 128) + sp.prior_candidates(prior, *qkv, 128))
    assert far not in compiled  # 1024 is more than twice 128
    assert {(r["n"], r["k"]) for r in rows} >= {o, qkv}
    for row in rows:
        problem, _ = sp.sweep_problem("bfloat16", 128, row["n"], row["k"])
        extra = {default_config(problem), next(c for c in rank_configs(problem) if not c.swap_ab)}
        named = sp.prior_candidates(prior, row["n"], row["k"], 128)
        expected = {c.tiling().name for c in named + list(extra)
                    if is_valid(c, problem.swapped() if c.swap_ab else problem)}
        assert set(row["times"]) == expected and row["pick"] in row["times"], (row["n"], row["k"])
    with pytest.raises(ValueError, match="prior table"):
        ts.sweep_decode(ms=(128,), space="prior", models=["phi3-mini"], device="cpu", timer=lambda fn: 1.0)
    with pytest.raises(ValueError, match="no stream-K"):
        ts.sweep_decode(ms=(128,), space="prior", prior=prior, stream_k=True, models=["phi3-mini"], device="cpu",
                        timer=lambda fn: 1.0)
    # the command line: --space prior and --prior together, the table's class the --dtype's
    from cutedsl_backend.cli import tuning

    parser = argparse.ArgumentParser()
    tuning._sweep_decode_arguments(parser)
    for argv in (["--space", "prior"], ["--space", "mid", "--prior", "t.json"],
                 ["--space", "prior", "--prior", "cutedsl_backend/configs/tables/nvidia-h100-80gb-hbm3-fp8.json"],
                 ["--space", "prior", "--prior", "cutedsl_backend/configs/tables/nvidia-h100-80gb-hbm3-16bit.json",
                  "--stream-k"]):
        with mock.patch.object(ts, "sweep_decode", side_effect=AssertionError("not to be swept")), \
                pytest.raises(SystemExit):
            tuning._sweep_decode(parser.parse_args(argv), parser)


def test_a_cluster_sweep_times_the_tables_choice_beside_four_row_clusters_as_they_run():
    """sweep-decode --space clusters: per cell the entry this GPU's table serves it with, then 64-row
    swap-AB tiles of the widths that cut the tokens into at most three tiles, unclustered, 4 x 1 and
    4 x 2; each timed as the dispatcher runs it (a partial last tile moved back to the edge) and
    recorded under its unmoved name, the name a table keeps."""
    from unittest import mock

    import cutedsl_backend as cb
    from cutedsl_backend.configs import GemmConfig
    from cutedsl_backend.configs.measured import MeasuredEntry, MeasuredTable
    from cutedsl_backend.validation import sweep_spaces as sp
    from cutedsl_backend.validation import tuning_sweeps as ts

    o = (3072, 3072)  # phi3-mini's o projection
    served = GemmConfig(64, 160, schedule="pingpong", splits=2, swap_ab=True)
    table = MeasuredTable("NVIDIA Test", "sm90a", "16bit", "test", (MeasuredEntry(*o, 160, served, 0.01, 0.01, 0.01),))
    cands = sp.cluster_candidates(table, *o, 144)
    assert cands[0] == served
    widths = {c.tile_n for c in cands[1:]}
    assert widths == {64, 80, 96, 128, 160}  # 32 would cut 144 tokens into five tiles
    assert {(c.cluster_m, c.cluster_n) for c in cands[1:]} == {(1, 1), (4, 1), (4, 2)}
    assert all(c.swap_ab and c.tile_m == 64 and c.splits == 1 for c in cands[1:])
    assert sp.cluster_candidates(table, 4096, 4096, 144)[0].tile_n == 64  # no entry: the new tiles only
    wide = [c for c in sp.cluster_candidates(table, *o, 320) if c.tile_m == 128]  # above 192 tokens
    assert {(c.tile_n, c.cluster_m, c.cluster_n) for c in wide} == {
        (w, cm, cn) for w in (96, 128, 160, 192, 256) for cm, cn in ((2, 1), (4, 1), (4, 2))}
    # 320 tokens in four 80-wide tiles (the H100 probes' 64 x 80 in 4 x 2), not five of 64
    assert {c.tile_n for c in sp.cluster_candidates(table, *o, 320) if c.tile_m == 64} == {80, 96, 128, 160}
    ran = []

    def gemm(a, b, *, config, out):
        ran.append(config)
        return out.copy_((a.float() @ b.float()).to(out.dtype))

    with mock.patch.object(ts, "precompile", lambda pairs, workers=None: [(p[1].name, 0.0, None) for p in pairs]), \
            mock.patch.object(cb, "gemm", gemm):
        rows = ts.sweep_decode(ms=(144,), space="clusters", prior=table, models=["phi3-mini"], log=lambda *a: None,
                               device="cpu", timer=lambda fn: (fn(), 1.0)[1])  # times what it calls
    row = next(r for r in rows if (r["n"], r["k"]) == o)
    assert {c.name for c in cands} <= set(row["times"])
    c4x2 = GemmConfig(64, 96, schedule="pingpong", cluster_m=4, cluster_n=2, swap_ab=True)
    assert c4x2.replace(edge=True) in ran and c4x2 not in ran  # 144 tokens: the second tile moved back
    assert not any(name.endswith("_edge") for name in row["times"])
    # up to 64 tokens: one token tile as wide as the tokens, 64-row weight tiles in 1 x 1, 2 x 1
    # and 4 x 1 clusters, one or two K slices
    few = sp.cluster_candidates(table, *o, 12)
    assert {(c.tile_m, c.tile_n, c.cluster_m, c.cluster_n, c.splits) for c in few} == {
        (64, 16, cm, 1, s) for cm in (1, 2, 4) for s in (1, 2)}
    assert all(c.swap_ab for c in few) and {c.tile_n for c in sp.cluster_candidates(table, *o, 33)} == {48}


def test_a_tuning_sweep_times_every_entry_the_tables_serve_the_cell_with(monkeypatch):
    """On a GPU model tables serve, each row above the few-token range also times every table's
    entry for the cell, though its space has no such candidate: on the H200 at 192 FP8 tokens its
    own entry and the H100's it hides (a 4 x 2 cluster), recorded under ``served``; none without a
    GPU model, none in the few-token sweep."""
    import cutedsl_backend as cb
    from cutedsl_backend.configs.measured import MEASURED
    from cutedsl_backend.validation import sweep_spaces as sp
    from cutedsl_backend.validation import tuning_sweeps as ts

    def scaled_mm(a, b, sa, sb, *, out, config, use_fast_accum):
        return out.copy_((a.float() @ b.float() * sa * sb).to(out.dtype))

    monkeypatch.setattr(ts, "precompile", lambda pairs, workers=None: [(p[1].name, 0.0, None) for p in pairs])
    monkeypatch.setattr(cb, "scaled_mm", scaled_mm)
    monkeypatch.setattr(ts, "mid_candidates", lambda: sp.mid_candidates()[:1])  # short sweeps
    monkeypatch.setattr(ts, "decode_candidates", lambda: sp.decode_candidates()[:1])
    problem, spec = sp.sweep_problem("fp8_tensorwise", 192, 3072, 3072)
    own, lent = (t.entry(problem, spec) for t in MEASURED.for_gpu("NVIDIA H200")
                 if t.operands == "fp8_precise" and t.entry(problem, spec) is not None)
    assert own.config != lent.config and lent.config.cluster_m == 4  # the H200's own entry hides the H100's
    kw = dict(ms=(192,), space="mid", models=["phi3-mini"], dtype="fp8_tensorwise", log=lambda *a: None,
              device="cpu", timer=lambda fn: 1.0)
    row = next(r for r in ts.sweep_decode(gpu="NVIDIA H200", **kw) if (r["n"], r["k"]) == (3072, 3072))
    assert {own.config.name, lent.config.name} <= set(row["times"])
    assert row["served"] == {own.config.name: ["NVIDIA H200", 192],
                             lent.config.name: ["NVIDIA H100 80GB HBM3", 192]}
    # no GPU model: no table
    row = next(r for r in ts.sweep_decode(**kw) if (r["n"], r["k"]) == (3072, 3072))
    assert lent.config.name not in row["times"] and "served" not in row
    few = ts.sweep_decode(**{**kw, "ms": (16,), "space": "decode"}, gpu="NVIDIA H100 80GB HBM3")
    assert not any("served" in r for r in few)
