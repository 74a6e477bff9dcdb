"""Gated MLPs under torch.compile: ``act(x @ w_gate^T) * (x @ w_up^T)`` found in post-grad graphs
and offered as one GEMM (``cutedsl_backend.gemm_gated``) against the unfused ops.

The pattern (2-D and the 3-D ``nn.Linear`` view form): two ``mm`` on the same input (or on equal
reshapes of one tensor) with transposed (N, K) weights, an activation of the gated family on one
(in its post-grad form, matched as the epilogue fusion matches activations) and a ``mul`` with the
other; every intermediate used only there. Or one GEMM on a concatenated (2N, K) weight whose
result is split in two halves; or two FP8 ``torch._scaled_mm`` on one input and its scale (no
bias, 2-D). Each 16-bit GEMM may carry its ``nn.Linear`` bias (``addmm``, or the
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
import time
from typing import Optional

import torch
from torch.fx import Graph, Node

from ..epilogue import GATED_ACTIVATIONS, EpilogueSpec
from ..problem import UnsupportedGemmError, dtype_name
from .fusion import _VIEWS, _only_user, _val, match_activation
from .gated_ops import (  # noqa: F401  (GATED_OPS: the lowerings lowering.register installs)
    GATED_BIAS_OP,
    GATED_OP,
    GATED_OPS,
    GATED_SCALED_OP,
    _fake,
    _fake_scaled,
    extern_choice,
    reference,
    reference_scaled,
)

log = logging.getLogger("cutedsl_backend.inductor")
aten = torch.ops.aten

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
    w = _weight(wt, gemm)
    return None if w is None else (x, w, bias)


def _weight(wt, gemm: Node):
    """``w`` of ``permute(w, [1, 0])`` used by ``gemm`` alone (an nn.Linear's (N, K) weight), else None."""
    if isinstance(wt, Node) and wt.target is aten.permute.default and list(wt.args[1]) == [1, 0] and (
            _only_user(wt) is gemm):
        return wt.args[0]
    return None


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
    bias_gate_up (None without biases), activation, view} or, on FP8 operands, {x, w_gate, w_up,
    scale_a, scale_gate, scale_up, out_dtype, fast_accum, activation, view}; else None. The
    result must have the dtype the gated op gives (a bias of another dtype can promote the graph's)."""
    m = _match_gated(mul) or _match_scaled(mul)
    if m is None or _val(mul) is None or _val(m["x"]) is None:
        return None
    if _val(mul).dtype != m.get("out_dtype", _val(m["x"]).dtype):
        return None
    return m


def _scaled_linear(node) -> Optional[tuple]:
    """(x, weight, scale_a, scale_b, out_dtype, use_fast_accum) of ``_scaled_mm(x, permute(w, [1,
    0]), scale_a, scale_b)`` without bias or result scale (an FP8 nn.Linear), else None."""
    if not isinstance(node, Node) or node.op != "call_function" or node.target is not aten._scaled_mm.default:
        return None
    names = ("self", "mat2", "scale_a", "scale_b", "bias", "scale_result", "out_dtype", "use_fast_accum")
    args = dict(zip(names, node.args))
    args.update(node.kwargs)
    x, wt = args.get("self"), args.get("mat2")
    w = _weight(wt, node)
    if w is None or args.get("bias") is not None or args.get("scale_result") is not None:
        return None
    out_dtype = args.get("out_dtype") or _val(x).dtype
    return x, w, args.get("scale_a"), args.get("scale_b"), out_dtype, bool(args.get("use_fast_accum"))


def _match_scaled(mul: Node) -> Optional[dict]:
    """act(_scaled_mm(x, w_gate^T, s_a, s_gate)) * _scaled_mm(x, w_up^T, s_a, s_up): one FP8 input
    and its scale, the same output dtype and accumulation mode, 2-D."""
    if mul.op != "call_function" or mul.target is not aten.mul.Tensor or len(mul.args) != 2:
        return None
    for act_out, up_side in ((mul.args[0], mul.args[1]), (mul.args[1], mul.args[0])):
        up = _scaled_linear(up_side)
        if (up is None or not isinstance(act_out, Node) or _only_user(act_out) is not mul
                or _only_user(up_side) is not mul):
            continue
        for gate_mm in list(up[0].users):
            gate = _scaled_linear(gate_mm) if gate_mm is not up_side else None
            if gate is None or gate[0] is not up[0] or gate[2] is not up[2] or gate[4:] != up[4:]:
                continue
            wg, wu = _val(gate[1]), _val(up[1])
            if wg is None or wu is None or tuple(wg.shape) != tuple(wu.shape) or wg.dtype != wu.dtype:
                continue
            for name in GATED_ACTIVATIONS:
                hit = match_activation(gate_mm, name)
                if hit is not None and hit[0] is act_out:
                    return {"x": up[0], "w_gate": gate[1], "w_up": up[1], "scale_a": up[2], "scale_gate": gate[3],
                            "scale_up": up[3], "out_dtype": up[4], "fast_accum": up[5], "activation": name,
                            "view": None}
    return None


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
                if "scale_a" in m:
                    args = tuple(m[k] for k in ("x", "w_gate", "w_up", "scale_a", "scale_gate", "scale_up"))
                    kwargs = {"activation": m["activation"], "out_dtype": m["out_dtype"],
                              "fast_accum": m["fast_accum"], "kernel_config": ""}
                    fused = graph.call_function(GATED_SCALED_OP, args, kwargs)
                    fused.meta["val"] = _val(node)
                    node.replace_all_uses_with(fused)
                    done += 1
                    continue
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

def offer(inputs, activation: str, device, sizes, scaled: Optional[tuple] = None):
    """(problem at the hint, spec, configs, dynamic) for the gated GEMM of ``inputs`` (IR nodes:
    a, w_gate, w_up, then the bias, or with ``scaled`` = (out_dtype, fast_accum) the three FP8
    scales), or raises UnsupportedGemmError naming the rule."""
    from ..configs import rank_configs
    from ..configs.as_run import candidates_as_run
    from ..problem import INPUT_DTYPES_FP8, GemmProblem, check_aligned, operand_major
    from .choices import device_arch
    from .eligibility import num_sms, operand_from_ir
    from .state import STATE

    a, wg, wu, *rest = (operand_from_ir(x) for x in inputs)
    if a.dim != 2 or wg.dim != 2 or tuple(wg.shape) != tuple(wu.shape):
        raise UnsupportedGemmError("shape: a (M, K) and two (N, K) weights")
    dt, wdt = dtype_name(a.dtype), dtype_name(wg.dtype)
    if scaled is not None:
        od = dtype_name(scaled[0])
        if dt not in INPUT_DTYPES_FP8 or wdt not in INPUT_DTYPES_FP8 or wu.dtype != wg.dtype:
            raise UnsupportedGemmError(f"dtype: FP8 operands, got {a.dtype}, {wg.dtype}, {wu.dtype}")
    elif dt not in ("bfloat16", "float16") or wg.dtype != a.dtype or wu.dtype != a.dtype:
        raise UnsupportedGemmError(f"dtype: 16-bit operands of one dtype, got {a.dtype}, {wg.dtype}, {wu.dtype}")
    else:
        od = dt
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
    bias_dtype, bias, kinds = "float32", None, (None, None)
    if scaled is not None:
        kinds = _scale_kinds(rest, m, n, sizes)
    elif rest:
        (b,) = rest
        if b.dim != 1 or not sizes.equals(b.shape[0] - 2 * n, 0) or not sizes.equals(b.stride[0], 1):
            raise UnsupportedGemmError(f"bias: a contiguous (2N,) [gate | up] vector, got shape {b.shape}")
        if b.dtype not in (dt, "float32"):
            raise UnsupportedGemmError(f"bias: dtype must be {dt} or float32, got {b.dtype}")
        bias_dtype, bias = b.dtype, "col"
    arch = device_arch(device)
    problem = GemmProblem(sizes.hint(m), 2 * sizes.hint(n), sizes.hint(k), 1, dt, od, a_major, "k", arch,
                          packed=False, b_dtype=None if wdt == dt else wdt,
                          fast_accum=bool(scaled is not None and scaled[1]))
    problem.check()  # e.g. an FP8 output or e5m2 x e5m2: refused here, not while benchmarking
    spec = EpilogueSpec(gated=activation, bias=bias, bias_dtype=bias_dtype, scale_a=kinds[0], scale_b=kinds[1])
    configs = rank_configs(problem, num_sms=num_sms(device), top_k=STATE.top_k, epilogue=spec)
    if not configs:
        raise UnsupportedGemmError(f"no config takes the gated epilogue for {problem.describe()}")
    dynamic = not all(sizes.is_static(x) for x in (m, n, k))
    if not dynamic:  # its candidates' partial last tiles move, as the eager pick's
        configs = candidates_as_run(configs, problem, spec)
    return problem, spec, configs, dynamic


def _scale_kinds(scales, m, n, sizes) -> tuple:
    """The gated kernel's scale kinds for _scaled_mm's scales (a's, the gate's, the up's): a's
    "scalar" or "row" ((M, 1)); the weights' always one 2N "col" vector (the op makes it per call
    from two scales, each one or N contiguous values)."""
    from ..problem import gated_scale

    sa, sg, su = scales
    kind_a = gated_scale(sa, "scale_a", m, "row of a", sizes)
    for what, t in (("scale_gate", sg), ("scale_up", su)):
        gated_scale(t, what, n, "weight row", sizes)
    return ("scalar" if kind_a == "scalar" else "row"), "col"


def lower(a, w_gate, w_up, bias_gate_up=None, *, activation, kernel_config=""):
    """Our kernel's configs against the unfused ops, in one autotune; the unfused ops inlined if
    they win (as the fused epilogue chains' lowering). Both 16-bit gated ops (with and without
    the bias)."""
    args = (a, w_gate, w_up) + (() if bias_gate_up is None else (bias_gate_up,))
    op = GATED_OP if bias_gate_up is None else GATED_BIAS_OP
    return _lower(op, args, {"activation": activation}, kernel_config, functools.partial(_reference_fn, activation))


def lower_scaled(a, w_gate, w_up, scale_a, scale_gate, scale_up, *, activation, out_dtype, fast_accum,
                 kernel_config=""):
    """:func:`lower` for the FP8 gated op."""
    kwargs = {"activation": activation, "out_dtype": out_dtype, "fast_accum": fast_accum}
    ref = functools.partial(_reference_scaled_fn, activation, out_dtype, fast_accum)
    return _lower(GATED_SCALED_OP, (a, w_gate, w_up, scale_a, scale_gate, scale_up), kwargs, kernel_config, ref,
                  scaled=(out_dtype, fast_accum))


def _lower(op, args, kwargs, kernel_config, ref, scaled=None):
    from torch._inductor.ir import ExternKernel, FixedLayout, FlexibleLayout
    from torch._inductor.lowering import fallback_handler
    from torch._inductor.virtualized import V

    from . import decisions
    from .choices import autotuning, precompile_offer, suppress
    from .eligibility import DISPATCH, Offer, Sizes
    from .lowering import _inline, _inline_unfused, select_against_unfused, unfused_choice
    from .state import STATE

    if kernel_config or not (STATE.enabled and autotuning()):
        return fallback_handler(op, add_to_fallback_set=False)(*args, **kwargs, kernel_config=kernel_config)
    inputs = [ExternKernel.realize_input(x) for x in args]
    for x in inputs:
        try:
            x.freeze_layout()
        except (AttributeError, NotImplementedError):
            pass
    name = "cutedsl_fused_gemm_gated"
    try:
        problem, spec, configs, dynamic = offer(inputs, kwargs["activation"], inputs[0].get_device(),
                                                Sizes(V.graph.sizevars), scaled)
    except UnsupportedGemmError as e:
        log.debug("cutedsl: not offering %s: %s", name, e)
        return _inline(ref, args, name)
    gated_offer = Offer(problem, spec, tuple(configs), dynamic=dynamic)
    # the decision cache, as for the fused epilogue chains (decisions.py): a lost chain is put back
    # at once, a won one emitted unbenchmarked, a close one offered its recorded config only
    dkey = decisions.key(name, gated_offer, decisions.device_name(inputs[0].get_device()))
    gated_offer, verdict = decisions.narrow(gated_offer, dkey)
    def no_plain_candidates():  # as after a lost epilogue chain: none for the inlined GEMMs
        for weight in inputs[1:3]:
            suppress(inputs[0], weight)

    if verdict == "lost":
        log.debug("cutedsl: %s: the unfused ops won here before (decision cache); inlined", name)
        no_plain_candidates()
        return _inline_unfused(ref, args, name)
    size = [inputs[0].get_size()[0], inputs[1].get_size()[0]]
    out_dtype = scaled[0] if scaled is not None else inputs[0].get_dtype()
    layout = FixedLayout(inputs[0].get_device(), out_dtype, size, FlexibleLayout.contiguous_strides(size))
    choice = extern_choice(op)
    picks = [DISPATCH] if dynamic else [c.name for c in gated_offer.configs]
    ours = []
    for pick in picks:
        caller = choice.bind(inputs, layout, **kwargs, kernel_config=pick)
        caller.description = f"cutedsl gated {pick}"
        caller.cutedsl_decision, caller.cutedsl_config = dkey, pick  # the feedback saver files the timing
        ours.append(caller)
    precompile_offer(gated_offer)
    if verdict == "won":
        log.debug("cutedsl: %s: %s won here before (decision cache)", name, picks[0])
        return ours[0].output_node()
    started = time.perf_counter()
    unfused = unfused_choice(name, inputs, layout, ref, "unfused GEMMs + activation * up")
    node, winner = select_against_unfused(name, unfused, ours, op, inputs, layout, started)
    if winner is unfused:
        log.debug("cutedsl: %s: the unfused ops won; inlined", name)
        no_plain_candidates()
        return _inline_unfused(ref, args, name, gm=unfused.gm)
    return node


def _reference_fn(activation, a, w_gate, w_up, bias_gate_up=None):
    return reference(a, w_gate, w_up, bias_gate_up, activation=activation)


def _reference_scaled_fn(activation, out_dtype, fast_accum, a, w_gate, w_up, scale_a, scale_gate, scale_up):
    return reference_scaled(a, w_gate, w_up, scale_a, scale_gate, scale_up, activation=activation,
                            out_dtype=out_dtype, fast_accum=fast_accum)


# the lowering of each gated op (lowering.register installs them)
LOWERINGS = {GATED_OP: lower, GATED_BIAS_OP: lower, GATED_SCALED_OP: lower_scaled}
