"""A compiled kernel's artifacts without a GPU: its SASS (cuobjdump or nvdisasm from PATH,
$CUDA_HOME or the pip wheels), its resources (registers, local memory, static shared memory) and
the dynamic shared memory its launch asks for (from the host code the DSL generated)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Optional


@dataclass
class Resources:
    registers: int
    local_bytes: int  # local memory per thread (spills and stack arrays)
    stack_bytes: int
    shared_bytes: int  # static shared memory (dynamic smem is sized at launch)

    @property
    def spills(self) -> bool:
        return self.local_bytes > 0


def find_tool(name: str) -> Optional[str]:
    """A CUDA binary tool: PATH, $CUDA_HOME/bin, then the nvidia-cuda-* pip wheels."""
    p = shutil.which(name)
    if p:
        return p
    for env in ("CUDA_HOME", "CUDA_PATH"):
        if os.environ.get(env):
            c = Path(os.environ[env]) / "bin" / name
            if c.exists():
                return str(c)
    try:
        import nvidia

        for base in nvidia.__path__:
            for c in Path(base).glob(f"cu*/bin/{name}"):
                return str(c)
    except ImportError:
        pass
    for c in (Path("/usr/local/cuda/bin") / name,):
        if c.exists():
            return str(c)
    return None


def _run_on_cubin(args: list, cubin: bytes) -> str:
    env = dict(os.environ)
    nvdisasm = find_tool("nvdisasm")  # cuobjdump --dump-sass runs nvdisasm from PATH
    if nvdisasm:
        env["PATH"] = str(Path(nvdisasm).parent) + os.pathsep + env.get("PATH", "")
    with tempfile.TemporaryDirectory() as d:
        f = Path(d) / "k.cubin"
        f.write_bytes(cubin)
        out = subprocess.run(args + [str(f)], capture_output=True, text=True, check=False, env=env)
    if out.returncode != 0:
        raise RuntimeError(f"{args[0]} failed: {out.stderr.strip()[:500]}")
    return out.stdout


def disassemble(cubin: bytes) -> str:
    tool = find_tool("cuobjdump")
    if tool and find_tool("nvdisasm"):
        return _run_on_cubin([tool, "--dump-sass"], cubin)
    tool = find_tool("nvdisasm")
    if tool:
        return _run_on_cubin([tool, "-c"], cubin)
    raise RuntimeError(
        "no disassembler: pip install nvidia-cuda-nvdisasm nvidia-cuda-cuobjdump, or a CUDA toolkit"
    )


def resource_usage(cubin: bytes) -> Resources:
    tool = find_tool("cuobjdump")
    if not tool:
        raise RuntimeError("cuobjdump not found: pip install nvidia-cuda-cuobjdump")
    text = _run_on_cubin([tool, "--dump-resource-usage"], cubin)
    best = None
    # one "Function ...:" line per kernel followed by "REG:.. STACK:.. SHARED:.. LOCAL:.."
    for m in re.finditer(r"REG:(\d+)\s+STACK:(\d+)\s+SHARED:(\d+)\s+LOCAL:(\d+)", text):
        r = Resources(int(m.group(1)), int(m.group(4)), int(m.group(2)), int(m.group(3)))
        if best is None or r.registers > best.registers:
            best = r
    if best is None:
        raise RuntimeError(f"could not parse cuobjdump resource usage:\n{text[:500]}")
    return best


# ---------------------------------------------------------------------------- compile


# the DSL's launch configuration (grid, block, dynamic shared bytes, stream, attributes, count)
_LAUNCH_CONFIG = "!llvm.struct<(array<3 x i32>, array<3 x i32>, i64, ptr, ptr, i32)>"


def launch_shared_bytes(host_ir: str) -> Optional[int]:
    """The dynamic shared memory a compiled kernel's launch asks for: the constant the DSL's host
    code stores in its launch configuration (``host_ir``: the compiled module's LLVM dialect
    text). None where there is not exactly one such store. The DSL checks it against the device only when the
    kernel is launched; read here, a CPU compile can check it against the architecture's limit."""
    geps = list(re.finditer(r"(%\d+) = llvm\.getelementptr %\d+\[0, 2\] : \(!llvm\.ptr\) -> !llvm\.ptr, "
                            + re.escape(_LAUNCH_CONFIG), host_ir))
    if len(geps) != 1:  # one launch per kernel module: anything else is not the layout read here
        return None
    gep = geps[0]
    # SSA names are per function: search the function that fills the configuration
    starts = [m.start() for m in re.finditer(r"^\s*llvm\.func @", host_ir, re.M)]
    begin = max((i for i in starts if i < gep.start()), default=0)
    end = min((i for i in starts if i > gep.end()), default=len(host_ir))
    body = host_ir[begin:end]
    store = re.search(r"llvm\.store (%\d+), " + re.escape(gep.group(1)) + r" : i64", body)
    if store is None:
        return None
    const = re.search(re.escape(store.group(1)) + r" = llvm\.mlir\.constant\((\d+) : i64\)", body)
    return int(const.group(1)) if const else None
