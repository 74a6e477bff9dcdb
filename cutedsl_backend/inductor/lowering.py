"""Lowering of our fused ops (``torch.ops.cutedsl.gemm_ab*``; the gated op's is in gated_mlp.py and is
installed here too): autotune, then keep the winner.

The fusion pass replaces ``GEMM -> bias -> residual -> activation -> cast`` chains by one of our
ops with ``kernel_config=''``. Its lowering benchmarks, in one ``autotune_select_algorithm``:
  - our kernel with each config the heuristic keeps (extern choices, compiled in worker
    processes while Inductor precompiles its own candidates), and
  - the unfused computation (``ops.reference``: the GEMM and the pointwise ops as the graph had
    them) as a subgraph choice,
all timed on the device as Inductor times them but queued ahead of the GPU (:mod:`.device_timing`:
Inductor's own timing of a call counts its host time once a compile's CPU load makes our op's
host time exceed its kernel's).
If the unfused computation wins, it is inlined into the graph and Inductor lowers it as if we were
not there (its Triton fusion of the pointwise ops; its GEMM autotuned with ATen only by default,
see :func:`.choices.unfused_gemm_backends`). An op with a
``kernel_config`` (or a compile without max-autotune) becomes a plain fallback kernel.

The pieces (``lowerings`` registration for our own ops, SubgraphTemplate, autotune_select_algorithm,
inline_subgraph_to_ir_nodes) have the same shape on torch 2.11 and 2.13; the one difference
(whether autotune_select_algorithm returns the winning choice) is handled in ``_select``.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import time

import torch

from .. import compiler
from . import decisions, device_timing, ops
from .choices import autotuning, bind, offer_for, suppress, unfused_gemm_backends
from .eligibility import Sizes, operand_from_ir
from .state import STATE

# Where fused lowerings spend a compile's time (bench-inductor reports it): building the unfused
# subgraph candidate, and the autotune of ours against it (our compiles waited for included).

log = logging.getLogger("cutedsl_backend.inductor")


def register() -> None:
    """Install the lowering of each of our ops (these are our ops, not torch's); what was there
    before (Inductor's automatic fallback, once it met the op) comes back with unregister()."""
    from torch._inductor.lowering import lowerings, register_lowering

    from .gated_mlp import LOWERINGS as GATED_LOWERINGS

    ours = [(ops.overload(*kind), functools.partial(_lower, kind)) for kind in ops.SIGNATURES]
    for overload, fn in ours + list(GATED_LOWERINGS.items()):
        if overload not in STATE.lowerings:
            before = lowerings.get(overload)
            register_lowering(overload, type_promotion_kind=None)(fn)
            STATE.lowerings[overload] = lowerings[overload]
            if before is not None:
                lowerings[overload] = before
        current = lowerings.get(overload)
        if current is not STATE.lowerings[overload]:
            STATE.replaced_lowerings[overload] = current
            lowerings[overload] = STATE.lowerings[overload]


def unregister() -> None:
    from torch._inductor.lowering import lowerings

    for overload, fn in STATE.lowerings.items():
        if lowerings.get(overload) is fn:
            previous = STATE.replaced_lowerings.pop(overload, None)
            if previous is None:
                del lowerings[overload]
            else:
                lowerings[overload] = previous


def _fallback(kind, args, kwargs):
    from torch._inductor.lowering import fallback_handler

    return fallback_handler(ops.overload(*kind), add_to_fallback_set=False)(*args, **kwargs)


def _lower(kind: tuple, *args, **kwargs):
    from torch._inductor.ir import ExternKernel
    from torch._inductor.virtualized import V

    if kwargs.get("kernel_config") or not (STATE.enabled and autotuning()):
        return _fallback(kind, args, kwargs)
    inputs = [ExternKernel.realize_input(x) for x in args]
    for x in inputs:  # the stride rules are checked on the layouts the kernel will see
        try:
            x.freeze_layout()
        except (AttributeError, NotImplementedError):
            pass
    name = f"cutedsl_fused_{ops.op_name(*kind)}"
    sizes = Sizes(V.graph.sizevars)
    device = inputs[0].get_device()
    offer = offer_for(f"{name} {[list(x.get_size()) for x in inputs]}", dict(zip(ops.tensor_names(*kind), inputs)),
                      operand_from_ir, device, sizes, out_dtype=kwargs.get("out_dtype"),
                      activation=kwargs.get("activation"), fast_accum=bool(kwargs.get("fast_accum")))
    reference = functools.partial(_reference_fn, kind, dict(kwargs))
    if isinstance(offer, str):
        return _inline(reference, args, name)
    dkey = decisions.key(name, offer, decisions.device_name(device))
    offer, verdict = decisions.narrow(offer, dkey)
    if verdict == "lost":
        log.debug("cutedsl: %s: the unfused ops won here before (decision cache); inlined", name)
        suppress(inputs[0], inputs[1])
        return _inline_unfused(reference, args, name)
    layout = _output_layout(kind, inputs, kwargs)
    choices = bind(offer, kind, inputs, layout, {k: v for k, v in kwargs.items() if k != "kernel_config"},
                   decision=dkey)
    if verdict == "won":
        log.debug("cutedsl: %s: %s won here before (decision cache)", name, offer.configs[0].name)
        return choices[0].output_node()
    t0 = time.perf_counter()
    unfused = unfused_choice(name, inputs, layout, reference, "unfused GEMM + pointwise ops")
    node, winner = select_against_unfused(name, unfused, choices, ops.overload(*kind), inputs, layout, t0)
    if winner is unfused:
        log.debug("cutedsl: %s: the unfused ops won; inlined", name)
        suppress(inputs[0], inputs[1])
        return _inline_unfused(reference, args, name, gm=unfused.gm)
    log.debug("cutedsl: %s: %s won", name, getattr(winner, "description", winner))
    return node


def unfused_choice(name, inputs, layout, reference, description):
    """The unfused ops as an autotune choice (Inductor's SubgraphChoiceCaller of ``reference``
    traced on ``inputs``), which adds no guard on a symbolic extent (see :func:`_sym_values_from_hints`)."""
    from torch._inductor.codegen.subgraph import SubgraphTemplate

    with _sym_values_from_hints():
        return SubgraphTemplate(name=f"{name}_unfused").generate(
            name=f"{name}_unfused", input_nodes=inputs, layout=layout, make_fx_graph=_tracer(reference),
            description=description)


@contextlib.contextmanager
def _sym_values_from_hints():
    """torch 2.11's SubgraphChoiceCaller takes the values of its symbolic extents with ``int()`` of
    its symbolic example inputs' sizes, which guards the graph on the autotune hint (``Eq(s0, 16)``):
    a ``dynamic=True`` module then compiled again at every new token count. Later torch reads them
    from concrete benchmark inputs. Where the method still reads the example inputs, it takes the
    size hints instead (the values ``int()`` returned, without the guard) while a choice is made."""
    from torch._inductor.codegen.subgraph import SubgraphChoiceCaller
    from torch._inductor.virtualized import V

    reads_example_inputs = getattr(SubgraphChoiceCaller, "_compute_sym_input_values", None)
    if reads_example_inputs is None or "example_inputs" not in reads_example_inputs.__code__.co_names:
        yield
        return

    def from_hints(choice):
        return [int(V.graph.sizevars.optimization_hint(s, fallback=1)) for s in choice.sym_inputs]

    SubgraphChoiceCaller._compute_sym_input_values = from_hints
    try:
        yield
    finally:
        SubgraphChoiceCaller._compute_sym_input_values = reads_example_inputs


def _inline_unfused(fn, inputs, name, gm=None):
    """:func:`_inline` of a chain whose unfused ops won, its GEMM autotuned with
    :func:`.choices.unfused_gemm_backends`."""
    from torch._inductor import config as inductor_config

    backends = unfused_gemm_backends(inputs[0].get_size()[-2])
    with inductor_config.patch(max_autotune_gemm_backends=backends) if backends else contextlib.nullcontext():
        return _inline(fn, inputs, name, gm=gm)


def _reference_fn(kind, kwargs, *tensors):
    kw = {k: v for k, v in kwargs.items() if k != "kernel_config"}
    return ops.reference(kind, tensors[0], tensors[1], tuple(tensors[2:]), **kw)


def _tracer(fn):
    def make_fx_graph(*args):
        from torch._inductor.decomposition import select_decomp_table
        from torch.fx.experimental.proxy_tensor import make_fx

        return make_fx(fn, decomposition_table=select_decomp_table())(*args)

    return make_fx_graph


def _inline(fn, inputs, name, gm=None):
    """Lower ``fn`` (torch ops) in place of our op: Inductor treats it as if we were not there."""
    from torch._inductor.codegen.subgraph import inline_subgraph_to_ir_nodes
    from torch._inductor.ir import ir_node_to_tensor
    from torch._inductor.virtualized import V

    if gm is None:
        with V.fake_mode:
            fakes = [ir_node_to_tensor(x) for x in inputs]
            gm = _tracer(fn)(*fakes)
    return inline_subgraph_to_ir_nodes(gm, inputs, f"{name}_{next(STATE.subgraph_names)}")


def _output_layout(kind, inputs, kwargs):
    """Row-major (..., M, N), as the op's fake implementation and the kernel make it."""
    from torch._inductor.ir import FixedLayout, FlexibleLayout

    a, b = inputs[0], inputs[1]
    size = [*a.get_size()[:-1], b.get_size()[-1]]
    dtype = kwargs.get("out_dtype") or (torch.bfloat16 if kind[0] else a.get_dtype())
    return FixedLayout(a.get_device(), dtype, size, FlexibleLayout.contiguous_strides(size))


def select_against_unfused(name: str, unfused, ours: list, op, inputs, layout, started: float):
    """One autotune of our choices ``ours`` (each runs ``op`` with its bound kwargs) against the
    unfused ops ``unfused``; returns (node, winner). On a CUDA device every candidate is timed on
    the device (inductor.device_timing): Inductor's own timing lets our op's host time into a
    small GEMM's (it then loses to the unfused ops on host time, not on the GPU). ``started``:
    when the unfused choice began to be made (counted as its cost)."""
    from torch._inductor import config as inductor_config

    if inputs[0].get_device().type == "cuda":
        why_not = device_timing.install_on_subgraph(unfused)
        if why_not is None:
            for caller in ours:
                device_timing.install_on_ours(caller, op, caller.kwargs)
        else:
            log.debug("cutedsl: %s: Inductor's own timing (%s)", name, why_not)
    choices = list(ours)
    # benchmarked first: Inductor compiles a subgraph choice when it benchmarks it, so its compile
    # (in this process) overlaps our kernels' compiles in the workers instead of following them.
    # Not under config.deterministic: there torch 2.11 takes choices[0] unbenchmarked and does not
    # say which it took (_select could not tell the unfused winner from ours).
    choices.insert(len(choices) if getattr(inductor_config, "deterministic", False) else 0, unfused)
    t1 = time.perf_counter()
    compiler.STORE.event("fused autotune starts", name)
    node, winner = _select(name, choices, inputs, layout)
    compiler.STORE.event("fused autotune done", name)
    STATE.counters["fused_autotunes"] += 1
    STATE.counters["unfused_subgraph_s"] += t1 - started
    STATE.counters["fused_autotune_s"] += time.perf_counter() - t1
    return node, winner


@functools.lru_cache(None)
def _returns_choice() -> bool:
    """torch 2.13+ returns (node, winning choice); 2.11 does when asked (return_choice=True)."""
    from torch._inductor.select_algorithm import AlgorithmSelectorCache

    return "return_choice" in inspect.signature(AlgorithmSelectorCache.__call__).parameters


def _select(name, choices, inputs, layout):
    from torch._inductor.select_algorithm import autotune_select_algorithm

    extra = {"return_choice": True} if _returns_choice() else {}
    out = autotune_select_algorithm(name, choices, inputs, layout, return_multi_template=False, **extra)
    if isinstance(out, tuple):
        return out
    return out, None  # 2.11's single-choice and deterministic paths return the node alone
