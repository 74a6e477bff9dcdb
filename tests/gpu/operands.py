"""Random GEMM operands of a given layout for the GPU tests (a seeded CUDA generator, returned for
the test's further draws)."""

import torch


def layout_operands(L, M, N, K, dtype, a_major, b_major, seed):
    """a (L, M, K) and b (L, K, N) in ``dtype``, each row-major ("k" / "n") or column-major in
    its last two dims; and the generator, for more draws."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(L, M, K, device="cuda", generator=g) if a_major == "k" else \
        torch.randn(L, K, M, device="cuda", generator=g).transpose(1, 2)
    b = torch.randn(L, K, N, device="cuda", generator=g) if b_major == "n" else \
        torch.randn(L, N, K, device="cuda", generator=g).transpose(1, 2)
    return a.to(dtype), b.to(dtype), g
