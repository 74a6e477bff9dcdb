"""Our kernels as Inductor autotuning choices.

Plain GEMMs (aten.mm, addmm, bmm, _scaled_mm) reach us through ``InductorChoices.
get_template_configs``, the per-op candidate list Inductor asks its choices handler for (same
signature on torch 2.11 and 2.13): :class:`CuteDSLChoices` returns what the handler it replaced
returns plus one extern choice per config the heuristic keeps. A choice that wins becomes a call
``extern_kernels.cutedsl_gemm_ab*_<build tag>(..., kernel_config=<config name>)`` in the generated
code, which runs ``torch.ops.cutedsl.gemm_ab*``; enable() registers every such name, so code loaded
from the FX graph cache in a fresh process finds them.
"""

from __future__ import annotations

import logging
import operator
from typing import Optional

import torch
from torch._inductor.choices import InductorChoices

from .. import compiler
from ..plan import gpu_model
from ..problem import dtype_name
from . import decisions, ops
from .eligibility import DISPATCH, Offer, Sizes, check_gemm, num_sms, offer_or_reason, operand_from_ir
from .state import NO_PLAIN_CANDIDATES, STATE, build_tag

log = logging.getLogger("cutedsl_backend.inductor")
aten = torch.ops.aten



def _in_order(run, order: tuple):
    """``run`` (our op's CUDA call, ops.direct: no dispatcher hop on the generated code's calls)
    taking its arguments in the lowering's order (addmm: bias, a, b). A plain function: the
    generated code and every autotune benchmark call it, and a wrapper object's generator cost
    ~1-2 us a call."""
    if order == tuple(range(len(order))):
        return run
    pick = operator.itemgetter(*order)

    def call(*args, **kwargs):
        return run(*pick(args), **kwargs)

    return call


def _choice_name(kind: tuple, order: tuple) -> str:
    identity = order == tuple(range(len(order)))
    return f"cutedsl_{ops.op_name(*kind)}{'' if identity else '_' + ''.join(map(str, order))}_{build_tag()}"


def extern_choice(kind: tuple, order: Optional[tuple] = None):
    """The ExternKernelChoice running our op of signature ``kind``, taking its inputs in the
    order of the Inductor lowering it is offered to. That order matters: Inductor hands every
    extern choice the same benchmark inputs (2.11: the selector's input nodes; 2.13: the first
    extern choice's), so ours bind the inputs as the lowering lists them.

    A winning choice becomes ``extern_kernels.<name>(...)`` in the generated code (an
    ExternKernelAlloc: it can be built after lowering, when Inductor settles a deferred
    multi-template choice, which a fallback kernel cannot); :func:`register_all` makes every
    name exist in a process that loads such code from the FX graph cache."""
    from torch._inductor.select_algorithm import ExternKernelChoice

    order = order or tuple(range(len(ops.tensor_names(*kind))))
    name = _choice_name(kind, order)
    choice = STATE.extern_choices.get(name)
    if choice is None:
        choice = STATE.extern_choices[name] = ExternKernelChoice(
            _in_order(ops.direct(kind), order), name=name, has_out_variant=False, op_overload=ops.overload(*kind))
    return choice


# the argument orders our choices are offered in: the op's own, and addmm's (bias, a, b)
ADDMM_ORDER = (1, 2, 0)


def register_all() -> None:
    """Create every choice (and so every ``extern_kernels`` name) this build can emit."""
    for kind in ops.SIGNATURES:
        extern_choice(kind)
        if not kind[0] and (kind[1] != kind[2]):
            extern_choice(kind, ADDMM_ORDER)


def bind(offer: Offer, kind: tuple, input_nodes: list, layout, kwargs: dict, order: Optional[tuple] = None,
         decision: Optional[str] = None) -> list:
    """One choice per config of ``offer``; ``input_nodes`` in the lowering's order and ``order``
    maps them to our op's. Their compiles start now in worker processes. ``decision``: the
    decision-cache key the feedback saver files their timings under."""
    choice = extern_choice(kind, order)
    if offer.dynamic:
        # a symbolic extent: one choice, the per-call dispatcher (benchmarked at the hint like any
        # choice); a config frozen at the hint would serve every M
        caller = choice.bind(input_nodes, layout, **kwargs, kernel_config=DISPATCH)
        caller.description = "cutedsl per-call dispatch (dynamic shape)"
        caller.cutedsl_decision, caller.cutedsl_config = decision, DISPATCH
        precompile_offer(offer)
        return [caller]
    out = []
    for cfg in offer.configs:
        caller = choice.bind(input_nodes, layout, **kwargs, kernel_config=cfg.name)
        caller.description = f"cutedsl {cfg.name}"  # the AUTOTUNE table prints it
        caller.cutedsl_decision, caller.cutedsl_config = decision, cfg.name
        out.append(caller)
    precompile_offer(offer)
    return out


def precompile_offer(offer: Offer) -> None:
    """Start the compiles an offer's choices will need, in worker processes: its configs, or for a
    dynamic offer the dispatcher's picks over the token range (Offer.dispatch_buckets)."""
    pairs = offer.dispatch_buckets() if offer.dynamic else [(offer.problem, cfg) for cfg in offer.configs]
    for problem, cfg in pairs:
        compiler.precompile_async(problem, cfg, offer.epilogue)


def offer_for(what: str, tensors: dict, to_operand, device, sizes: Sizes, *, out_dtype=None,
              activation: Optional[str] = None, fast_accum: bool = False):
    """The Offer for a GEMM, or the reason it is refused (logged): ``tensors`` maps a, b and any of
    scale_a, scale_b, bias, residual to IR nodes or fake tensors, read through ``to_operand``. The
    one check the plain-GEMM choices, the fusion pass and the fused lowering share."""

    def check() -> Offer:
        t = {k: to_operand(v) for k, v in tensors.items() if v is not None}
        return check_gemm(t["a"], t["b"], arch=device_arch(device), sizes=sizes,
                          out_dtype=dtype_name(out_dtype) if out_dtype is not None else None, bias=t.get("bias"),
                          residual=t.get("residual"), scale_a=t.get("scale_a"), scale_b=t.get("scale_b"),
                          activation=activation, fast_accum=fast_accum, top_k=STATE.top_k, num_sms=num_sms(device),
                          gpu=gpu_model(device))

    return offer_or_reason(what, check)


def autotuning() -> bool:
    from torch._inductor import config

    return bool(config.max_autotune or config.max_autotune_gemm)


def unsupported_mode() -> Optional[str]:
    """Why our kernels cannot serve the compile under way, or None. AOTInductor and the C++
    wrapper call every extern kernel through a C shim (``aoti_torch_cuda_<name>``); ours are
    Python callables with none, so offering them there would break a compile that works without
    us. They are not offered in those modes (logged once per mode); Inductor's own candidates
    serve the graph."""
    from torch._inductor import config
    from torch._inductor.virtualized import V

    reason = None
    if V.aot_compilation:
        reason = "AOTInductor"
    elif config.cpp_wrapper or getattr(getattr(V, "graph", None), "cpp_wrapper", False):
        reason = "cpp_wrapper"
    if reason is None:
        return None
    reason = f"{reason}: our extern kernels have no C shim, so none is offered in this mode"
    if reason not in STATE.modes_logged:
        STATE.modes_logged.add(reason)
        log.info("cutedsl: %s", reason)
    return reason


def device_arch(device) -> str:
    return STATE.device_arch(device)


# Below this many tokens (or with a symbolic token count) an unfused chain's GEMM keeps Inductor's
# backends: at 16 tokens Triton's templates beat cuBLAS's addmm 1.7x (H100, 16x4096x14336 bf16
# with bias: 0.056 vs 0.097 ms), and a dynamic graph's GEMM serves every token count.
ATEN_ONLY_MIN_M = 128


def static_extent(x) -> Optional[int]:
    """``x`` (an int, a SymInt or a sympy expression) as an int where it is a constant, else None."""
    if isinstance(x, int):
        return x
    try:
        import sympy

        expr = x.node.expr if hasattr(x, "node") else x
        return int(expr) if isinstance(expr, sympy.Expr) and expr.is_number else None
    except (TypeError, ValueError, AttributeError):
        return None


def unfused_gemm_backends(m=None) -> Optional[str]:
    """The ``max_autotune_gemm_backends`` for the GEMM of a chain whose unfused ops beat our fused
    kernel, now (inlined by the lowering) or in an earlier compile (left unfused by the fusion
    pass; see :func:`aten_only_where_lost`); ``m``: that GEMM's token count (int, SymInt or sympy;
    None: not known). "ATEN" (cuBLAS and cuBLASLt's bias epilogue, the winners of such autotunes
    measured on the H200 at prefill sizes) where Inductor's setting includes ATen and more and ``m``
    is a constant of at least :data:`ATEN_ONLY_MIN_M`, so a cold compile does not pay a second GEMM
    autotune with Triton's template compiles, after ours. None: Inductor's setting stands (it is
    ATen alone or lacks ATen, the token count is symbolic, or it is small: there Triton's
    templates win)."""
    from torch._inductor import config as inductor_config

    current = [b.strip().upper() for b in str(getattr(inductor_config, "max_autotune_gemm_backends", "")).split(",")]
    if "ATEN" not in current or current == ["ATEN"]:
        return None
    if m is not None:
        tokens = static_extent(m)
        if tokens is None or tokens < ATEN_ONLY_MIN_M:
            return None
    return "ATEN"


def _fx_gemm_tokens(node):
    """The token count (M) of the FX GEMM ``node`` (mm, addmm, _scaled_mm) from its fake value."""
    a = node.args[1] if "addmm" in str(node.target) else node.args[0] if node.args else None
    val = getattr(a, "meta", {}).get("val") if a is not None else None
    return val.shape[-2] if val is not None and val.dim() >= 2 else None


def aten_only_where_lost(templates: list) -> list:
    """Inductor's candidate templates for the GEMM being lowered: ATen's alone (its
    ExternKernelChoices) where that GEMM's chain was left unfused because the unfused ops won
    there before (fusion pass mark; the restriction of :func:`unfused_gemm_backends`, which also
    says where it does not apply), else all."""
    from torch._inductor.select_algorithm import ExternKernelChoice
    from torch._inductor.virtualized import V

    node = getattr(V.graph, "current_node", None)
    if node is None or not node.meta.get(NO_PLAIN_CANDIDATES):
        return templates
    tokens = _fx_gemm_tokens(node)
    if unfused_gemm_backends(tokens if tokens is not None else 0) != "ATEN":
        return templates
    kept = [t for t in templates if isinstance(t, ExternKernelChoice)]
    return kept or templates


def settings_tag() -> str:
    """The settings that change the code our lowerings produce, for the FX graph cache keys."""
    from ..configs.as_run import policy_tag

    return f"unfused:{unfused_gemm_backends() or 'inductor'};gated:{int(STATE.gated_mlp)};{policy_tag()}"


class CuteDSLChoices(InductorChoices):
    """Inductor's choices handler with our GEMM candidates added (only under max-autotune).
    ``inner``: the handler this one replaced; its candidate lists are kept."""

    def __init__(self, inner: Optional[InductorChoices] = None):
        super().__init__()
        self._inner = inner

    def uuid(self) -> str:  # part of the FX graph cache key (torch 2.13+ asks for it)
        return f"cutedsl-{build_tag()}-{settings_tag()}"

    def get_template_configs(self, kernel_inputs, templates, op_name, kwarg_overrides=None):
        active = STATE.enabled and op_name in STATE.ops and autotuning() and unsupported_mode() is None
        if active:
            templates = aten_only_where_lost(templates)
        if self._inner is not None:
            choices = self._inner.get_template_configs(kernel_inputs, templates, op_name, kwarg_overrides)
        else:
            choices = super().get_template_configs(kernel_inputs, templates, op_name, kwarg_overrides)
        if not active:
            return choices
        try:
            ours = plain_gemm_choices(kernel_inputs, op_name, kwarg_overrides)
        except Exception as e:  # never break a compile: Inductor's own candidates remain
            log.warning("cutedsl: no candidates for %s after %s: %s", op_name, type(e).__name__, e)
            ours = []
        return list(choices) + ours


def _first_time(op_name: str) -> bool:
    from torch._inductor.virtualized import V

    node = getattr(V.graph, "current_node", None)
    seen = STATE.offered.setdefault(V.graph, set())
    key = (op_name, node)
    if key in seen:
        return False
    seen.add(key)
    return True


def suppress(a, b) -> None:
    """Offer no plain-GEMM candidates for operands ``a`` and ``b`` in this graph: used when our
    fused kernel for them just lost to the unfused ops, which are then inlined (our plain kernel
    would meet the same GEMM peers again, at the price of more compiles and benchmarks)."""
    from torch._inductor.virtualized import V

    STATE.suppressed.setdefault(V.graph, set()).add((a.get_name(), b.get_name()))


def _suppressed(a, b) -> bool:
    from torch._inductor.virtualized import V

    return (a.get_name(), b.get_name()) in STATE.suppressed.get(V.graph, ())


def _fast_accum(kwarg_overrides) -> Optional[bool]:
    """torch._scaled_mm's use_fast_accum: from the other candidates' kwargs, else the FX node."""
    for d in (kwarg_overrides or {}).values():
        for key in ("use_fast_accum", "USE_FAST_ACCUM"):
            if key in d:
                return bool(d[key])
    from torch._inductor.virtualized import V

    node = getattr(V.graph, "current_node", None)
    if node is not None and node.target is aten._scaled_mm.default:
        return bool(node.kwargs.get("use_fast_accum", node.args[7] if len(node.args) > 7 else False))
    return None


def _is_vector_bias(inp, sizes: Sizes) -> bool:
    size, stride = inp.get_size(), inp.get_stride()
    if len(size) == 1:
        return True
    return len(size) == 2 and (sizes.equals(size[0], 1) or sizes.equals(stride[0], 0))


def plain_gemm_choices(kernel_inputs, op_name: str, kwarg_overrides) -> list:
    """Our candidates for one of Inductor's GEMM lowerings (op_name: mm, bmm, addmm, scaled_mm)."""
    from torch._inductor.virtualized import V

    if not _first_time(op_name):
        return []
    nodes = kernel_inputs.nodes()
    device = kernel_inputs.device()
    sizes = Sizes(V.graph.sizevars)
    kwargs: dict = {}
    order = None
    bias = residual = scale_a = scale_b = None
    fast_accum = False
    if op_name in ("mm", "bmm"):
        a, b = nodes
    elif op_name == "addmm":
        inp, a, b = nodes
        alpha, beta = kernel_inputs.get_scalar("alpha"), kernel_inputs.get_scalar("beta")
        if alpha != 1:
            kwargs["alpha"] = float(alpha)
        if _is_vector_bias(inp, sizes) and beta == 1:
            bias = inp
        else:
            residual = inp
            if beta != 1:
                kwargs["beta"] = float(beta)
        order = ADDMM_ORDER
    elif op_name == "scaled_mm":
        a, b, scale_a, scale_b = nodes[:4]
        bias = nodes[4] if len(nodes) > 4 else None
        fa = _fast_accum(kwarg_overrides)
        if fa is None:
            log.debug("cutedsl: not offering scaled_mm (use_fast_accum unknown)")
            return []
        fast_accum = fa
        kwargs["fast_accum"] = fa
    else:
        return []
    node = getattr(V.graph, "current_node", None)
    if _suppressed(a, b) or (node is not None and node.meta.get(NO_PLAIN_CANDIDATES)):
        log.debug("cutedsl: not offering %s (our fused kernel for it lost to the unfused ops)", op_name)
        return []
    out_dtype = kernel_inputs.out_dtype()
    if out_dtype != a.get_dtype():
        kwargs["out_dtype"] = out_dtype
    kind = (scale_a is not None, bias is not None, residual is not None)
    what = f"{op_name} {[list(x.get_size()) for x in nodes]} {[str(x.get_dtype()) for x in nodes]}"
    tensors = dict(a=a, b=b, scale_a=scale_a, scale_b=scale_b, bias=bias, residual=residual)
    offer = offer_for(what, tensors, operand_from_ir, device, sizes, out_dtype=out_dtype, fast_accum=fast_accum)
    if isinstance(offer, str):
        return []
    dkey = decisions.key(op_name, offer, decisions.device_name(device))
    offer, verdict = decisions.narrow(offer, dkey)
    if verdict == "lost":
        log.debug("cutedsl: not offering %s (the decision cache says it lost here by more than %d%%)",
                  offer.describe(), round(100 * decisions.MARGIN))
        return []
    layout = kernel_inputs.output_layout(flexible=False)
    log.debug("cutedsl: offering %d configs for %s: %s", len(offer.configs), offer.describe(),
              [c.name for c in offer.configs])
    compiler.STORE.event("plain candidates offered", op_name)
    return bind(offer, kind, list(nodes), layout, kwargs, order, dkey)
