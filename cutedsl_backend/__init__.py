"""cutedsl-backend: CuTe DSL GEMM kernels for Hopper (sm90a) and Blackwell (sm100a).

Public API (the CuTe DSL and torch are imported on first use, not here):
  gemm, scaled_mm, gemm_gated, compile_gemm, GemmConfig, EpilogueSpec, UnsupportedGemmError
"""

from __future__ import annotations

import sys

from .configs import GemmConfig
from .epilogue import EpilogueSpec
from .problem import UnsupportedGemmError

__version__ = "0.1.0"

if "torch" in sys.modules:
    # torch.ops.cutedsl.* exist as soon as this package is imported after torch (registering them
    # costs ~15 ms and no CuTe DSL import); imported before torch, the first gemm/scaled_mm call
    # (or `import cutedsl_backend.ops`) registers them.
    from . import ops as _ops  # noqa: F401
__all__ = ["gemm", "scaled_mm", "gemm_gated", "compile_gemm", "GemmConfig", "EpilogueSpec", "UnsupportedGemmError",
           "__version__"]


def __getattr__(name):
    if name == "gemm":
        from .ops import gemm as value
    elif name == "scaled_mm":
        from .ops import scaled_mm as value
    elif name == "gemm_gated":
        from .gated import gemm_gated as value
    elif name == "compile_gemm":
        from .compiler import compile_gemm as value
    else:
        raise AttributeError(f"module 'cutedsl_backend' has no attribute {name!r}")
    globals()[name] = value  # later lookups skip this hook
    return value
