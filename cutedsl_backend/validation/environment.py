"""What the validation report records about the machine it ran on."""

from __future__ import annotations

import platform
import sys


def environment() -> dict:
    env = {"python": sys.version.split()[0], "platform": platform.platform(), "machine": platform.machine()}
    try:
        import torch

        env["torch"] = torch.__version__
        env["cuda_available"] = bool(torch.cuda.is_available())
        if env["cuda_available"]:
            cap = torch.cuda.get_device_capability()
            env["gpu"] = torch.cuda.get_device_name()
            env["gpu_arch"] = f"sm{cap[0]}{cap[1]}"
            env["gpu_sms"] = torch.cuda.get_device_properties(0).multi_processor_count
            env["cuda_runtime"] = torch.version.cuda
    except ImportError:
        env["torch"] = None
        env["cuda_available"] = False
    try:
        from ..compiler import dsl_version, find_tool, kernel_source_hash

        env["nvidia_cutlass_dsl"] = dsl_version()
        env["kernel_source_hash"] = kernel_source_hash()
        env["cuobjdump"] = find_tool("cuobjdump")
    except Exception as e:  # pragma: no cover
        env["nvidia_cutlass_dsl"] = f"unavailable: {e}"
    try:
        import triton

        env["triton"] = triton.__version__
    except ImportError:
        env["triton"] = None
    from .. import __version__

    env["cutedsl_backend"] = __version__
    return env


def gpu_arch() -> str | None:
    """'sm90a' / 'sm100a' for a supported visible GPU, else None."""
    try:
        import torch

        if not torch.cuda.is_available():
            return None
        from ..problem import UnsupportedGemmError, arch_for_capability

        try:
            return arch_for_capability(*torch.cuda.get_device_capability())
        except UnsupportedGemmError:
            return None
    except ImportError:
        return None


def gpu_description() -> str:
    try:
        import torch

        if torch.cuda.is_available():
            cap = torch.cuda.get_device_capability()
            return f"{torch.cuda.get_device_name()} (sm{cap[0]}{cap[1]})"
    except ImportError:
        return "torch not installed"
    return "no CUDA GPU visible"
