"""The launch path's argument structs: the compiled function's arguments (tensor descriptors,
alpha, beta, cluster count, stream) filled in place per call, a few microseconds where the DSL's
generic marshalling costs tens; enabled per kernel once its bytes matched the DSL's own."""

from __future__ import annotations

import ctypes
import functools
import logging
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the kernel's type only, for the annotation
    from .kernel import CompiledGemm

log = logging.getLogger("cutedsl_backend.compiler")


@functools.lru_cache(None)
def _desc_type(rank: int, dynamic_strides: int):
    """The DSL's memref descriptor: data pointer, int32 extents, the non-static strides (int64)."""
    return type(f"Desc{rank}_{dynamic_strides}", (ctypes.Structure,), {"_fields_": [
        ("ptr", ctypes.c_void_p), ("shape", ctypes.c_int32 * rank),
        ("stride", ctypes.c_int64 * dynamic_strides)]})


def _desc(shape, dyn):
    d = _desc_type(len(shape), len(dyn))()
    for i, v in enumerate(shape):
        d.shape[i] = v
    for i, v in enumerate(dyn):
        d.stride[i] = v
    return d


class ArgPack:
    """The compiled function's arguments as C structs: tensor descriptors, alpha, beta,
    cluster count, stream, then the tensors that follow the stream (``tail``: the gated epilogue's
    up weights)."""

    def __init__(self, cg: "CompiledGemm", descs: list, max_clusters: int, tail: tuple = ()):
        self.fn = cg._fn
        self.name = cg.config.name
        self.descs = [_desc(shape, dyn) for shape, dyn in descs]
        self.tail = [_desc(shape, dyn) for shape, dyn in tail]
        self.all_descs = self.descs + self.tail  # in the order of the data pointers a launch gets
        self.alpha = ctypes.c_float(1.0)
        self.beta = ctypes.c_float(0.0)
        self.clusters = ctypes.c_int32(max_clusters)
        self.stream = ctypes.c_void_p()
        self.scalars = (self.alpha, self.beta, self.clusters, self.stream)
        self.args = ([ctypes.addressof(d) for d in self.descs] + [ctypes.addressof(x) for x in self.scalars]
                     + [ctypes.addressof(d) for d in self.tail])
        # after the first launch: the host function's packed argument array (our structs' addresses,
        # then the executor's own slots), called directly; None: through run_compiled_program
        self._packed = None
        self._bind_tried = False

    def _fill(self, ptrs, alpha, beta, stream_handle):
        for d, p in zip(self.all_descs, ptrs):
            d.ptr = p
        self.alpha.value = alpha
        self.beta.value = beta
        self.stream.value = stream_handle

    def launch(self, ptrs: tuple, alpha: float, beta: float, stream_handle: int) -> None:
        self._fill(ptrs, alpha, beta, stream_handle)
        if self._packed is not None:
            self._capi(self._packed)
            if self._result is not None and self._result.value:
                raise RuntimeError(f"{self.name}: kernel launch failed (CUDA error {self._result.value})")
            return
        self.fn.run_compiled_program(self.args)
        if not self._bind_tried:
            self._bind_tried = True
            self._bind()

    def _bind(self) -> None:
        """Keep the argument array the DSL's executor just packed for this launch (our structs'
        addresses never change; its own slots, the CUDA result and kernel handles, neither), so the
        next launches call the host function with it directly instead of repacking it per call
        (~3 us). Checked against the executor's array; any mismatch keeps the DSL's path."""
        try:
            ex = self.fn._default_executor
            theirs = ex._tls.packed_args
            n = len(self.args) + ex._num_extra_args
            if len(theirs) < n or list(theirs[:len(self.args)]) != self.args:
                raise ValueError("the executor packed other arguments")
            packed = (ctypes.c_void_p * n)(*theirs[:n])
            self._capi, self._result = ex.capi_func, ex.cuda_result
            self._packed = packed
        except Exception as e:  # another DSL version: its own call path, a few us slower
            log.info("packed-argument launch disabled for %s: %s", self.name, e)

    def split_views(self, views: tuple) -> tuple:
        """(the tensor arguments before the scalars, those after the stream) of a call's views."""
        cut = len(views) - len(self.tail)
        return views[:cut], views[cut:]

    def matches_dsl(self, ptrs, alpha, beta, stream_handle, views) -> bool:
        """True if these structs hold the same bytes as the DSL's own marshalling of the call
        (field by field: padding is not compared)."""
        try:
            import cuda.bindings.driver as cuda
            from cutlass import Float32

            self._fill(ptrs, alpha, beta, stream_handle)
            head, tail = self.split_views(views())
            ref_args, _keep = self.fn.generate_execution_args(
                *head, Float32(alpha), Float32(beta), self.clusters.value, cuda.CUstream(stream_handle), *tail)
            if len(ref_args) != len(self.args):
                raise ValueError(f"{len(ref_args)} args, expected {len(self.args)}")

            def desc_fields(d):
                return [(f.offset, f.size) for f in (type(d).ptr, type(d).shape, type(d).stride) if f.size]

            ranges = ([desc_fields(d) for d in self.descs] + [[(0, ctypes.sizeof(x))] for x in self.scalars]
                      + [desc_fields(d) for d in self.tail])
            for ours, theirs, fields in zip(self.args, ref_args, ranges):
                addr = theirs.value if isinstance(theirs, ctypes.c_void_p) else int(theirs)
                for off, n in fields:
                    if ctypes.string_at(ours + off, n) != ctypes.string_at(addr + off, n):
                        raise ValueError("argument bytes differ")
            return True
        except Exception as e:  # keep the DSL's path: slower, never wrong
            log.info("direct launch disabled for %s: %s", self.name, e)
            return False
