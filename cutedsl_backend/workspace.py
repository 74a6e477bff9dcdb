"""Split-K workspaces: the fp32 partial tiles and int32 arrival counters a split-K launch needs.

One pair of buffers per (device, stream): launches on one stream run in order, so they can share
it; the kernels leave the counters at zero, so they are zeroed only when allocated. Buffers grow
to the next power of two. A pair a CUDA graph captured is never freed (the graph keeps the
pointers it was captured with); one no capture used is released when it grows, once the launches
already queued on its stream are done with it (the caching allocator waits for them). A stream
holds one pair, plus the smaller ones graphs captured.

CUDA graphs. A capture uses the stream's buffers when they are large enough (warm up before
capturing, as torch asks). Otherwise the launch gets buffers of its own, allocated inside the
capture (the counters' zeroing becomes a node of the graph) and released after it, so nothing
stays alive in the graph's memory pool: Inductor's CUDA-graph trees check that every live block
in their pool is a tracked output. For the same reason the persistent buffers are allocated on a
helper thread: the trees route the allocations of the thread that warms a graph up into its pool.

A graph captured on a stream whose buffers were large enough uses those buffers: replay it on
that stream (or at least never concurrently with eager split-K launches on it), and never run two
replays of one graph at the same time on different streams: they would share the workspace (as
they would share any buffer the graph captured).
"""

from __future__ import annotations

import threading

import torch


def _next_pow2(n: int) -> int:
    return 1 << max(0, n - 1).bit_length()


# whether the calling thread's current stream is capturing (the C call: get runs on every split-K launch)
_capturing = getattr(torch._C, "_cuda_isCurrentStreamCapturing", torch.cuda.is_current_stream_capturing)


def _stream_object(device: torch.device, stream: int) -> torch.cuda.Stream:
    """The Stream object of handle ``stream`` on ``device``: the caller's current stream, or the
    default stream for handle 0 (ExternalStream(0) would be a new pooled stream, not the default)."""
    current = torch.cuda.current_stream(device)
    if current.cuda_stream == stream:
        return current
    return torch.cuda.default_stream(device) if stream == 0 else torch.cuda.ExternalStream(stream, device=device)


class SplitKWorkspaces:
    """Per (device, stream) workspace buffers, grown on demand; thread-safe."""

    def __init__(self):
        self._lock = threading.Lock()
        self._buffers: dict[tuple, tuple[torch.Tensor, torch.Tensor]] = {}
        self._retired: list[tuple[torch.Tensor, torch.Tensor]] = []
        self._captured: set[tuple] = set()  # the (device, stream) whose current pair a capture used

    def get(self, device: torch.device, stream: int, counters: int, floats: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(fp32 work, int32 counters) with at least ``floats`` and ``counters`` elements, for
        launches on ``stream`` (a CUDA stream handle) of ``device``; the counters are zero. While
        the stream is being captured and its buffers are too small, the pair is the launch's own
        (keep it alive until the launch is enqueued)."""
        key = (device.index, stream)
        with self._lock:
            have = self._buffers.get(key)
            capturing = _capturing()
            if have is not None and have[0].numel() >= floats and have[1].numel() >= counters:
                if capturing:
                    self._captured.add(key)
                return have
            if capturing:
                return (torch.empty(floats, dtype=torch.float32, device=device),
                        torch.zeros(counters, dtype=torch.int32, device=device))
            old_floats, old_counters = (0, 0) if have is None else (have[0].numel(), have[1].numel())
            made = self._allocate(device, max(_next_pow2(floats), old_floats), max(_next_pow2(counters), old_counters))
            if have is not None:
                if key in self._captured:
                    self._retired.append(have)  # a captured graph points at it
                else:
                    # allocated on a helper stream, used on this one: freed once this stream's
                    # queued launches are done with it
                    for t in have:
                        t.record_stream(_stream_object(device, stream))
            self._captured.discard(key)
            self._buffers[key] = made
            return made

    def capacity(self, device: torch.device, stream: int) -> tuple[int, int]:
        """(floats, counters) the persistent buffers of ``stream`` hold; (0, 0) before its first."""
        with self._lock:
            have = self._buffers.get((device.index, stream))
        return (0, 0) if have is None else (have[0].numel(), have[1].numel())

    @staticmethod
    def _allocate(device: torch.device, floats: int, counters: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Allocate and zero on a helper thread (outside any memory pool this thread is routed to),
        finished before returning."""
        made: list = []
        failed: list = []

        def allocate():
            try:
                # a non-blocking stream of its own: no implicit synchronization with the legacy
                # default stream (which another thread's capture would not allow)
                side = torch.cuda.Stream(device)
                with torch.cuda.device(device), torch.cuda.stream(side):
                    pair = (torch.empty(floats, dtype=torch.float32, device=device),
                            torch.zeros(counters, dtype=torch.int32, device=device))
                side.synchronize()
                made.append(pair)
            except BaseException as e:  # re-raised on the calling thread
                failed.append(e)

        helper = threading.Thread(target=allocate, name="cutedsl-workspace")
        helper.start()
        helper.join()
        if failed:
            raise failed[0]
        return made[0]
