"""Split-K workspaces: the fp32 partial tiles and int32 arrival counters a split-K launch needs.

One pair of buffers per (device, stream): launches on one stream run in order, so they can share
it; the kernels leave the counters at zero, so they are zeroed only when allocated. Buffers are
never freed (a captured CUDA graph keeps the pointers it was captured with) and grow to the next
power of two, so a process holds at most twice its largest workspace per stream. Buffers
allocated while a stream is being captured belong to captures only (their zeroing is a node of
the graph, not done yet), so eager launches never use them.

Two replays of one captured graph must not run at the same time on different streams: they
would share its workspace (as they would share any buffer the graph captured).
"""

from __future__ import annotations

import threading

import torch


class SplitKWorkspaces:
    """Per (device, stream, capturing) workspace buffers, grown on demand; thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._buffers: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self._retired: list[tuple[torch.Tensor, torch.Tensor]] = []

    def get(self, device: torch.device, stream: int, counters: int, floats: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(fp32 work, int32 counters) with at least ``floats`` and ``counters`` elements, for
        launches on ``stream`` (a CUDA stream handle) of ``device``; the counters are zero."""
        key = (device.index, stream, torch.cuda.is_current_stream_capturing())
        with self._lock:
            have = self._buffers.get(key)
            if have is not None and have[0].numel() >= floats and have[1].numel() >= counters:
                return have
            size = lambda n, old: max(1 << max(0, n - 1).bit_length(), old)  # noqa: E731
            work = torch.empty(size(floats, 0 if have is None else have[0].numel()), dtype=torch.float32, device=device)
            count = torch.zeros(size(counters, 0 if have is None else have[1].numel()), dtype=torch.int32,
                                device=device)
            if have is not None:
                self._retired.append(have)  # a captured graph may still point at it
            self._buffers[key] = (work, count)
            return work, count
