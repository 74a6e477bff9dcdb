"""The memory rules (problem.py): zero strides, self-overlap, byte spans and range overlap, checked
against torch's own view semantics on CPU tensors."""

import pytest

from cutedsl_backend.problem import byte_span, has_zero_stride, overlaps_itself, ranges_overlap

torch = pytest.importorskip("torch")


def _elements_alias(t) -> bool:
    """Ground truth: two indices of ``t`` address one element (by enumerating offsets)."""
    idx = torch.arange(t.numel()).reshape(t.shape)
    offsets = torch.zeros(t.shape, dtype=torch.long)
    for d, s in enumerate(t.stride()):
        shape = [1] * t.dim()
        shape[d] = t.shape[d]
        offsets = offsets + torch.arange(t.shape[d]).reshape(shape) * s
    del idx
    return offsets.reshape(-1).unique().numel() != t.numel()


CASES = {
    "row-major": lambda: torch.empty(6, 8),
    "column-major view": lambda: torch.empty(8, 6).t(),
    "expanded rows (stride 0)": lambda: torch.empty(1, 8).expand(6, 8),
    "expanded batch": lambda: torch.empty(6, 8).expand(3, 6, 8),
    "overlapping rows": lambda: torch.empty(64).as_strided((6, 8), (4, 1)),
    "padded rows": lambda: torch.empty(6, 16)[:, :8],
    "batch of padded rows": lambda: torch.empty(3, 6, 16)[:, :, :8],
    "overlapping batches": lambda: torch.empty(200).as_strided((3, 6, 8), (40, 8, 1)),
    "size-1 dim with stride 0": lambda: torch.empty(1, 8).expand(1, 8),
}


@pytest.mark.parametrize("name", list(CASES))
def test_self_overlap_matches_enumeration(name):
    t = CASES[name]()
    aliasing = has_zero_stride(t.shape, t.stride()) or overlaps_itself(t.shape, t.stride())
    assert aliasing == _elements_alias(t), name


def test_interleaved_layout_is_reported_as_overlapping():
    """A layout that interleaves two dims without overlap is reported conservatively (copied or
    refused, never computed wrong)."""
    t = torch.empty(64).as_strided((2, 3), (3, 2))  # offsets 0 2 4 3 5 7: interleaved, no overlap
    assert not _elements_alias(t)
    assert overlaps_itself(t.shape, t.stride())


def test_byte_span_and_overlap():
    base = torch.empty(10, 16, dtype=torch.bfloat16)
    top, bottom = base[:5], base[5:]
    assert byte_span(top.shape, top.stride(), 2) == 5 * 16 * 2
    assert byte_span((0, 4), (4, 1), 2) == 0
    span = lambda t: (t.data_ptr(), byte_span(t.shape, t.stride(), t.element_size()))  # noqa: E731
    assert not ranges_overlap(*span(top), *span(bottom))
    assert ranges_overlap(*span(base), *span(bottom))
    assert ranges_overlap(*span(base[2:7]), *span(top))
    assert not ranges_overlap(*span(base[:0]), *span(base))


def test_outputs_tma_cannot_store_are_staged():
    """The eager API writes an output through a padded buffer exactly where TMA cannot store its
    rows: N times the element size not a multiple of 16 bytes (N = 1, 7, 100 in bf16), or a row or
    batch stride that is not."""
    from cutedsl_backend.operands import tma_writable

    def writable(*shape, strides=None, dtype=torch.bfloat16):
        t = torch.empty(shape, dtype=dtype) if strides is None else torch.empty_strided(shape, strides, dtype=dtype)
        return tma_writable(t)

    assert writable(1, 64, 128) and writable(3, 64, 8) and writable(1, 64, 4, dtype=torch.float32)
    assert not writable(1, 64, 1) and not writable(1, 64, 7) and not writable(2, 48, 100)
    assert writable(1, 64, 100, strides=(64 * 104, 104, 1))  # padded rows: stored in place
    assert not writable(2, 64, 8, strides=(64 * 8 + 4, 8, 1))  # batch stride off 16 bytes
    assert writable(1, 64, 8, strides=(7, 8, 1))  # one batch: its stride is never used


@pytest.mark.parametrize("shape,strides,cols", [((2, 1, 1), (8, 1, 1), True), ((3, 1, 1), (8, 8, 1), True),
                                                ((1, 1, 264), (264, 264, 1), True), ((2, 5, 1), (8, 1, 1), False),
                                                ((1, 64, 128), (8192, 128, 1), True)])
def test_descriptor_strides_of_unit_extents_are_aligned_and_unambiguous(shape, strides, cols):
    """Extent-1 dimensions (M = 1, N = 1, one batch) get aligned strides, and the contiguous
    dimension stays the only unit-stride one (the DSL found no leading dimension otherwise: a
    fuzzer finding, M = N = 1 batched)."""
    from cutedsl_backend.operands import rcl

    t = torch.empty_strided(shape, strides, dtype=torch.bfloat16)
    _, (R, C, L), (sr, sc, sl) = rcl(t, cols, 8)
    lead, others = (sc, (sr, sl)) if cols else (sr, (sc, sl))
    assert lead == 1 and all(s % 8 == 0 and s > 0 for s in others)
    if shape[1] > 1 and shape[2] > 1:
        assert (sr, sc) == strides[1:]  # real strides are kept


def test_one_residual_broadcast_rule_for_eager_and_inductor():
    """epilogue.residual_broadcast: rows repeated (row stride 0, M > 1) or batches repeated (a 2-D
    residual or batch stride 0 under a batched GEMM); the eager API copies such a residual, Inductor
    does not fuse it (both call this one rule)."""
    from cutedsl_backend.epilogue import residual_broadcast

    assert residual_broadcast(rows=64, row_stride=0, batched=False, batch_stride=None)
    assert not residual_broadcast(rows=1, row_stride=0, batched=False, batch_stride=None)  # one row: no repeat
    assert residual_broadcast(rows=64, row_stride=128, batched=True, batch_stride=None)  # 2-D under a batch
    assert residual_broadcast(rows=64, row_stride=128, batched=True, batch_stride=0)
    assert not residual_broadcast(rows=64, row_stride=128, batched=True, batch_stride=8192)
    assert not residual_broadcast(rows=64, row_stride=128, batched=False, batch_stride=0)


def test_a_residual_of_the_results_shape_flattens_with_the_rows():
    """(L', M', K) @ (K, N) runs as one (L'*M', K) GEMM: a residual of the result's shape (L', M', N)
    is read with its rows flattened alike (a view when its strides allow), on the first call (the
    checked operands) and on every later one (the per-call views) the same way."""
    from cutedsl_backend.operands import EpilogueOperands, epilogue_views
    from cutedsl_backend.problem import GemmProblem, UnsupportedGemmError

    p = GemmProblem(15, 8, 64, 1, "bfloat16", "bfloat16", "k", "k", "sm90a", packed=False)
    res = torch.randn(3, 5, 8, dtype=torch.bfloat16)
    epi = EpilogueOperands(p, torch.device("cpu"), None, res, None, None, None)
    per_call = epilogue_views(None, res, None, None, p)[3]
    for view in (epi.residual, per_call):
        assert view.shape == (15, 8, 1) and view.data_ptr() == res.data_ptr()
        assert torch.equal(view[..., 0], res.reshape(15, 8))
    strided = torch.randn(3, 8, 8, dtype=torch.bfloat16)[:, :5]  # rows not evenly spaced: a copy
    assert torch.equal(epilogue_views(None, strided, None, None, p)[3][..., 0], strided.reshape(15, 8))
    with pytest.raises(UnsupportedGemmError, match="residual: shape must be"):
        EpilogueOperands(p, torch.device("cpu"), None, torch.randn(5, 3, 7, dtype=torch.bfloat16), None, None, None)


@pytest.mark.parametrize("shape,strides", [((1, 1, 1), (1, 1, 1)), ((1, 1, 1), (8, 8, 1)), ((1, 1, 5), (5, 5, 1)),
                                           ((1, 1, 5), (5, 1, 1)), ((2, 1, 3), (3, 3, 1)), ((1, 4, 1), (4, 1, 1)),
                                           ((3, 1, 1), (1, 1, 1))])
def test_the_residual_view_has_one_unit_stride_and_aligned_others(shape, strides):
    """The DSL takes a tensor's unit stride for its leading dimension and TMA checks every other
    stride for 16-byte alignment: the (M, N, L) residual view keeps N the only unit-stride
    dimension whatever the extents (a (1, 1) residual had three unit strides: a foreign error from
    the DSL, found by the scaled_mm fuzzer on an H100), and reads the same values."""
    import torch

    from cutedsl_backend.operands import residual_view

    base = torch.randn(64, dtype=torch.bfloat16)
    residual = base.as_strided(shape, strides)
    view = residual_view(residual)
    M, N, L = view.shape
    assert (M, N, L) == (shape[1], shape[2], shape[0])
    units = [d for d, st in enumerate(view.stride()) if st == 1]
    assert units == [1], view.stride()
    # an extent-1 dimension's stride is never used: an aligned one, as TMA's descriptor checks
    assert all(st * 2 % 16 == 0 for d, st in enumerate(view.stride()) if d != 1 and view.shape[d] == 1), view.stride()
    torch.testing.assert_close(view.permute(2, 0, 1), residual, rtol=0, atol=0)
