"""Gated MLPs under torch.compile: ``act(x @ w_gate^T) * (x @ w_up^T)`` found in post-grad graphs
and offered as one GEMM (``cutedsl_backend.gemm_gated``) against the unfused ops.

The pattern (2-D and the 3-D ``nn.Linear`` view form): two ``mm`` on the same input (or on equal
reshapes of one tensor) with transposed (N, K) weights, an activation of the gated family on one
(in its post-grad form, matched as the epilogue fusion matches activations) and a ``mul`` with the
other; every intermediate used only there. It becomes ``torch.ops.cutedsl.gemm_gated_ab`` with
``kernel_config=''``; its lowering autotunes our kernel's configs against the unfused computation
and inlines the unfused ops where they win, like the fused epilogue chains (:mod:`.lowering`).

Opt-in (``enable(gated_mlp=True)``): the kernel is compile-verified; its GPU tests
(tests/gpu/test_gated_sm90.py) have not run on an H200 yet.
"""

from __future__ import annotations

import functools
import logging
from typing import Optional

import torch
from torch.fx import Graph, Node

from ..epilogue import GATED_ACTIVATIONS, EpilogueSpec, torch_activation
from ..problem import UnsupportedGemmError, dtype_name
from .fusion import _VIEWS, _only_user, _val, match_activation
from .ops import config_for_call

log = logging.getLogger("cutedsl_backend.inductor")
aten = torch.ops.aten

# ---------------------------------------------------------------------------- the op

_LIB = torch.library.Library("cutedsl", "FRAGMENT")
_LIB.define("gemm_gated_ab(Tensor a, Tensor w_gate, Tensor w_up, *, str activation, str kernel_config='') -> Tensor",
            tags=(torch.Tag.pt2_compliant_tag,))


def _impl(a, w_gate, w_up, *, activation, kernel_config=""):
    from ..gated import gemm_gated

    config = config_for_call(kernel_config, a.numel() // max(1, a.shape[-1]))
    return gemm_gated(a, w_gate, w_up, activation=activation, config=config)


def _fake(a, w_gate, w_up, *, activation, kernel_config=""):
    return a.new_empty((*a.shape[:-1], w_gate.shape[0]))


_LIB.impl("gemm_gated_ab", _impl, "CUDA")
torch.library.register_fake("cutedsl::gemm_gated_ab", _fake, lib=_LIB)
GATED_OP = torch.ops.cutedsl.gemm_gated_ab.default


def reference(a, w_gate, w_up, *, activation, kernel_config=""):
    """The unfused computation, rounding where the graph rounds (each GEMM's result, then the
    activation and the product in the input dtype): the candidate our kernel is measured against."""
    return torch_activation(activation)(a @ w_gate.t()) * (a @ w_up.t())


# ---------------------------------------------------------------------------- the pattern

def _linear(mm: Node):
    """(input, weight) of ``mm(x, permute(w, [1, 0]))`` (nn.Linear without bias), else None."""
    if mm.op != "call_function" or mm.target is not aten.mm.default or len(mm.args) != 2:
        return None
    x, wt = mm.args
    if not (isinstance(wt, Node) and wt.target is aten.permute.default and list(wt.args[1]) == [1, 0]
            and _only_user(wt) is mm):
        return None
    return x, wt.args[0]


def _same_input(x1: Node, x2: Node) -> bool:
    """The same tensor, or equal reshapes of one tensor (each nn.Linear reshapes its input)."""
    if x1 is x2:
        return True
    return (x1.target in _VIEWS and x2.target in _VIEWS and x1.args[0] is x2.args[0]
            and list(x1.args[1]) == list(x2.args[1]))


def _strip_view(n: Node):
    """(the node under a reshape of ``n``'s only user chain, the view or None)."""
    if n.op == "call_function" and n.target in _VIEWS and isinstance(n.args[0], Node):
        return n.args[0], n
    return n, None


def _sibling_gemms(x: Node, not_this: Node) -> list:
    """The other ``mm`` nodes on ``x`` or on an equal reshape of ``x``'s source."""
    inputs = [x]
    if x.target in _VIEWS and isinstance(x.args[0], Node):
        inputs += [v for v in x.args[0].users if v is not x and _same_input(v, x)]
    return [u for i in inputs for u in i.users if u is not not_this and u.target is aten.mm.default]


def _split_halves(up_side: Node):
    """For ``getitem(split(h, N, -1), 1)`` of a GEMM's (..., 2N) output h into two halves: (the gate
    half's getitem, h), else None (the concatenated [gate | up] weight form)."""
    import operator

    if up_side.target is not operator.getitem or up_side.args[1] != 1:
        return None
    split = up_side.args[0]
    if not (isinstance(split, Node) and split.target is aten.split.Tensor and len(split.users) == 2):
        return None
    h, size = split.args[0], split.args[1]
    dim = split.args[2] if len(split.args) > 2 else split.kwargs.get("dim", 0)
    hv = _val(h)
    if hv is None or dim not in (-1, hv.dim() - 1) or not isinstance(size, int) or hv.shape[-1] != 2 * size:
        return None
    gate = next((u for u in split.users if u.args[1] == 0), None)
    return (gate, h) if gate is not None else None


def match_gated(mul: Node) -> Optional[dict]:
    """The gated MLP ending at ``mul``: {x, w_gate, w_up | w_gate_up, activation, view, nodes},
    else None."""
    if mul.op != "call_function" or mul.target is not aten.mul.Tensor or len(mul.args) != 2:
        return None
    for act_out, up_side in ((mul.args[0], mul.args[1]), (mul.args[1], mul.args[0])):
        if isinstance(up_side, Node) and isinstance(act_out, Node):
            halves = _split_halves(up_side)
            if halves is not None and _only_user(up_side) is mul:
                gate_item, h = halves
                mm, view = _strip_view(h)
                lin = _linear(mm)
                split = up_side.args[0]
                chain_ok = _only_user(h) is split and (view is None or _only_user(mm) is view)
                if lin is not None and chain_ok:
                    for name in GATED_ACTIVATIONS:
                        hit = match_activation(gate_item, name)
                        if hit is not None and hit[0] is act_out and _only_user(act_out) is mul:
                            return {"x": lin[0], "w_gate_up": lin[1], "activation": name, "view": view,
                                    "nodes": [mm, *hit[1]]}
        if not isinstance(act_out, Node) or not isinstance(up_side, Node):
            continue
        up_mm, up_view = _strip_view(up_side)
        up = _linear(up_mm)
        if up is None or _only_user(up_mm) is not (up_view or mul) or (up_view and _only_user(up_view) is not mul):
            continue
        for gate_mm in _sibling_gemms(up[0], up_mm):
            gate = _linear(gate_mm)
            if gate is None or not _same_input(gate[0], up[0]):
                continue
            g_user = _only_user(gate_mm)
            g_view = g_user if g_user is not None and g_user.target in _VIEWS else None
            if (g_view is None) != (up_view is None):
                continue
            start = g_view or gate_mm
            for name in GATED_ACTIVATIONS:
                hit = match_activation(start, name)
                if hit is None or hit[0] is not act_out or _only_user(act_out) is not mul:
                    continue
                wg, wu = _val(gate[1]), _val(up[1])
                if wg is None or wu is None or tuple(wg.shape) != tuple(wu.shape) or wg.dtype != wu.dtype:
                    continue
                return {"x": up[0], "w_gate": gate[1], "w_up": up[1], "activation": name, "view": up_view,
                        "nodes": [gate_mm, up_mm, *hit[1]]}
    return None


def fuse_gated(graph: Graph) -> int:
    """Replace every gated MLP in ``graph`` by the gated op; returns how many."""
    done = 0
    for node in list(graph.nodes):
        try:
            m = match_gated(node)
            if m is None:
                continue
            with graph.inserting_before(node):
                if "w_gate_up" in m:  # the concatenated weight's two halves, as views
                    w = m["w_gate_up"]
                    n = _val(w).shape[0] // 2
                    halves = []
                    for lo, hi in ((0, n), (n, 2 * n)):
                        half = graph.call_function(aten.slice.Tensor, (w, 0, lo, hi))
                        half.meta["val"] = _val(w)[lo:hi]
                        halves.append(half)
                    m["w_gate"], m["w_up"] = halves
                fused = graph.call_function(GATED_OP, (m["x"], m["w_gate"], m["w_up"]),
                                            {"activation": m["activation"], "kernel_config": ""})
                fused.meta["val"] = _fake(_val(m["x"]), _val(m["w_gate"]), _val(m["w_up"]), activation="")
                result = fused
                if m["view"] is not None:
                    result = graph.call_function(m["view"].target, (fused, list(_val(node).shape)))
                    result.meta["val"] = _val(node)
            node.replace_all_uses_with(result)
            done += 1
        except Exception as e:  # never break a compile: the graph keeps its unfused form
            log.warning("cutedsl: gated-MLP fusion at %s skipped after %s: %s", node, type(e).__name__, e)
    if done:
        graph.eliminate_dead_code()
        log.debug("cutedsl: fused %d gated MLP(s)", done)
    return done


# ---------------------------------------------------------------------------- lowering

@functools.lru_cache(None)
def extern_choice():
    from torch._inductor.select_algorithm import ExternKernelChoice

    from .state import build_tag

    return ExternKernelChoice(GATED_OP, name=f"cutedsl_gemm_gated_{build_tag()}", has_out_variant=False,
                              op_overload=GATED_OP)


def offer(inputs, activation: str, device, sizes):
    """(problem at the hint, spec, configs, dynamic) for the gated GEMM of ``inputs`` (IR nodes),
    or raises UnsupportedGemmError naming the rule."""
    from ..configs import rank_configs
    from ..problem import GemmProblem
    from .choices import device_arch
    from .eligibility import _check_aligned, _major, num_sms, operand_from_ir
    from .state import STATE

    a, wg, wu = (operand_from_ir(x) for x in inputs)
    if a.dim != 2 or wg.dim != 2 or tuple(wg.shape) != tuple(wu.shape):
        raise UnsupportedGemmError("shape: a (M, K) and two (N, K) weights")
    dt = dtype_name(a.dtype)
    if dt not in ("bfloat16", "float16") or wg.dtype != a.dtype or wu.dtype != a.dtype:
        raise UnsupportedGemmError(f"dtype: 16-bit operands of one dtype, got {a.dtype}, {wg.dtype}, {wu.dtype}")
    for what, t in (("w_gate", wg), ("w_up", wu)):
        if _major(t, sizes, what, "k", "n") != "k":
            raise UnsupportedGemmError(f"layout: {what} must be K-contiguous ((N, K) row-major)")
        _check_aligned(t, sizes, what, 1)
    m, k = a.shape
    n = wg.shape[0]
    if not sizes.multiple_of(n, 8):
        raise UnsupportedGemmError(f"alignment: N={n} must be a multiple of 8 (16-byte output rows)")
    a_major = _major(a, sizes, "a", "k", "m")
    _check_aligned(a, sizes, "a", 1 if a_major == "k" else 0)
    arch = device_arch(device)
    problem = GemmProblem(sizes.hint(m), 2 * sizes.hint(n), sizes.hint(k), 1, dt, dt, a_major, "k", arch,
                          packed=False)
    spec = EpilogueSpec(gated=activation)
    configs = rank_configs(problem, num_sms=num_sms(device), top_k=STATE.top_k, epilogue=spec)
    if not configs:
        raise UnsupportedGemmError(f"no config takes the gated epilogue for {problem.describe()}")
    dynamic = not all(sizes.is_static(x) for x in (m, n, k))
    return problem, spec, configs, dynamic


def lower(a, w_gate, w_up, *, activation, kernel_config=""):
    """Our kernel's configs against the unfused ops, in one autotune; the unfused ops inlined if
    they win (as the fused epilogue chains' lowering)."""
    from torch._inductor.codegen.subgraph import SubgraphTemplate
    from torch._inductor.ir import ExternKernel, FixedLayout, FlexibleLayout
    from torch._inductor.lowering import fallback_handler
    from torch._inductor.virtualized import V

    from .choices import autotuning
    from .eligibility import DISPATCH, Sizes
    from .lowering import _inline, _inline_unfused, _select, _tracer
    from .state import STATE

    args = (a, w_gate, w_up)
    kwargs = {"activation": activation}
    if kernel_config or not (STATE.enabled and autotuning()):
        return fallback_handler(GATED_OP, add_to_fallback_set=False)(*args, activation=activation,
                                                                    kernel_config=kernel_config)
    inputs = [ExternKernel.realize_input(x) for x in args]
    for x in inputs:
        try:
            x.freeze_layout()
        except (AttributeError, NotImplementedError):
            pass
    name = "cutedsl_fused_gemm_gated"
    ref = functools.partial(_reference_fn, activation)
    try:
        problem, spec, configs, dynamic = offer(inputs, activation, inputs[0].get_device(), Sizes(V.graph.sizevars))
    except UnsupportedGemmError as e:
        log.debug("cutedsl: not offering %s: %s", name, e)
        return _inline(ref, args, name)
    size = [inputs[0].get_size()[0], inputs[1].get_size()[0]]
    layout = FixedLayout(inputs[0].get_device(), inputs[0].get_dtype(), size, FlexibleLayout.contiguous_strides(size))
    choice = extern_choice()
    picks = [DISPATCH] if dynamic else [c.name for c in configs]
    ours = []
    for pick in picks:
        caller = choice.bind(inputs, layout, **kwargs, kernel_config=pick)
        caller.description = f"cutedsl gated {pick}"
        ours.append(caller)
    from .choices import precompile_offer
    from .eligibility import Offer

    precompile_offer(Offer(problem, spec, tuple(configs), dynamic=dynamic))
    unfused = SubgraphTemplate(name=f"{name}_unfused").generate(
        name=f"{name}_unfused", input_nodes=inputs, layout=layout, make_fx_graph=_tracer(ref),
        description="unfused GEMMs + activation * up")
    node, winner = _select(name, [unfused] + ours, inputs, layout)
    if winner is unfused:
        log.debug("cutedsl: %s: the unfused ops won; inlined", name)
        return _inline_unfused(ref, args, name, gm=unfused.gm)
    return node


def _reference_fn(activation, a, w_gate, w_up):
    return reference(a, w_gate, w_up, activation=activation)
