"""SASS listings read as opcodes, for the compile gates of both kernel families."""

import re

# global memory's opcodes (CCTL: the residual's L2 prefetch; opcodes leaves out CCTL.IVALL, an
# invalidate the kernels issue ahead of the wait)
GLOBAL_ACCESS = ("UTMALDG", "UTMASTG", "UTMAPF", "UBLKCP", "UBLKPF", "LDG", "STG", "ATOMG", "RED", "ATOM", "CCTL")


def opcodes(sass: str) -> list:
    """The opcodes of a SASS listing, in code order (predicates dropped; CCTL.IVALL, a cache
    invalidate that touches no memory, left out)."""
    ops = []
    for line in sass.splitlines():
        m = re.search(r"\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_]*)(\.\S+)?", line)
        if m and not (m.group(1) == "CCTL" and (m.group(2) or "").startswith(".IVALL")):
            ops.append(m.group(1))
    return ops


def assert_waits_first(ops: list, plain: list) -> None:
    """A dependent launch (GemmConfig.pdl) waits for the kernel before it (griddepcontrol.wait:
    ACQBULK) before any global access in ``ops`` and lets the next one launch (PREEXIT); the
    same kernel without pdl (``plain``) has neither."""
    first_global = min(i for i, op in enumerate(ops) if op.startswith(GLOBAL_ACCESS))
    assert "ACQBULK" in ops and ops.index("ACQBULK") < first_global, (ops.index("ACQBULK"), first_global)
    assert "PREEXIT" in ops
    assert "ACQBULK" not in plain and "PREEXIT" not in plain


def early_loads_consumed_after_mainloop(sass: str) -> list:
    """Each global load (LDG) issued before the first MMA (HGMMA/QGMMA) of a listing, as
    (its register, the index of the first instruction after it that names the register, the index
    of the last MMA); instructions counted in code order."""
    ins = [m.group(1).strip() for m in (re.search(r"/\*[0-9a-f]+\*/\s+(.*?);", line) for line in sass.splitlines())
           if m]
    mma = [i for i, t in enumerate(ins) if re.search(r"\b[HQ]GMMA\b", t)]
    found = []
    for i, t in enumerate(ins[:mma[0]]):
        m = re.match(r"(?:@!?U?P\w+\s+)?LDG\S*\s+(R\d+)", t)
        if m:
            use = next(j for j in range(i + 1, len(ins)) if re.search(r"\b" + m.group(1) + r"\b", ins[j]))
            found.append((m.group(1), use, mma[-1]))
    return found


def compiles_with_the_gates(problem, cfg, spec) -> None:
    """``cfg``'s kernel for ``problem`` and ``spec``: MMAs (FP8 ones for FP8 operands), TMA loads
    and stores, nothing spilled, within the per-cell compile budget."""
    from cutedsl_backend.build import compile_kernel
    from cutedsl_backend.compiler import resolve
    from cutedsl_backend.validation.budgets import load_budgets

    cg = compile_kernel(problem, resolve(problem, cfg, spec))
    counts = cg.sass_counts()
    assert counts["QGMMA" if "float8" in problem.dtype else "HGMMA"] > 0, counts
    assert counts["UTMALDG"] > 0 and counts["UTMASTG"] > 0, counts
    assert counts["LDL"] == 0 and counts["STL"] == 0 and cg.resources.local_bytes == 0, (counts, cg.resources)
    assert cg.compile_seconds <= load_budgets()["families"]["sm90a/gemm"]["cell_max_s"], cg.compile_seconds
