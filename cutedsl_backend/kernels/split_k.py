"""Split-K partial sums through a global workspace, reduced in a fixed order (device-side, CuTe DSL;
shared by the sm90 and sm100 kernels).

A split-K launch cuts the K range of every CTA tile into ``splits`` slices that different CTAs
compute at the same time. Each slice stores its fp32 accumulators to the workspace and counts its
arrival on the tile's counter; the CTA whose arrival completes the count sums the ``splits``
partials in slice order (0, 1, ...) and runs the epilogue. The sum's order never depends on which
CTA arrives last, so the same inputs give bitwise the same output. No CTA waits for another, so
no co-residency is assumed. The last arrival resets the counter to zero: the workspace needs
zeroing once, when it is allocated (configs.split_k_workspace gives its sizes).

Workspace layout: tile, then slice, then part (an epilogue sub-tile where the accumulator is read
a part at a time, sm100a; one part on sm90a), then register, then thread: each warp stores and
loads 128 contiguous bytes per register (coalesced), and a thread reads back exactly the
positions it wrote (a thread's registers map to the same tile coordinates in every slice).
"""

from __future__ import annotations

import cutlass
import cutlass.cute as cute
from cutlass import Float32, Int32, Int64


@cute.jit
def _slot(work: cute.Tensor, tile: Int32, split: Int32, part: Int32, splits: cutlass.Constexpr,
          parts: cutlass.Constexpr, part_elems: cutlass.Constexpr, thread: Int32):
    """This thread's first element of (tile, slice, part) in the workspace."""
    return work.iterator + ((Int64(tile) * splits + split) * parts * part_elems + part * part_elems + thread)


@cute.jit
def store_partial(frag: cute.Tensor, work: cute.Tensor, tile: Int32, split: Int32, part: Int32,
                  splits: cutlass.Constexpr, parts: cutlass.Constexpr, thread: Int32, threads: cutlass.Constexpr):
    """Store this thread's fp32 fragment of one part of its slice's accumulators."""
    regs = cute.size(frag)
    flat = cute.make_tensor(frag.iterator, cute.make_layout(regs))
    mine = _slot(work, tile, split, part, splits, parts, regs * threads, thread)
    for r in cutlass.range_constexpr(regs):
        cute.arch.store(mine + r * threads, flat[r])


@cute.jit
def arrive(counters: cute.Tensor, tile: Int32, splits, thread: Int32, sync, arrival: cute.Tensor):
    """Count this slice on ``counters[tile]`` once its threads' stores are done (``sync``: a
    barrier over them; ``arrival``: a one-element Int32 shared-memory tensor of the group;
    ``splits``: the tile's slice count, a constant or, for stream-K's pieces, a run-time value).
    Returns whether this CTA holds the tile's last slice (then it resets the counter)."""
    sync.arrive_and_wait()
    if thread == 0:
        # release this slice's stores (ordered before the barrier) at GPU scope, then count it;
        # the arrival that completes the count acquires every other slice's stores
        cute.arch.fence_acq_rel_gpu()
        old = cute.arch.atomic_add(counters.iterator + tile, Int32(1), sem="acq_rel", scope="gpu")
        if old == splits - 1:
            counters[tile] = Int32(0)
        arrival[0] = old - (splits - 1)
    sync.arrive_and_wait()
    return arrival[0] == 0


@cute.jit
def load_sum(frag: cute.Tensor, work: cute.Tensor, tile: Int32, part: Int32, splits: cutlass.Constexpr,
             parts: cutlass.Constexpr, thread: Int32, threads: cutlass.Constexpr):
    """``frag`` = the sum over slices 0, 1, ... of this thread's fragment of one part."""
    regs = cute.size(frag)
    flat = cute.make_tensor(frag.iterator, cute.make_layout(regs))
    part_elems = regs * threads
    base = _slot(work, tile, Int32(0), part, splits, parts, part_elems, thread)
    for r in cutlass.range_constexpr(regs):
        # .cg: read at L2, where the other CTAs' stores are (never a stale L1 line)
        total = cute.arch.load(base + r * threads, Float32, cop="cg")
        for s in cutlass.range_constexpr(1, splits):
            total = total + cute.arch.load(base + (s * parts * part_elems + r * threads), Float32, cop="cg")
        flat[r] = total


@cute.jit
def _publish(acc: cute.Tensor, work: cute.Tensor, counters: cute.Tensor, tile: Int32, slot: Int32, slots,
             count, thread: Int32, threads: cutlass.Constexpr, sync, arrival: cute.Tensor):
    """Store this thread's whole accumulator to slot ``slot`` of the tile's ``slots`` and count it
    on the tile's counter, which ``count`` arrivals complete (:func:`arrive`): split-K's slices and
    stream-K's pieces alike. Returns (``acc`` flat, this thread's element of the tile's slot 0,
    the elements of a slot, whether this CTA's arrival completed the count)."""
    regs = cute.size(acc)
    flat = cute.make_tensor(acc.iterator, cute.make_layout(regs))
    tile_elems = regs * threads
    base = work.iterator + (Int64(tile) * slots * tile_elems + thread)
    mine = base + Int64(slot) * tile_elems
    for r in cutlass.range_constexpr(regs):
        cute.arch.store(mine + r * threads, flat[r])
    return flat, base, tile_elems, arrive(counters, tile, count, thread, sync, arrival)


@cute.jit
def reduce_partials(acc: cute.Tensor, work: cute.Tensor, counters: cute.Tensor, tile: Int32, split: Int32,
                    splits: cutlass.Constexpr, thread: Int32, threads: cutlass.Constexpr, sync,
                    arrival: cute.Tensor):
    """The whole accumulator at once (sm90a: it is in registers, one part): store this slice's
    ``acc``, count it (:func:`arrive`), and where this CTA holds the tile's last slice replace
    ``acc`` with the sum of all slices in slice order (as :func:`load_sum`). Returns whether it
    did. (Written with :func:`_publish` rather than :func:`store_partial` / :func:`load_sum`: those
    address a part and change the generated code the H200 verified.)"""
    regs = cute.size(acc)
    flat, base, tile_elems, last = _publish(acc, work, counters, tile, split, splits, splits, thread, threads, sync,
                                            arrival)
    if last:
        for r in cutlass.range_constexpr(regs):
            total = cute.arch.load(base + r * threads, Float32, cop="cg")
            for s in cutlass.range_constexpr(1, splits):
                total = total + cute.arch.load(base + (s * tile_elems + r * threads), Float32, cop="cg")
            flat[r] = total
    return last


@cute.jit
def work_unit(idx: Int32, tiles: Int32, splits: cutlass.Constexpr):
    """Work unit -> (K slice, cluster tile): units are slice-major (unit = slice * tiles + tile);
    without split-K a unit is a cluster tile."""
    if cutlass.const_expr(splits == 1):
        return Int32(0), idx
    split = idx // tiles
    return split, idx - split * tiles


@cute.jit
def unit_k_range(split: Int32, k_tiles: Int32, splits: cutlass.Constexpr):
    """(first k-tile, k-tiles) of a unit's K slice (all of K without split-K)."""
    if cutlass.const_expr(splits == 1):
        return Int32(0), k_tiles
    return k_slice(split, k_tiles, splits)


@cute.jit
def k_slice(split: Int32, k_tiles: Int32, splits: cutlass.Constexpr):
    """(first k-tile, k-tile count) of slice ``split`` (configs.k_slices: as even as integers allow)."""
    begin = split * k_tiles // splits
    end = (split + 1) * k_tiles // splits
    return begin, end - begin


@cute.jit
def reduce_pieces(acc: cute.Tensor, work: cute.Tensor, counters: cute.Tensor, tile: Int32, piece: Int32,
                  pieces: Int32, max_pieces: Int32, thread: Int32, threads: cutlass.Constexpr, sync,
                  arrival: cute.Tensor):
    """Stream-K's :func:`reduce_partials`: the tile's piece count is a run-time value (slot
    ``piece`` of ``max_pieces`` per tile); where this CTA holds the tile's last piece to finish,
    ``acc`` becomes the sum of all pieces in piece order. Returns whether it did."""
    regs = cute.size(acc)
    flat, base, tile_elems, last = _publish(acc, work, counters, tile, piece, max_pieces, pieces, thread, threads,
                                            sync, arrival)
    if last:
        for r in cutlass.range_constexpr(regs):
            flat[r] = cute.arch.load(base + r * threads, Float32, cop="cg")
        for p in cutlass.range(1, pieces, unroll=1):
            at = base + Int64(p) * tile_elems
            for r in cutlass.range_constexpr(regs):
                flat[r] = flat[r] + cute.arch.load(at + r * threads, Float32, cop="cg")
    return last


@cute.jit
def stream_k_shares(total: Int32, clusters: Int32, cluster: Int32, k_tiles: Int32):
    """Stream-K's division of a launch's ``total`` k-tiles over ``clusters`` persistent clusters,
    seen from ``cluster``: (q, r, begin, end, first tile): the first r clusters take q + 1
    consecutive k-tiles, the others q; this cluster's are [begin, end), from cluster tile
    ``first tile`` on. Computed once per CTA, so a work item costs one division (32-bit: 64-bit
    division is a long subroutine on the GPU, and a work item's is on the mainloop's critical path)."""
    q = total // clusters
    r = total - q * clusters
    begin = cluster * q + cutlass.min(cluster, r)
    end = begin + q + (cluster < r)
    return q, r, begin, end, begin // k_tiles


@cute.jit
def share_owner(k_tile: Int32, q: Int32, r: Int32):
    """Stream-K: the cluster whose share holds the launch's k-tile ``k_tile``."""
    long_end = r * (q + 1)  # the r shares of q + 1 k-tiles come first
    owner = r + (k_tile - long_end) // q
    if k_tile < long_end:
        owner = k_tile // (q + 1)
    return owner


@cute.jit
def stream_k_work(idx: Int32, k_tiles: Int32, clusters: Int32, shares):
    """Stream-K work item ``idx`` = s * clusters + c of cluster c (``shares``: its
    :func:`stream_k_shares`): the s-th piece of its share -> (cluster tile, first k-tile, k-tiles
    (<= 0: the share has no such piece), piece of the tile, the tile's pieces). A whole tile is
    one piece; only the share's first and last pieces look for the tile's other owners.
    configs.stream_k_shares is the host's copy."""
    q, r, begin, end, first_tile = shares
    s = idx // clusters
    tile = first_tile + s
    tile_begin = tile * k_tiles
    first = cutlass.max(begin, tile_begin)
    count = cutlass.min(end, tile_begin + k_tiles) - first
    piece = Int32(0)
    pieces = Int32(1)
    if count < k_tiles:
        owner = share_owner(tile_begin, q, r)
        pieces = share_owner(tile_begin + k_tiles - 1, q, r) - owner + 1
        piece = idx - s * clusters - owner
    return tile, first - tile_begin, count, piece, pieces


@cute.jit
def stream_k_max_pieces(k_tiles: Int32, shares):
    """The most pieces a tile is cut into (configs.stream_k_shares): every share is at least q
    k-tiles long."""
    return cutlass.max(k_tiles - 2, Int32(0)) // shares[0] + 2


class SplitKUnits:
    """The work-unit methods both kernel families share (``self.cfg.splits`` K slices): methods, so
    a validation mutant can override one (a wrong K range, a wrong slice offset)."""

    @cute.jit
    def _unit(self, idx: Int32, tiles: Int32):
        """Work unit -> (K slice, cluster tile) (:func:`work_unit`)."""
        return work_unit(idx, tiles, self.cfg.splits)

    @cute.jit
    def _k_range(self, split: Int32, k_tiles: Int32):
        """(first k-tile, k-tiles) of a unit's K slice (:func:`unit_k_range`)."""
        return unit_k_range(split, k_tiles, self.cfg.splits)

    @cute.jit
    def _work(self, idx: Int32, tiles: Int32, k_tiles: Int32, units: Int32, clusters: Int32, shares):
        """Work item ``idx`` of a launch of ``units`` (stream-K: its k-tiles, divided as
        ``shares`` says, :func:`stream_k_shares`) over ``clusters`` persistent clusters ->
        (cluster tile, first k-tile, k-tiles, slice or piece, slices or the tile's pieces), for
        an ``idx`` that :meth:`_has_work`."""
        if cutlass.const_expr(self.cfg.stream_k):
            return stream_k_work(idx, k_tiles, clusters, shares)
        split, tile = self._unit(idx, tiles)
        first, count = self._k_range(split, k_tiles)
        return tile, first, count, split, Int32(self.cfg.splits)

    @cute.jit
    def _has_work(self, idx: Int32, tiles: Int32, k_tiles: Int32, units: Int32, clusters: Int32, shares):
        """Whether work item ``idx`` exists (:meth:`_work`)."""
        if cutlass.const_expr(self.cfg.stream_k):
            return stream_k_work(idx, k_tiles, clusters, shares)[2] > 0
        return idx < units
