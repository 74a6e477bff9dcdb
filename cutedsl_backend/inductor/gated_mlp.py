"""Gated MLPs under torch.compile: ``act(x @ w_gate^T) * (x @ w_up^T)`` found in post-grad graphs
and offered as one GEMM (``cutedsl_backend.gemm_gated``) against the unfused ops.

The pattern (2-D and the 3-D ``nn.Linear`` view form): two ``mm`` on the same input (or on equal
reshapes of one tensor) with transposed (N, K) weights, an activation of the gated family on one
(in its post-grad form, matched as the epilogue fusion matches activations) and a ``mul`` with the
other; every intermediate used only there. Or one GEMM on a concatenated (2N, K) weight whose
result is split in two halves. Each GEMM may carry its ``nn.Linear`` bias (``addmm``, or the
``mm`` + ``add`` Inductor unfuses it into before a pointwise op); with biases both GEMMs have one.
It becomes ``torch.ops.cutedsl.gemm_gated_ab`` (``gemm_gated_ab_bias`` with the [gate | up] bias
vector) with ``kernel_config=''``; its lowering autotunes our kernel's configs against the
unfused computation and inlines the unfused ops where they win, like the fused epilogue chains
(:mod:`.lowering`).

Opt-in (``enable(gated_mlp=True)``): on the H200 a SwiGLU block with it measured at parity with
ATen+Triton, not yet the speed-up that would make it the default.
"""

from __future__ import annotations

import dataclasses
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
# bias_gate_up: (2N,), the gate's N values then the up's
_LIB.define("gemm_gated_ab_bias(Tensor a, Tensor w_gate, Tensor w_up, Tensor bias_gate_up, *, str activation, "
            "str kernel_config='') -> Tensor", tags=(torch.Tag.pt2_compliant_tag,))


def _impl(a, w_gate, w_up, bias_gate_up=None, *, activation, kernel_config=""):
    from ..gated import gemm_gated

    config = config_for_call(kernel_config, a.numel() // max(1, a.shape[-1]))
    return gemm_gated(a, w_gate, w_up, activation=activation, bias_gate_up=bias_gate_up, config=config)


def _fake(a, w_gate, w_up, bias_gate_up=None, *, activation, kernel_config=""):
    return a.new_empty((*a.shape[:-1], w_gate.shape[0]))


for _name in ("gemm_gated_ab", "gemm_gated_ab_bias"):
    _LIB.impl(_name, _impl, "CUDA")
    torch.library.register_fake(f"cutedsl::{_name}", _fake, lib=_LIB)
GATED_OP = torch.ops.cutedsl.gemm_gated_ab.default
GATED_BIAS_OP = torch.ops.cutedsl.gemm_gated_ab_bias.default
GATED_OPS = (GATED_OP, GATED_BIAS_OP)


def reference(a, w_gate, w_up, bias_gate_up=None, *, activation, kernel_config=""):
    """The unfused computation, rounding where the graph rounds (each GEMM's result, bias added
    before its rounding as addmm does, then the activation and the product in the input dtype):
    the candidate our kernel is measured against."""
    if bias_gate_up is None:
        return torch_activation(activation)(a @ w_gate.t()) * (a @ w_up.t())
    n = w_gate.shape[0]
    bias = bias_gate_up.to(a.dtype)
    return (torch_activation(activation)(torch.addmm(bias[:n], a, w_gate.t()))
            * torch.addmm(bias[n:], a, w_up.t()))


# ---------------------------------------------------------------------------- the pattern

def _linear(gemm: Node):
    """(input, weight, bias or None) of ``mm(x, permute(w, [1, 0]))`` or ``addmm(bias, x,
    permute(w, [1, 0]))`` with a (N,) bias (nn.Linear), else None."""
    if gemm.op != "call_function":
        return None
    if gemm.target is aten.mm.default and len(gemm.args) == 2:
        (x, wt), bias = gemm.args, None
    elif (gemm.target is aten.addmm.default and len(gemm.args) == 3
          and gemm.kwargs.get("alpha", 1) == 1 and gemm.kwargs.get("beta", 1) == 1):
        bias, x, wt = gemm.args
        if not _is_bias(bias, gemm):
            return None
    else:
        return None
    if not (isinstance(wt, Node) and wt.target is aten.permute.default and list(wt.args[1]) == [1, 0]
            and _only_user(wt) is gemm):
        return None
    return x, wt.args[0], bias


def _is_bias(b, out: Node) -> bool:
    """``b`` is a (N,) vector for the (..., N) result ``out``."""
    bv, ov = _val(b), _val(out)
    return bv is not None and ov is not None and bv.dim() == 1 and bv.shape[0] == ov.shape[-1]


def _bias_add(node: Node):
    """(the other operand, the bias) of ``add(y, bias)`` / ``add(bias, y)`` with a (N,) bias, else None."""
    if node.op != "call_function" or node.target is not aten.add.Tensor or len(node.args) != 2 or node.kwargs:
        return None
    for y, b in ((node.args[0], node.args[1]), (node.args[1], node.args[0])):
        if isinstance(y, Node) and isinstance(b, Node) and _is_bias(b, node):
            return y, b
    return None


@dataclasses.dataclass
class _Linear:
    """One nn.Linear's output as the graph computes it: gemm, [add bias], [view], [add bias]."""

    gemm: Node
    x: Node
    weight: Node
    bias: Optional[Node]
    view: Optional[Node]


def _peel(top: Node) -> Optional[_Linear]:
    """The nn.Linear whose output is ``top``, each node below ``top`` used only by the one above."""
    cur, bias, view = top, None, None
    for _ in range(3):
        if not isinstance(cur, Node):
            return None
        below = None
        if bias is None and (hit := _bias_add(cur)) is not None:
            below, bias = hit
        elif view is None and cur.op == "call_function" and cur.target in _VIEWS and isinstance(cur.args[0], Node):
            below, view = cur.args[0], cur
        if below is None:
            break
        if _only_user(below) is not cur:
            return None
        cur = below
    lin = _linear(cur) if isinstance(cur, Node) else None
    if lin is None or (bias is not None and lin[2] is not None):
        return None
    return _Linear(cur, lin[0], lin[1], bias if bias is not None else lin[2], view)


def _down(gemm: Node) -> Node:
    """The top of ``gemm``'s nn.Linear output chain ([view], [add bias]) going down its only users."""
    cur = gemm
    for _ in range(2):
        user = _only_user(cur)
        if user is None or not (user.op == "call_function" and (
                user.target in _VIEWS or (hit := _bias_add(user)) is not None and hit[0] is cur)):
            break
        cur = user
    return cur


def _same_input(x1: Node, x2: Node) -> bool:
    """The same tensor, or equal reshapes of one tensor (each nn.Linear reshapes its input)."""
    if x1 is x2:
        return True
    return (x1.target in _VIEWS and x2.target in _VIEWS and x1.args[0] is x2.args[0]
            and list(x1.args[1]) == list(x2.args[1]))


def _sibling_gemms(x: Node, not_this: Node) -> list:
    """The other ``mm`` / ``addmm`` nodes on ``x`` or on an equal reshape of ``x``'s source."""
    inputs = [x]
    if x.target in _VIEWS and isinstance(x.args[0], Node):
        inputs += [v for v in x.args[0].users if v is not x and _same_input(v, x)]
    return [u for i in inputs for u in i.users
            if u is not not_this and u.target in (aten.mm.default, aten.addmm.default)]


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
    """The gated MLP ending at ``mul``: {x, w_gate, w_up | w_gate_up, bias_gate, bias_up |
    bias_gate_up (None without biases), activation, view}, else None. The result must have the
    input's dtype, as the gated op's has (a bias of another dtype can promote the graph's)."""
    m = _match_gated(mul)
    if m is None or _val(mul) is None or _val(m["x"]) is None or _val(mul).dtype != _val(m["x"]).dtype:
        return None
    return m


def _match_gated(mul: Node) -> Optional[dict]:
    if mul.op != "call_function" or mul.target is not aten.mul.Tensor or len(mul.args) != 2:
        return None
    for act_out, up_side in ((mul.args[0], mul.args[1]), (mul.args[1], mul.args[0])):
        if not isinstance(up_side, Node) or not isinstance(act_out, Node) or _only_user(act_out) is not mul:
            continue
        halves = _split_halves(up_side)
        if halves is not None and _only_user(up_side) is mul:
            gate_item, h = halves
            lin = _peel(h)
            if lin is not None and _only_user(h) is up_side.args[0]:
                for name in GATED_ACTIVATIONS:
                    hit = match_activation(gate_item, name)
                    if hit is not None and hit[0] is act_out:
                        return {"x": lin.x, "w_gate_up": lin.weight, "bias_gate_up": lin.bias, "activation": name,
                                "view": lin.view}
        if _only_user(up_side) is not mul:
            continue
        up = _peel(up_side)
        if up is None:
            continue
        for gate_gemm in _sibling_gemms(up.x, up.gemm):
            start = _down(gate_gemm)
            gate = _peel(start)
            if (gate is None or gate.gemm is not gate_gemm or not _same_input(gate.x, up.x)
                    or (gate.view is None) != (up.view is None) or (gate.bias is None) != (up.bias is None)):
                continue
            for name in GATED_ACTIVATIONS:
                hit = match_activation(start, name)
                if hit is None or hit[0] is not act_out:
                    continue
                wg, wu = _val(gate.weight), _val(up.weight)
                if wg is None or wu is None or tuple(wg.shape) != tuple(wu.shape) or wg.dtype != wu.dtype:
                    continue
                if gate.bias is not None and _val(gate.bias).dtype != _val(up.bias).dtype:
                    continue
                return {"x": up.x, "w_gate": gate.weight, "w_up": up.weight, "bias_gate": gate.bias,
                        "bias_up": up.bias, "activation": name, "view": up.view}
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
                bias = m.get("bias_gate_up")
                if "w_gate_up" in m:  # the concatenated weight's two halves, as views
                    w = m["w_gate_up"]
                    n = _val(w).shape[0] // 2
                    halves = []
                    for lo, hi in ((0, n), (n, 2 * n)):
                        half = graph.call_function(aten.slice.Tensor, (w, 0, lo, hi))
                        half.meta["val"] = _val(w)[lo:hi]
                        halves.append(half)
                    m["w_gate"], m["w_up"] = halves
                elif m["bias_gate"] is not None:  # the kernel reads one [gate | up] bias vector
                    bias = graph.call_function(aten.cat.default, ([m["bias_gate"], m["bias_up"]],))
                    bias.meta["val"] = torch.cat([_val(m["bias_gate"]), _val(m["bias_up"])])
                args = (m["x"], m["w_gate"], m["w_up"]) + ((bias,) if bias is not None else ())
                fused = graph.call_function(GATED_OP if bias is None else GATED_BIAS_OP, args,
                                            {"activation": m["activation"], "kernel_config": ""})
                fused.meta["val"] = _fake(*(_val(x) for x in args), activation="")
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
def extern_choice(with_bias: bool = False):
    """Our gated op as an Inductor choice (made once per process: extern_kernels names are unique)."""
    from torch._inductor.select_algorithm import ExternKernelChoice

    from .state import build_tag

    op = GATED_BIAS_OP if with_bias else GATED_OP
    name = f"cutedsl_gemm_gated_{'bias_' if with_bias else ''}{build_tag()}"
    return ExternKernelChoice(op, name=name, has_out_variant=False, op_overload=op)


def offer(inputs, activation: str, device, sizes):
    """(problem at the hint, spec, configs, dynamic) for the gated GEMM of ``inputs`` (IR nodes),
    or raises UnsupportedGemmError naming the rule."""
    from ..configs import rank_configs
    from ..problem import GemmProblem, check_aligned, operand_major
    from .choices import device_arch
    from .eligibility import num_sms, operand_from_ir
    from .state import STATE

    a, wg, wu, *bias = (operand_from_ir(x) for x in inputs)
    if a.dim != 2 or wg.dim != 2 or tuple(wg.shape) != tuple(wu.shape):
        raise UnsupportedGemmError("shape: a (M, K) and two (N, K) weights")
    dt = dtype_name(a.dtype)
    if dt not in ("bfloat16", "float16") or wg.dtype != a.dtype or wu.dtype != a.dtype:
        raise UnsupportedGemmError(f"dtype: 16-bit operands of one dtype, got {a.dtype}, {wg.dtype}, {wu.dtype}")
    for what, t in (("w_gate", wg), ("w_up", wu)):
        if operand_major(t, what, "k", "n", sizes) != "k":
            raise UnsupportedGemmError(f"layout: {what} must be K-contiguous ((N, K) row-major)")
        check_aligned(t, what, 1, sizes)
    m, k = a.shape
    n = wg.shape[0]
    if not sizes.multiple_of(n, 8):
        raise UnsupportedGemmError(f"alignment: N={n} must be a multiple of 8 (16-byte output rows)")
    a_major = operand_major(a, "a", "k", "m", sizes)
    check_aligned(a, "a", 1 if a_major == "k" else 0, sizes)
    bias_dtype = "float32"
    if bias:
        (b,) = bias
        if b.dim != 1 or not sizes.equals(b.shape[0] - 2 * n, 0) or not sizes.equals(b.stride[0], 1):
            raise UnsupportedGemmError(f"bias: a contiguous (2N,) [gate | up] vector, got shape {b.shape}")
        if b.dtype not in (dt, "float32"):
            raise UnsupportedGemmError(f"bias: dtype must be {dt} or float32, got {b.dtype}")
        bias_dtype = b.dtype
    arch = device_arch(device)
    problem = GemmProblem(sizes.hint(m), 2 * sizes.hint(n), sizes.hint(k), 1, dt, dt, a_major, "k", arch,
                          packed=False)
    spec = EpilogueSpec(gated=activation, bias="col" if bias else None, bias_dtype=bias_dtype)
    configs = rank_configs(problem, num_sms=num_sms(device), top_k=STATE.top_k, epilogue=spec)
    if not configs:
        raise UnsupportedGemmError(f"no config takes the gated epilogue for {problem.describe()}")
    dynamic = not all(sizes.is_static(x) for x in (m, n, k))
    return problem, spec, configs, dynamic


def lower(a, w_gate, w_up, bias_gate_up=None, *, activation, kernel_config=""):
    """Our kernel's configs against the unfused ops, in one autotune; the unfused ops inlined if
    they win (as the fused epilogue chains' lowering). Both gated ops (with and without the bias)."""
    from torch._inductor.codegen.subgraph import SubgraphTemplate
    from torch._inductor.ir import ExternKernel, FixedLayout, FlexibleLayout
    from torch._inductor.lowering import fallback_handler
    from torch._inductor.virtualized import V

    from .choices import autotuning
    from .eligibility import DISPATCH, Sizes
    from .lowering import _inline, _inline_unfused, _select, _tracer
    from .state import STATE

    args = (a, w_gate, w_up) + (() if bias_gate_up is None else (bias_gate_up,))
    op = GATED_OP if bias_gate_up is None else GATED_BIAS_OP
    kwargs = {"activation": activation}
    if kernel_config or not (STATE.enabled and autotuning()):
        return fallback_handler(op, add_to_fallback_set=False)(*args, activation=activation,
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
    choice = extern_choice(bias_gate_up is not None)
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


def _reference_fn(activation, a, w_gate, w_up, bias_gate_up=None):
    return reference(a, w_gate, w_up, bias_gate_up, activation=activation)
