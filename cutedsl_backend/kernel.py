"""Which kernel, and a compiled one: the value type naming a kernel (everything that decides its
generated code, no runtime shapes) with its cache key computed once, and the compiled kernel with
its artifacts and launch path.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from .artifacts import Resources, disassemble, launch_shared_bytes, resource_usage
from .configs import GemmConfig
from .launch import ArgPack
from .problem import GemmProblem

if TYPE_CHECKING:  # the epilogue spec's type only, for annotations
    from .epilogue import EpilogueSpec

# cute.compile is not thread-safe: one compile or module load at a time per process (use processes
# to scale). Reentrant: a load may run inside get_kernel called under it.
DSL_LOCK = threading.RLock()


@functools.lru_cache(None)
def kernel_source_hash() -> str:
    """Hash of everything that shapes generated code: the kernels, the configs, the epilogue spec
    and the compile itself (build.py)."""
    root = Path(__file__).parent
    files = sorted((root / "kernels").glob("*.py")) + sorted((root / "configs").glob("*.py")) + [
        root / "build.py", root / "epilogue.py"]
    h = hashlib.sha256()
    for f in files:
        h.update(f.name.encode())
        h.update(f.read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(None)
def dsl_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("nvidia-cutlass-dsl")
    except PackageNotFoundError:  # pragma: no cover - source installs
        import cutlass

        return getattr(cutlass, "__version__", "unknown")


@dataclass(frozen=True)
class KernelKey:
    """Which kernel: the target, dtypes, operand majors, accumulation mode, the resolved config and
    the epilogue spec; no runtime shapes (one compiled kernel serves every M, N, K, batch and
    stride). ``digest``, computed once, names it in the memory and disk caches (with the kernel
    sources' and the DSL's versions)."""

    arch: str
    dtype: str
    b_dtype: str
    out_dtype: str
    a_major: str
    b_major: str
    fast_accum: bool
    config: GemmConfig
    epilogue: "EpilogueSpec"
    c_major: str = "n"

    @classmethod
    def of(cls, problem: GemmProblem, config: GemmConfig, epilogue: "EpilogueSpec") -> "KernelKey":
        return cls(problem.arch, problem.dtype, problem.dtype_b, problem.out_dtype, problem.a_major,
                   problem.b_major, problem.fast_accum, config, epilogue, problem.c_major)

    @functools.cached_property
    def digest(self) -> str:
        parts = {
            "src": kernel_source_hash(), "dsl": dsl_version(), "arch": self.arch, "cfg": self.config.key(),
            "dtype": self.dtype, "b_dtype": self.b_dtype, "fast_accum": self.fast_accum, "out": self.out_dtype,
            "a_major": self.a_major, "b_major": self.b_major, "epi": self.epilogue.key(),
        }
        if self.c_major != "n":  # (absent for row-major outputs: their digests predate the field)
            parts["c_major"] = self.c_major
        return hashlib.sha256(json.dumps(parts, sort_keys=True, default=str).encode()).hexdigest()[:24]


@dataclass
class CompiledGemm:
    """A compiled GEMM kernel and its artifacts.

    ``compile_seconds`` is the time ``cute.compile`` took (0.0 cost is never reported for a
    cache hit: a hit keeps the original compile time and sets ``cache_hit``).
    """

    problem: GemmProblem
    config: GemmConfig
    epilogue: Any  # kernels.epilogue.EpilogueSpec
    key: str
    compile_seconds: float
    cubin: bytes
    cache_hit: str = ""  # "", "memory" or "disk"
    load_seconds: float = 0.0
    _fn: Any = field(default=None, repr=False)
    _sass: Optional[str] = field(default=None, repr=False)
    _resources: Optional[Resources] = field(default=None, repr=False)
    _fast: Any = field(default=None, repr=False)

    @property
    def arch(self) -> str:
        return self.problem.arch

    @property
    def direct_launch(self) -> Optional[bool]:
        """Whether launches fill the argument structs directly (True), go through the DSL's own
        marshalling (False), or have not been decided yet (None: no launch so far)."""
        return self._fast

    def sass(self) -> str:
        """SASS text of the cubin (cuobjdump or nvdisasm from PATH, CUDA_HOME or the pip wheels)."""
        if self._sass is None:
            self._sass = disassemble(self.cubin)
        return self._sass

    @property
    def resources(self) -> Resources:
        if self._resources is None:
            self._resources = resource_usage(self.cubin)
        return self._resources

    def launch_shared_bytes(self) -> Optional[int]:
        """Dynamic shared memory its launch asks for (artifacts.launch_shared_bytes); None for a
        kernel loaded without its compiled module (a disk-cache hit)."""
        module = getattr(self._fn, "ir_module", None) if self._fn is not None else None
        return None if module is None else launch_shared_bytes(str(module))

    def sass_counts(self, opcodes=("HGMMA", "QGMMA", "UTMALDG", "UTMASTG", "UTCHMMA", "UTCQMMA",
                                   "LDL", "STL")) -> dict:
        text = self.sass()
        return {op: len(re.findall(r"\b" + op + r"\b", text)) for op in opcodes}

    def __call__(self, *args):
        if self._fn is None:
            raise RuntimeError("this CompiledGemm has no callable (artifacts only)")
        return self._fn(*args)

    def arg_pack(self, descs: list, max_clusters: int, tail: tuple = ()) -> "ArgPack":
        """Argument structs for one operand geometry (the eager API caches one per geometry).
        ``descs``: (shape, dynamic strides) of each tensor argument present, in call order;
        ``tail``: the same for the tensors after the stream (the gated epilogue's up weights)."""
        return ArgPack(self, descs, max_clusters, tail)

    def launch(self, pack: "ArgPack", ptrs: tuple, alpha: float, beta: float, stream_handle: int,
               views) -> None:
        """Launch with ``pack``'s geometry on the data at ``ptrs``; ``views()`` gives the tensor
        arguments (None where absent) as torch views for the DSL's own argument path.

        The DSL's generic argument marshalling costs ~50-90 us a call; filling the kernel's
        argument structs directly costs a few. The direct path is enabled per kernel only after
        its bytes matched the DSL's own marshalling of a real call; otherwise the DSL path runs.
        """
        if self._fast is None:  # the DSL's marshalling, once: not beside a load on the loader thread
            with DSL_LOCK:
                self._fast = pack.matches_dsl(ptrs, alpha, beta, stream_handle, views)
        if self._fast:
            pack.launch(ptrs, alpha, beta, stream_handle)
        else:
            import cuda.bindings.driver as cuda
            from cutlass import Float32

            head, tail = pack.split_views(views())
            with DSL_LOCK:  # the DSL's own argument path: Python state a load may touch
                self._fn(*head, Float32(alpha), Float32(beta), pack.clusters.value,
                         cuda.CUstream(stream_handle), *tail)
