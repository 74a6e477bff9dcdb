"""TorchInductor integration: our CuTe DSL GEMMs as ``max-autotune`` candidates.

    import cutedsl_backend.inductor as cbi
    cbi.enable()                      # or: with cbi.enabled(): ...
    model = torch.compile(model, mode="max-autotune")

After :func:`enable`, Inductor's GEMM lowerings (aten.mm, addmm, bmm, _scaled_mm) offer our
kernels next to ATen and Triton and keep the fastest, and GEMMs followed by a bias add, an
activation (relu, gelu, gelu_tanh, silu, sigmoid, tanh), a residual add and/or a dtype cast become
one fused candidate, measured against the unfused ops. Only under ``max_autotune`` (or
``max_autotune_gemm``); only on sm90/sm100 GPUs and for the inputs our kernels take (else nothing
is offered, with a DEBUG line on the ``cutedsl_backend.inductor`` logger saying why).

How (the hooks torch 2.11 and 2.13 share, none of them a patch of torch's own functions):
  - ``torch._inductor.config.inductor_choices_class`` and the current thread's choices handler
    (:class:`~.choices.CuteDSLChoices`): candidate lists for the four GEMM ops;
  - ``torch._inductor.config.post_grad_custom_post_pass`` (:class:`~.fusion.FusionPass`, chained
    after a pass the user had installed): forms the fused ops;
  - lowerings of our own ops (:mod:`.lowering`): autotune fused candidates against the unfused ops.
Compile cost: the heuristic keeps ``top_k`` configs per GEMM; they compile in worker processes
while Inductor precompiles its own candidates, and a loader thread brings each into this process as
soon as it is ready (the DSL runtime's start-up too, from the first kernel offered on); kernels are cached on disk
(``$CUTEDSL_BACKEND_CACHE_DIR``), and so are our autotune decisions (:mod:`.decisions`: a later
compile of the same GEMM offers only the config that won, or nothing where ours lost); Inductor's
own autotune cache keeps its timings (choice names carry a build tag, so stale timings are never
reused).
"""

from __future__ import annotations

import contextlib
import logging
from typing import Callable, Iterable, Optional

from .state import OPS, STATE

log = logging.getLogger("cutedsl_backend.inductor")

__all__ = ["enable", "disable", "enabled", "is_enabled", "stats", "OPS"]


def _choices_factory():
    """Module-level factory (Inductor pickles ``inductor_choices_class`` by reference)."""
    from .choices import CuteDSLChoices

    saved = STATE.saved or {}
    inner_factory = saved.get("choices_class")
    return CuteDSLChoices(inner_factory() if inner_factory is not None else None)


def _current_handler():
    from torch._inductor import virtualized

    return virtualized._choices._get_handler(False)


def enable(*, top_k: int = 3, fuse: bool = True, ops: Iterable[str] = OPS,
           device_arch: Optional[Callable] = None, gated_mlp: bool = False) -> None:
    """Offer our kernels to ``torch.compile(..., mode="max-autotune")`` from now on.

    - ``top_k``: configs per GEMM (the heuristic's best first); each is compiled and benchmarked.
    - ``fuse``: also form fused GEMM + epilogue candidates.
    - ``gated_mlp``: also form gated-MLP candidates, ``act(x @ w_gate^T) * (x @ w_up^T)`` in one
      GEMM (opt-in: the kernel is compile-verified, its GPU tests have not run on an H200 yet).
    - ``ops``: which of Inductor's GEMM ops to offer candidates for (``OPS``).
    - ``device_arch``: maps a torch.device to the kernel target ("sm90a" or "sm100a") or raises
      UnsupportedGemmError; default: CUDA compute capability 9.0 -> sm90a, 10.x -> sm100a. Tests
      pass one that accepts CPU tensors to run the integration without a GPU.

    Idempotent (a second call updates the options); :func:`disable` restores what it replaced."""
    import torch._inductor.config as config
    from torch._inductor.virtualized import V

    from . import lowering
    from .fusion import FusionPass

    ops = frozenset(ops)
    unknown = ops - set(OPS)
    if unknown:
        raise ValueError(f"ops: {sorted(unknown)} are not among {OPS}")
    if top_k < 1:
        raise ValueError("top_k must be at least 1")
    if not STATE.enabled:
        STATE.saved = {
            "choices_class": config.inductor_choices_class,
            "handler": _current_handler(),
            "post_pass": config.post_grad_custom_post_pass,
        }
        user_pass = config.post_grad_custom_post_pass
        ours = FusionPass()
        new_pass: object
        if user_pass is None:
            new_pass = ours
        elif isinstance(user_pass, (list, tuple)):  # torch 2.13+ takes a list of passes
            new_pass = [*user_pass, ours]
        else:
            from .fusion import ChainedPass

            new_pass = ChainedPass(user_pass, ours)
        config.inductor_choices_class = _choices_factory
        config.post_grad_custom_post_pass = new_pass
        V.set_choices_handler(_choices_factory())
        lowering.register()
        from .choices import register_all
        from .gated_ops import GATED_OPS, extern_choice

        register_all()
        for op in GATED_OPS:
            extern_choice(op)
        from .decisions import install_feedback_saver

        install_feedback_saver()
        from .. import compiler

        compiler.warm_precompile_pool()  # the DSL runtime starts at the first kernel (warm_runtime_async)
    STATE.top_k, STATE.fuse, STATE.ops, STATE.gated_mlp = int(top_k), bool(fuse), ops, bool(gated_mlp)
    from .eligibility import default_device_arch

    STATE.device_arch = device_arch or default_device_arch
    STATE.enabled = True
    log.info("cutedsl: Inductor candidates enabled (top_k=%d, fuse=%s, ops=%s)", top_k, fuse, sorted(ops))


def disable() -> None:
    """Stop offering our kernels; restore the choices handler and post-grad pass enable() replaced."""
    if not STATE.enabled:
        return
    import torch._inductor.config as config
    from torch._inductor.virtualized import V

    from . import lowering

    saved = STATE.saved or {}
    config.inductor_choices_class = saved.get("choices_class")
    config.post_grad_custom_post_pass = saved.get("post_pass")
    handler = saved.get("handler")
    if handler is None:
        from torch._inductor.choices import InductorChoices

        factory = saved.get("choices_class")
        handler = factory() if factory is not None else InductorChoices()
    V.set_choices_handler(handler)
    lowering.unregister()
    STATE.enabled = False
    STATE.saved = None
    log.info("cutedsl: Inductor candidates disabled")


def stats() -> dict:
    """What the integration counted in this process (a copy; see state.COUNTERS): runtime
    fallbacks, device-timed candidates and subgraphs, timing fallbacks, fused autotunes."""
    return dict(STATE.counters)


def is_enabled() -> bool:
    return STATE.enabled


@contextlib.contextmanager
def enabled(**kwargs):
    """``with enabled(top_k=2): torch.compile(...)(x)``: enable() for the block, then restore
    the previous state (a no-op exit if it was already enabled)."""
    was = STATE.enabled
    enable(**kwargs)
    try:
        yield
    finally:
        if not was:
            disable()
