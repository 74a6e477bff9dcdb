import os
import sys
import zlib
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from cutedsl_backend.validation.gpus import pin_xdist_worker  # noqa: E402

# one GPU per xdist worker on a multi-GPU host, before anything below initialises CUDA
PINNED_GPU = pin_xdist_worker()


def _gpu_arch():
    try:
        import torch
    except ImportError:
        return None, "torch is not installed"
    if not torch.cuda.is_available():
        return None, "no CUDA GPU visible"
    major, minor = torch.cuda.get_device_capability()
    return f"sm{major}{minor}", f"{torch.cuda.get_device_name()} (sm{major}{minor})"


GPU_ARCH, GPU_DESC = _gpu_arch()


@pytest.fixture(autouse=True)
def _seeded_torch(request):
    """Every test that draws from torch's global generator gets a seed of its own id: the same
    inputs whichever tests ran before it in its worker, so a failure replays."""
    if GPU_DESC == "torch is not installed":
        return
    import torch

    torch.manual_seed(zlib.crc32(request.node.nodeid.encode()))


def pytest_addoption(parser):
    parser.addoption("--arch-filter", default=None, help="keep only GPU tests for this arch (sm90, sm100)")
    parser.addoption("--dtype-filter", default=None,
                     help="keep only tests of this dtype; tests without a dtype run with bfloat16 (fp8 ones "
                          "with float8_e4m3fn)")
    parser.addoption("--epilogue-filter", default=None,
                     help="keep only tests of this epilogue family: none, fused, scales")


def pytest_configure(config):
    config.addinivalue_line("markers", "gpu(arch): needs a GPU of that arch (sm90 or sm100)")
    config.addinivalue_line("markers", "compile: compiles CuTe DSL kernels on the CPU")
    config.addinivalue_line("markers", "epilogue(family): the epilogue family a GPU test covers (none, fused, scales)")
    config.addinivalue_line("markers", "timing: times host or device work; GPU sessions run it alone, after the rest")


def _family(item) -> str:
    """The test's epilogue family (validation.matrix.GPU_EPILOGUE_FAMILIES); plain GEMMs by default."""
    m = item.get_closest_marker("epilogue")
    return m.args[0] if m else "none"


def _keep(item, arch, dtype, epilogue):
    m = item.get_closest_marker("gpu")
    if arch and (m is None or (m.args[0] if m.args else "sm90") != arch):
        return False
    if epilogue and _family(item) != epilogue:
        return False
    if dtype:
        params = getattr(getattr(item, "callspec", None), "params", {})
        # fp8 tests (every e4m3/e5m2 mix) go with float8_e4m3fn; others without a dtype with bfloat16
        default = "float8_e4m3fn" if _family(item) == "scales" else "bfloat16"
        return params.get("dtype", default) == dtype
    return True


def pytest_collection_modifyitems(config, items):
    arch, dtype = config.getoption("--arch-filter"), config.getoption("--dtype-filter")
    epilogue = config.getoption("--epilogue-filter")
    if arch or dtype or epilogue:
        keep = [i for i in items if _keep(i, arch, dtype, epilogue)]
        config.hook.pytest_deselected(items=[i for i in items if i not in keep])
        items[:] = keep
    require = [r for r in os.environ.get("CUTEDSL_REQUIRE_GPU", "").split(",") if r]
    for item in items:
        m = item.get_closest_marker("gpu")
        if m is None:
            continue
        want = m.args[0] if m.args else "sm90"
        have = GPU_ARCH or ""
        ok = have == want or (want == "sm100" and have.startswith("sm10"))
        if ok:
            continue
        reason = f"needs an {want} GPU (found: {GPU_DESC})"
        if want in require:
            raise pytest.UsageError(f"CUTEDSL_REQUIRE_GPU={want} but the GPU is missing: {reason}")
        item.add_marker(pytest.mark.skip(reason=reason))
