"""The post-grad FX pass that forms our fused GEMM ops.

It walks each aten.mm / addmm / _scaled_mm forward through the shapes our epilogue formula
covers, in its order:

    GEMM [-> view (3-D nn.Linear)] [-> + bias] [-> + residual] [-> activation] [-> dtype cast]

and replaces the chain by one ``torch.ops.cutedsl.gemm_ab*`` op with ``kernel_config=''`` (its
lowering autotunes it against the unfused ops, see :mod:`.lowering`). Every intermediate must have
no user outside the chain (a tensor saved for backward stops it). Activations are recognized in
their post-grad form (gelu and silu are decomposed by then, with upcasts for 16-bit dtypes): each
is traced once per dtype with Inductor's own decomposition table and matched node by node.
The pass is a CustomGraphPass whose uuid() is part of the FX graph cache key.
"""

from __future__ import annotations

import functools
import logging
import math
from dataclasses import dataclass, field
from typing import Any, Optional

import torch
from torch._inductor.custom_graph_pass import CustomGraphPass
from torch.fx import Graph, Node

from ..epilogue import ACTIVATION_NAMES, torch_activation
from . import decisions, ops
from .choices import autotuning, offer_for, unsupported_mode
from .eligibility import Sizes, operand_from_fake
from .state import NO_PLAIN_CANDIDATES, STATE, build_tag

log = logging.getLogger("cutedsl_backend.inductor")
aten = torch.ops.aten
prims = torch.ops.prims

_VIEWS = (aten.view.default, aten._unsafe_view.default, aten.reshape.default)
_CASTS = (prims.convert_element_type.default, aten._to_copy.default)
_OUT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


class FusionPass(CustomGraphPass):
    """Install as ``torch._inductor.config.post_grad_custom_post_pass`` (enable() does)."""

    def __call__(self, graph: Graph) -> None:
        if STATE.enabled and STATE.fuse and autotuning() and unsupported_mode() is None:
            if STATE.gated_mlp:
                from .gated_mlp import fuse_gated

                fuse_gated(graph)  # first: its GEMMs are then no longer plain chains
            fuse_epilogues(graph)

    def uuid(self) -> Optional[Any]:
        from .choices import settings_tag

        return f"cutedsl-fusion-{build_tag()}-{settings_tag()}"


class ChainedPass(CustomGraphPass):
    """The user's post-grad pass, then ours (torch 2.11 takes a single pass object)."""

    def __init__(self, first, second: FusionPass):
        self.first, self.second = first, second

    def __call__(self, graph: Graph) -> None:
        self.first(graph)
        self.second(graph)

    def uuid(self) -> Optional[Any]:
        # a plain callable has no uuid: Inductor then bypasses its FX graph cache, as without us
        first = self.first.uuid() if isinstance(self.first, CustomGraphPass) else None
        return None if first is None else (first, self.second.uuid())


@dataclass
class Chain:
    gemm: Node
    a: Node
    b: Node
    scale_a: Optional[Node] = None
    scale_b: Optional[Node] = None
    bias: Optional[Node] = None
    residual: Optional[Node] = None
    alpha: float = 1.0
    beta: float = 1.0
    activation: Optional[str] = None
    out_dtype: Optional[torch.dtype] = None
    fast_accum: bool = False
    view: Optional[Node] = None
    nodes: list = field(default_factory=list)  # matched, in graph order; the last is replaced
    epilogue_nodes: int = 0  # bias/residual adds, activation, cast: zero means nothing to fuse

    @property
    def kind(self) -> tuple:
        return (self.scale_a is not None, self.bias is not None, self.residual is not None)


def fuse_epilogues(graph: Graph) -> int:
    """Replace every eligible chain in ``graph``; returns how many were replaced."""
    done = 0
    for node in list(graph.nodes):
        if node.op == "call_function" and node.target in (aten.mm.default, aten.addmm.default,
                                                          aten._scaled_mm.default):
            try:
                chain = match_chain(node)
                offer = _offer(chain) if chain is not None else None
                if chain is not None and offer is not None:
                    offer, verdict = _narrow(chain, offer)
                    if verdict == "lost":
                        # the unfused ops won this chain before: leave the graph as Inductor would
                        # see it without us, and (as the compile that lost did) offer no plain
                        # kernel for its GEMM either (choices.plain_gemm_choices reads the mark)
                        node.meta[NO_PLAIN_CANDIDATES] = True
                        log.debug("cutedsl: %s left unfused (the unfused ops won here before: decision cache)",
                                  node)
                        continue
                    _replace(graph, chain)
                    _precompile(offer)
                    done += 1
            except Exception as e:  # never break a compile: the graph keeps its unfused form
                log.warning("cutedsl: fusion of %s skipped after %s: %s", node, type(e).__name__, e)
    if done:
        graph.eliminate_dead_code()
        log.debug("cutedsl: fused %d GEMM epilogue(s)", done)
    return done


def _val(n):
    return n.meta.get("val") if isinstance(n, Node) else None


def _only_user(n: Node) -> Optional[Node]:
    users = list(n.users)
    return users[0] if len(users) == 1 else None


def _arg(node: Node, index: int, name: str, default=None):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def _is_col_vector(t, n) -> bool:
    """Broadcasts along rows of an (..., M, N) result: shape (N,) or (1, N) or (1, 1, N)."""
    return t is not None and t.shape[-1] == n and all(s == 1 for s in t.shape[:-1])


def match_chain(gemm: Node) -> Optional[Chain]:
    """The longest chain from ``gemm`` our epilogue formula covers, or None."""
    out = _val(gemm)
    if out is None:
        return None
    n = out.shape[-1]
    if gemm.target is aten.mm.default:
        chain = Chain(gemm, gemm.args[0], gemm.args[1])
    elif gemm.target is aten.addmm.default:
        inp, a, b = gemm.args[:3]
        alpha, beta = gemm.kwargs.get("alpha", 1), gemm.kwargs.get("beta", 1)
        chain = Chain(gemm, a, b, alpha=float(alpha))
        if _is_col_vector(_val(inp), n) and beta == 1:
            chain.bias = inp
        elif _val(inp) is not None and tuple(_val(inp).shape) == tuple(out.shape):
            chain.residual, chain.beta = inp, float(beta)
        else:
            return None
    else:  # _scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)
        if _arg(gemm, 5, "scale_result") is not None:
            return None
        chain = Chain(gemm, gemm.args[0], gemm.args[1], scale_a=gemm.args[2], scale_b=gemm.args[3],
                      bias=_arg(gemm, 4, "bias"), out_dtype=_arg(gemm, 6, "out_dtype"),
                      fast_accum=bool(_arg(gemm, 7, "use_fast_accum", False)))
    chain.nodes = [gemm]
    cur = gemm
    user = _only_user(cur)
    if user is not None and user.target in _VIEWS and user.op == "call_function":
        chain.view, cur = user, user
        chain.nodes.append(user)
    # + bias (a row vector broadcast over the rows)
    user = _only_user(cur)
    if chain.bias is None and user is not None and _is_add(user, cur) and "alpha" not in user.kwargs:
        other = _other(user, cur)
        if _is_col_vector(_val(other), n) and _val(other).dim() <= 2:
            chain.bias, cur = other, user
            chain.nodes.append(user)
            chain.epilogue_nodes += 1
    # + residual (the whole result's shape); add(x, r, alpha=c) is x + c*r
    user = _only_user(cur)
    if (chain.residual is None and user is not None and _is_add(user, cur)
            and tuple(_shape(_other(user, cur))) == tuple(_shape(cur))):
        other = _other(user, cur)
        alpha = user.kwargs.get("alpha", 1)
        if (alpha == 1 or user.args[0] is cur) and _residual_usable(chain, other):
            chain.residual, chain.beta, cur = other, float(alpha), user
            chain.nodes.append(user)
            chain.epilogue_nodes += 1
    # activation
    if _val(cur) is not None:
        for name in ACTIVATION_NAMES:
            hit = match_activation(cur, name)
            if hit is not None:
                result, nodes = hit
                chain.activation, cur = name, result
                chain.nodes.extend(nodes)
                chain.epilogue_nodes += 1
                break
    # dtype cast
    user = _only_user(cur)
    if user is not None and user.op == "call_function" and user.target in _CASTS:
        dt = _val(user).dtype if _val(user) is not None else None
        if dt in _OUT_DTYPES and set(user.kwargs) <= {"dtype"}:
            chain.nodes.append(user)
            chain.epilogue_nodes += 1
            cur = user
    if not chain.epilogue_nodes:
        return None
    final = _val(cur)
    in_dtype = _val(chain.a).dtype
    if chain.scale_a is not None or final.dtype != in_dtype:
        chain.out_dtype = final.dtype
    return chain


def _is_add(user, cur) -> bool:
    return (user is not None and user.op == "call_function" and user.target is aten.add.Tensor
            and len(user.args) == 2 and all(isinstance(x, Node) for x in user.args) and cur in user.args)


def _other(user: Node, cur: Node) -> Node:
    return user.args[1] if user.args[0] is cur else user.args[0]


def _shape(n) -> tuple:
    v = _val(n)
    return tuple(v.shape) if v is not None else ()


def _residual_usable(chain: Chain, r: Node) -> bool:
    """After a view (3-D nn.Linear), the residual must fold to the GEMM's (M, N) with static
    sizes; before one, any (M, N) residual works."""
    rv = _val(r)
    if rv is None:
        return False
    if chain.view is None:
        return True
    gv = _val(chain.gemm)
    if not all(isinstance(s, int) for s in tuple(gv.shape) + tuple(rv.shape) + tuple(rv.stride())):
        return False
    return rv.dim() == 3 and rv.stride(0) == rv.shape[1] * rv.stride(1)


def _one_arg(name: str):
    """The activation as a one-parameter function (make_fx traces every parameter it sees)."""
    fn = torch_activation(name)
    return lambda x: fn(x)


@functools.lru_cache(None)
def _activation_pattern(name: str, dtype: torch.dtype, device_type: str) -> Graph:
    """The post-grad form of activation ``name`` on a ``dtype`` input (traced once)."""
    from torch._inductor.decomposition import select_decomp_table
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    with FakeTensorMode():
        x = torch.empty(16, 16, dtype=dtype, device=device_type)
        gm = make_fx(_one_arg(name), decomposition_table=select_decomp_table())(x)
    gm.graph.eliminate_dead_code()
    return gm.graph


def match_activation(x: Node, name: str) -> Optional[tuple]:
    """If activation ``name`` is applied to ``x`` (and nothing else uses x or the activation's
    intermediates), (its result node, the matched nodes in graph order); else None."""
    v = _val(x)
    pattern = _activation_pattern(name, v.dtype, v.device.type)
    env: dict = {}
    placeholder = None
    body = []
    for p in pattern.nodes:
        if p.op == "placeholder":
            placeholder = p
        elif p.op == "call_function":
            body.append(p)
        elif p.op == "output":
            out = p.args[0]
            out = out[0] if isinstance(out, (tuple, list)) else out
    env[placeholder] = x
    used = {x}
    for p in body:
        anchors = [env[a] for a in p.all_input_nodes if a in env]
        if not anchors:
            return None
        hit = next((u for u in anchors[0].users if u not in used and u.op == "call_function"
                    and u.target == p.target and _same(p.args, u.args, env) and _same(p.kwargs, u.kwargs, env)),
                   None)
        if hit is None:
            return None
        env[p] = hit
        used.add(hit)
    result = env[out]
    inner = used - {x}
    for node in used - {result}:
        if any(u not in inner for u in node.users):
            return None
    order = {n: i for i, n in enumerate(x.graph.nodes)}
    return result, sorted(inner, key=order.__getitem__)


def _same(p, u, env) -> bool:
    if isinstance(p, Node):
        return env.get(p) is u
    if isinstance(p, (list, tuple)):
        return isinstance(u, (list, tuple)) and len(p) == len(u) and all(_same(x, y, env) for x, y in zip(p, u))
    if isinstance(p, dict):
        return isinstance(u, dict) and p.keys() == u.keys() and all(_same(p[k], u[k], env) for k in p)
    if isinstance(p, float) and not isinstance(p, bool):
        return isinstance(u, (int, float)) and not isinstance(u, bool) and math.isclose(p, u, rel_tol=1e-12)
    return type(p) is type(u) and p == u


def _fused_kwargs(chain: Chain) -> dict:
    kw: dict = {}
    if chain.activation:
        kw["activation"] = chain.activation
    if chain.alpha != 1.0:
        kw["alpha"] = chain.alpha
    if chain.beta != 1.0:
        kw["beta"] = chain.beta
    if chain.out_dtype is not None:
        kw["out_dtype"] = chain.out_dtype
    if chain.fast_accum:
        kw["fast_accum"] = True
    return kw


def _offer(chain: Chain):
    """The lowering's offer for the fused op (the same rules, on the graph's fake tensors), or
    None when the chain is not eligible."""
    residual = _val(chain.residual)
    if residual is not None and chain.view is not None:  # the op takes it folded to (M, N)
        residual = residual.reshape(-1, residual.shape[-1])
    tensors = dict(a=_val(chain.a), b=_val(chain.b), scale_a=_val(chain.scale_a), scale_b=_val(chain.scale_b),
                   bias=_val(chain.bias), residual=residual)
    what = f"fused {chain.gemm.target} + {[n.target for n in chain.nodes[1:]]}"
    # a symbolic M (dynamic=True) is hinted from the fake tensors' shape environment
    sizes = Sizes(shape_env=getattr(getattr(tensors["a"], "fake_mode", None), "shape_env", None))
    offer = offer_for(what, tensors, operand_from_fake, tensors["a"].device, sizes, out_dtype=chain.out_dtype,
                      activation=chain.activation, fast_accum=chain.fast_accum)
    return None if isinstance(offer, str) else offer


def _narrow(chain: Chain, offer) -> tuple:
    """(the offer narrowed by the decision cache, its verdict): the lowering narrows it alike."""
    name = f"cutedsl_fused_{ops.op_name(*chain.kind)}"
    return decisions.narrow(offer, decisions.key(name, offer, decisions.device_name(_val(chain.a).device)))


def _precompile(offer) -> None:
    """Start the fused kernel's compiles now, in worker processes: the lowering that benchmarks
    them comes later in this compile (keys match: same problem, epilogue and configs)."""
    from .choices import precompile_offer

    precompile_offer(offer)


def _replace(graph: Graph, chain: Chain) -> None:
    from torch._guards import detect_fake_mode

    last = chain.nodes[-1]
    args = [chain.a, chain.b] + [x for x in (chain.scale_a, chain.scale_b, chain.bias) if x is not None]
    kwargs = _fused_kwargs(chain)
    op = ops.overload(*chain.kind)
    fake_mode = detect_fake_mode([_val(x) for x in args])
    with graph.inserting_before(last):
        if chain.residual is not None:
            res = chain.residual
            if chain.view is not None:  # fold (B, S, N) to the GEMM's (M, N)
                shape = list(_val(chain.gemm).shape)
                res = graph.call_function(aten.view.default, (res, shape))
                with fake_mode:
                    res.meta["val"] = _val(chain.residual).view(shape)
            args.append(res)
        fused = graph.call_function(op, tuple(args), kwargs)
        with fake_mode:
            fused.meta["val"] = op(*[_val(x) for x in args], **kwargs)
        result = fused
        if chain.view is not None:
            result = graph.call_function(chain.view.target, (fused, *chain.view.args[1:]), dict(chain.view.kwargs))
            with fake_mode:
                result.meta["val"] = aten.view.default(fused.meta["val"], _val(chain.view).shape)
    last.replace_all_uses_with(result)
    for node in reversed(chain.nodes):
        if not node.users:
            graph.erase_node(node)
