"""CuTe DSL pieces that apply an EpilogueSpec (cutedsl_backend/epilogue.py) to a fragment of
fp32 accumulators, and the TMA-loaded residual ring (ResidualTma; the sm90a kernel uses it, sm100a
still gathers). Shared by the sm90 and sm100 kernels."""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import cutlass
import cutlass.cute as cute
import cutlass.pipeline as pipeline
from cutlass import Float32

from ..configs import EPI_STAGES, RES_STAGES


def _fast_tanh(x):
    # tanh.approx.f32 (one MUFU.TANH, relative error ~2^-11): the DSL's default tanh is the
    # accurate expansion, ~20 instructions per element, which the non-overlapped cooperative
    # epilogue pays in full. (DSL releases without the ``approx`` flag fall back to fastmath.)
    try:
        return cute.math.tanh(x, approx=True)
    except TypeError:  # pragma: no cover - depends on the installed DSL
        return cute.math.tanh(x, fastmath=True)


def _act_relu(x):
    # torch.relu keeps NaN: an IEEE maximum (max.NaN, one instruction) propagates it where a
    # plain max(x, 0) would return 0; releases without it select on x < 0 (False for NaN)
    try:
        return cute.math.max(x, cute.full_like(x, 0.0), propagate_nan=True)
    except (AttributeError, TypeError):  # pragma: no cover - depends on the installed DSL
        return cute.where(x < 0.0, cute.full_like(x, 0.0), x)


def _act_sigmoid(x):
    # 1 / (1 + e^-x) as 0.5 tanh(x/2) + 0.5: one fast tanh instead of exp and a division
    return 0.5 * _fast_tanh(0.5 * x) + 0.5


def _act_silu(x):
    return x * _act_sigmoid(x)


def _act_tanh(x):
    return _fast_tanh(x)


def _act_gelu(x):
    return 0.5 * x * (1.0 + cute.math.erf(x * (1.0 / math.sqrt(2.0))))


def _act_gelu_tanh(x):
    inner = x * (math.sqrt(2.0 / math.pi) + (math.sqrt(2.0 / math.pi) * 0.044715) * (x * x))
    half_x = 0.5 * x
    return half_x + half_x * _fast_tanh(inner)


ACTIVATIONS = {
    "relu": _act_relu,
    "gelu": _act_gelu,
    "gelu_tanh": _act_gelu_tanh,
    "silu": _act_silu,
    "sigmoid": _act_sigmoid,
    "tanh": _act_tanh,
}


class EpilogueArgs:
    """Device-side view of the epilogue operands of one launch (None where absent)."""

    def __init__(self, bias, scale_a, scale_b, residual, alpha, beta, out):
        self.bias = bias
        self.scale_a = scale_a
        self.scale_b = scale_b
        self.residual = residual
        self.alpha = alpha
        self.beta = beta
        # the output's extents bound the gathers (out is (M, N, L))
        self.m_extent = out.shape[0]
        self.n_extent = out.shape[1]


@dataclass(frozen=True)
class EpilogueOperands:
    """The epilogue operands as one group of epilogue threads reads them, tile by tile (trace-time
    helper, shared by the sm90 and sm100 kernels). Frozen: the DSL carries mutable Python objects
    through dynamic loops as loop state, which it cannot do; ``for_tile`` makes the per-tile part.

    Per tile, in this order:
      - ``for_tile`` (before the tile's mainloop or accumulator wait): the scalar scales' loads
        (the gated kernel: their L1 prefetch; multiplied with alpha where read, ``scale``) and this
        thread's share of the tile's per-row/per-column vectors (spec.staged_vectors) into
        registers, so their latency hides behind the mainloop;
      - ``stage`` (once the mainloop is done, then a barrier over the group): those vectors into
        ``s_vec``, a shared-memory buffer of spec.staged_vector_bytes;
      - ``gather_residual`` (a sub-tile ahead of its use) and ``apply`` per epilogue sub-tile.
    Without ``s_vec`` the vectors are read from global memory inside ``apply`` instead.
    Indices are clamped into the problem rather than branched on: values of tail elements are
    never stored (the TMA store clips them), and branch-free code keeps the epilogue cheap.
    """

    spec: object
    args: EpilogueArgs
    tile_m: int
    tile_n: int
    threads: int
    s_vec: object = None

    @property
    def parts(self) -> tuple:
        return self.spec.staged_vectors(self.tile_m, self.tile_n)

    @property
    def staged(self) -> bool:
        return self.s_vec is not None and bool(self.parts)

    def for_tile(self, row0, col0, batch, tid) -> "TileEpilogue":
        """Bound to one tile: origin (row0, col0) in the output, batch index, and this thread's
        index in the group. Issues the tile's scalar and vector loads."""
        return TileEpilogue(self, row0, col0, batch, tid)


@dataclass(frozen=True)
class TileEpilogue:
    """EpilogueOperands bound to one tile (see there). Frozen (its per-tile values are set once,
    at construction), so a dynamic ``if`` (split-K's last slice) can use it without carrying it."""

    ops: EpilogueOperands
    row0: object
    col0: object
    batch: object
    tid: object

    def __post_init__(self):
        ops, tid = self.ops, self.tid
        setattr_ = functools.partial(object.__setattr__, self)
        for name in ("spec", "args", "parts", "staged", "tile_m", "tile_n", "threads", "s_vec"):
            setattr_(name, getattr(ops, name))
        spec, a = self.spec, self.args
        # alpha and the scalar scales, loaded here and multiplied where the epilogue uses them
        # (``scale``): a product taken here waited for the loads before the mainloop's first MMA.
        # The gated kernel only prefetches them into L1 here and loads them where it reads them:
        # ptxas copied loaded scales into uniform registers ahead of its mainloop (the same wait).
        scalar = tuple(name for name in ("scale_a", "scale_b") if getattr(spec, name) == "scalar")
        late = scalar if spec.gated is not None else ()
        for name in late:
            cute.arch.prefetch(getattr(a, name).iterator.llvm_ptr, cache_level="L1")
        setattr_("scalars", (Float32(a.alpha),) + tuple(Float32(getattr(a, name)[0]) for name in scalar if not late))
        setattr_("late_scales", late)
        vec_regs = []
        if cutlass.const_expr(self.staged):
            for name, axis, off, n in self.parts:
                src = getattr(a, name)
                origin = self.col0 if axis == "col" else self.row0
                for j in range(-(-n // self.threads)):
                    # threads past the vector's end repeat its last element (same value, no branch)
                    i = cutlass.min(tid + j * self.threads, n - 1)
                    vec_regs.append((off, i, Float32(src[cutlass.min(origin + i, self._last(axis))])))
        setattr_("vec_regs", tuple(vec_regs))

    def _last(self, axis):
        return (self.args.n_extent if axis == "col" else self.args.m_extent) - 1

    @property
    def scale(self):
        """alpha x the scalar scales (emitted where it is read: take it once per sub-tile)."""
        product = self.scalars[0]
        for v in self.scalars[1:]:
            product = product * v
        for name in self.late_scales:  # the gated kernel's, prefetched: loaded here
            product = product * Float32(getattr(self.args, name)[0])
        return product

    def stage(self):
        for off, i, v in self.vec_regs:
            self.s_vec[off + i] = v

    def prefetch_residual_l2(self, tid):
        """Ask L2 for the tile's residual rows (128-byte lines) while the mainloop runs, so the
        epilogue's gathers hit L2 instead of DRAM."""
        if cutlass.const_expr(not self.spec.residual):
            return
        res = self.args.residual
        per_line = 1024 // res.element_type.width
        lines_per_row = -(-self.tile_n // per_line)
        total = self.tile_m * lines_per_row
        for j in range(-(-total // self.threads)):
            q = cutlass.min(tid + j * self.threads, total - 1)
            r = q // lines_per_row
            c = (q - r * lines_per_row) * per_line
            gm = cutlass.min(self.row0 + r, self.args.m_extent - 1)
            gn = cutlass.min(self.col0 + c, self.args.n_extent - 1)
            ptr = res.iterator + cute.crd2idx((gm, gn, self.batch), res.layout)
            cute.arch.prefetch(ptr.llvm_ptr, cache_level="L2")

    def gather_residual(self, shape, coord_of):
        """The residual of a fragment of ``shape`` (tile-local coordinates ``coord_of(v)``), fp32."""
        if cutlass.const_expr(not self.spec.residual):
            return None
        out = cute.make_rmem_tensor(shape, Float32)
        for v in range(cute.size(shape)):
            out[v] = self._residual_at(*coord_of(v))
        return out

    def _residual_at(self, m_l, n_l):
        m_last, n_last = self.args.m_extent - 1, self.args.n_extent - 1
        return Float32(self.args.residual[cutlass.min(self.row0 + m_l, m_last), cutlass.min(self.col0 + n_l, n_last),
                                          self.batch])

    def _vector_at(self, name, axis, off, m_l, n_l):
        """Element (m_l, n_l)'s value of the per-row or per-column vector ``name``, fp32."""
        local = n_l if axis == "col" else m_l
        if cutlass.const_expr(self.staged):
            return self.s_vec[off + local]
        origin = self.col0 if axis == "col" else self.row0
        return Float32(getattr(self.args, name)[cutlass.min(origin + local, self._last(axis))])

    def apply_gated(self, gate: cute.Tensor, up: cute.Tensor, coord_of):
        """The gated epilogue (spec.gated) of one sub-tile's gate and up fragments, fp32."""
        return gated_product(self, gate, up, coord_of)

    def apply(self, frag: cute.Tensor, coord_of, residual=None):
        """The spec applied to ``frag`` (fp32 accumulators; ``coord_of(v)``: tile-local (m, n) of
        element v; ``residual``: gather_residual of the same fragment, gathered here when None).
        Returns the fp32 values."""
        spec, a = self.spec, self.args
        x = frag.load()
        # the per-row scale first, with alpha and the scalar scales folded in: a thread's fragment
        # spans few rows, so (scale * scale_a row) is computed once per row (the compiler merges the
        # repeats) and an element with row and column scales takes two multiplies, not three
        muls = [p for name in ("scale_a", "scale_b") for p in self.parts if p[0] == name]
        bias = [p for p in self.parts if p[0] == "bias"]
        has_mul = bool(muls)
        has_add = spec.bias is not None or spec.residual
        scale = self.scale
        if cutlass.const_expr(not has_mul):
            x = x * scale
        if cutlass.const_expr(has_mul or has_add):
            mul = cute.make_rmem_tensor(frag.shape, Float32) if has_mul else None
            add = cute.make_rmem_tensor(frag.shape, Float32) if has_add else None
            for v in range(cute.size(frag)):
                m_l, n_l = coord_of(v)
                f = scale
                for part in muls:
                    f = f * self._vector_at(*part[:3], m_l, n_l)
                t = Float32(0.0)
                for part in bias:
                    t = t + self._vector_at(*part[:3], m_l, n_l)
                if cutlass.const_expr(spec.residual):
                    if cutlass.const_expr(residual is not None):
                        r = residual[v]
                    else:
                        r = self._residual_at(m_l, n_l)
                    t = t + a.beta * r
                if cutlass.const_expr(has_mul):
                    mul[v] = f
                if cutlass.const_expr(has_add):
                    add[v] = t
            if cutlass.const_expr(has_mul and has_add):
                x = x * mul.load() + add.load()
            elif cutlass.const_expr(has_mul):
                x = x * mul.load()
            else:
                x = x + add.load()
        if cutlass.const_expr(spec.activation is not None):
            x = ACTIVATIONS[spec.activation](x)
        return x


def gated_product(tile: "TileEpilogue", gate: cute.Tensor, up: cute.Tensor, coord_of):
    """The gated epilogue of a fragment pair (fp32): ``act(s * gate + b_gate) * (s * up + b_up)``
    with s = alpha x the FP8 scales (A's per row or scalar; B's scalar, or per column as one 2N
    vector like the bias); ``coord_of(v)``: the tile-local (m, n) of the gate's element v (n < the
    half width). The bias is one 2N vector: the gate's column j at j, the up's at N + j (clamped
    like every epilogue read: tail columns are never stored)."""
    scale = tile.scale
    x = gate.load() * scale
    y = up.load() * scale
    row_scales = tile.spec.scale_a == "row"
    col_scales = tile.spec.scale_b == "col"
    if cutlass.const_expr(row_scales or col_scales):
        sg = cute.make_rmem_tensor(gate.shape, Float32)
        su = cute.make_rmem_tensor(gate.shape, Float32)
        n_out, m_last = tile.args.n_extent, tile.args.m_extent - 1
        for v in range(cute.size(gate)):
            m_l, n_l = coord_of(v)
            f = Float32(1.0)
            if cutlass.const_expr(row_scales):
                f = Float32(tile.args.scale_a[cutlass.min(tile.row0 + m_l, m_last)])
            sg[v] = f
            su[v] = f
            if cutlass.const_expr(col_scales):
                col = cutlass.min(tile.col0 + n_l, n_out - 1)
                sg[v] = f * Float32(tile.args.scale_b[col])
                su[v] = f * Float32(tile.args.scale_b[n_out + col])
        x = x * sg.load()
        y = y * su.load()
    if cutlass.const_expr(tile.spec.bias == "col"):
        bg = cute.make_rmem_tensor(gate.shape, Float32)
        bu = cute.make_rmem_tensor(gate.shape, Float32)
        n_out = tile.args.n_extent
        for v in range(cute.size(gate)):
            col = cutlass.min(tile.col0 + coord_of(v)[1], n_out - 1)
            bg[v] = Float32(tile.args.bias[col])
            bu[v] = Float32(tile.args.bias[n_out + col])
        x = x + bg.load()
        y = y + bu.load()
    return ACTIVATIONS[tile.spec.gated](x) * y


@dataclass(frozen=True)
class StoreHandshake:
    """How an epilogue group hands each output sub-tile, written to one of EPI_STAGES shared-memory
    buffers in turn, to the TMA store its store warp issues (trace-time helper, shared by the
    sm90 and sm100 kernels). Per sub-tile, in the kernel:
        write the buffer; fence; [store warp: before_barrier]; barrier; [store warp: issue the
        store, commit]
    One barrier per sub-tile: the store warp waits for the next sub-tile's buffer before it (at
    most EPI_STAGES - 2 stores still reading shared memory, the current one not yet issued). (A
    second barrier after the store was measured on the H200 as fast within the run-to-run spread
    and removed: half the barriers.)"""

    @staticmethod
    def pipeline(threads: int):
        """The store warp's TMA store pipeline (its acquire waits for the next buffer)."""
        return pipeline.PipelineTmaStore.create(
            num_stages=EPI_STAGES - 1, producer_group=pipeline.CooperativeGroup(pipeline.Agent.Thread, threads))

    @staticmethod
    def before_barrier(store_pipeline):
        store_pipeline.producer_acquire()

    @staticmethod
    def handoff(epi_sync):
        """The barrier: every thread's part of the sub-tile is in shared memory before the store
        warp issues its TMA store."""
        epi_sync.arrive_and_wait()


def _smem_load_atom(layout, dtype):
    """ldmatrix for 16-bit data (transposed for an M-major buffer), else plain loads."""
    if dtype.width == 16:
        return cute.make_copy_atom(cute.nvgpu.warp.LdMatrix8x8x16bOp(layout.is_m_major_c(), 4), dtype)
    return cute.make_copy_atom(cute.nvgpu.CopyUniversalOp(), dtype)


def residual_tma(tma, m_res, s_res, bars, dtype, layout, tiled_copy_c_atom, thread, frag_shape, tile_mn,
                  epi_tile, first_buffer) -> "ResidualTma":
    """The TMA-loaded residual of one epilogue group (see ResidualTma); ``tiled_copy_c_atom``: the
    kernel's output-store copy atom, whose thread-value order the residual is read back in."""
    s2r = cute.make_tiled_copy_S(_smem_load_atom(layout, dtype), tiled_copy_c_atom)
    thr = s2r.get_slice(thread)
    regs = cute.make_rmem_tensor(frag_shape, dtype)
    return ResidualTma(
        tma=tma, s_res=s_res, bars=bars, epi_tile=epi_tile, first=first_buffer, s2r=s2r,
        bytes=cute.size_in_bytes(dtype, cute.slice_(s_res, (None, None, 0))),
        tSR_s=thr.partition_S(s_res), regs=regs, tSR_r=s2r.retile(regs), frag_shape=frag_shape,
        sub_tiles=(tile_mn[0] // epi_tile[0]) * (tile_mn[1] // epi_tile[1]), m_res=m_res, tile_mn=tile_mn)


@dataclass(frozen=True)
class ResidualTma:
    """One epilogue group's TMA-loaded residual (trace-time helper, shared by the kernels; frozen,
    as the DSL would carry a mutable object through dynamic loops): RES_STAGES shared-memory buffers of one epilogue
    sub-tile each, starting at buffer ``first``; sub-tile number ``count`` (the group's running
    sub-tile count) lives in buffer ``count % RES_STAGES``, its barrier phase is
    ``(count // RES_STAGES) % 2``. Read in the same thread-value order as the output fragment (the
    store's tiled copy with an ldmatrix atom), so ``read`` pairs the residual with the
    accumulators element by element."""

    tma: object
    s_res: object
    bars: object
    epi_tile: tuple
    first: object
    s2r: object
    bytes: int
    tSR_s: object
    regs: object
    tSR_r: object
    frag_shape: object
    sub_tiles: int
    m_res: object
    tile_mn: tuple

    def tile(self, tile_m, tile_n, batch, shift=None):
        """The TMA views of one output tile's residual, split into epilogue sub-tiles; ``shift``:
        (rows, columns) the tile's origin moved (GemmConfig.edge), None: not moved."""
        m_res = self.m_res if cutlass.const_expr(shift is None) else cute.domain_offset((*shift, 0), self.m_res)
        g_res = cute.local_tile(m_res, self.tile_mn, (None, None, None))
        g_tile = cute.zipped_divide(g_res[(None, None, tile_m, tile_n, batch)], self.epi_tile)
        s_part, g_part = cute.nvgpu.cpasync.tma_partition(
            self.tma, 0, cute.make_layout(1), cute.group_modes(self.s_res, 0, 2), g_tile)
        grid = g_tile.shape[1]
        return s_part, g_part, cute.make_layout(grid, stride=(grid[1], 1))

    def issue(self, tiles, e: int, count):
        """Load sub-tile ``e`` (the same order as the output's sub-tiles) as number ``count``
        (called by one warp)."""
        s_part, g_part, order = tiles
        slot = count % RES_STAGES
        bar = self.bars + self.first + slot
        with cute.arch.elect_one():
            cute.arch.mbarrier_arrive_and_expect_tx(bar, self.bytes)
        cute.copy(self.tma, g_part[(None, order.get_hier_coord(e))], s_part[(None, self.first + slot)],
                  tma_bar_ptr=bar)

    def read(self, count):
        """Sub-tile number ``count`` as an fp32 fragment of the output fragment's shape (waits
        for its load)."""
        slot = count % RES_STAGES
        cute.arch.mbarrier_wait(self.bars + self.first + slot, (count // RES_STAGES) % 2)
        cute.copy(self.s2r, self.tSR_s[(None, None, None, self.first + slot)], self.tSR_r)
        out = cute.make_rmem_tensor(self.frag_shape, Float32)
        out.store(self.regs.load().to(Float32))
        return out
