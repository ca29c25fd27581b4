"""GPU copy benchmarks in a child process under a deadline, one child for a burst of copies.

A copy that hangs (a broken P2P path, an IOMMU fault) cannot be interrupted inside the process that
issued it; in a child process it can (``runtime.procs``), and the run goes on with a reason. The
child (``python -m pytest_gputopo.bench.copies --serve``) answers one request per line, so the
copies of a health check or of one ``min_p2p_bw`` marker share one torch import and one CUDA
start-up instead of paying them per copy. It ends itself after ``IDLE_S`` without a request, so that
no CUDA context of ours sits on the GPUs while the user's own tests run; on a GPU in an exclusive
compute mode (one process at a time) it is ended right after the copy that needed that GPU, or the
user's next test could find the GPU busy ("all CUDA-capable devices are busy or unavailable").

The request (``CopyRequest``) and the answer (``CopyAnswer``) are a line each, written and read
through their channels (``bench.messages``); an answer that is not one fails the copy, saying why.
"""

from __future__ import annotations

import os
import select
import subprocess
import sys
import time

from ..core import keys, model
from ..runtime.procs import BenchTimeout, Children, tail
from .messages import ANSWERS, REQUESTS, CopyAnswer, CopyRequest

IDLE_S = 5.0  # the child's: it exits after this long without a request
REUSE_S = IDLE_S - 1.0  # ours: a child idle longer may be exiting, so a new one is started
RESULT = "gputopo-copy-result "  # the prefix of an answer line (torch may print its own lines)


class CopyWorker:
    """The child that measures copies, started on first use and again after it ended."""

    def __init__(self) -> None:
        self._children: Children | None = None
        self._proc: subprocess.Popen | None = None
        self._last = 0.0  # when it last answered (time.monotonic)

    def measure(
        self, key: keys.Copy | keys.HostCopy, topology: model.Topology, *, budget_s: float, timeout_s: float
    ) -> CopyAnswer:
        """The child's answer, or an exception with the reason: ``BenchTimeout`` past ``timeout_s``
        (the child is killed), ``MessageError`` for an answer that is not one."""
        cpu_affinity = topology.gpus[key.gpu].cpu_affinity if isinstance(key, keys.HostCopy) else None
        request = REQUESTS.encode(CopyRequest(key, budget_s, cpu_affinity)) + "\n"
        if self._proc is None or self._proc.poll() is not None or time.monotonic() - self._last > REUSE_S:
            self._start()
        try:
            os.write(self._proc.stdin.fileno(), request.encode())  # type: ignore[union-attr]  # started, piped
            answer = self._answer(time.monotonic() + timeout_s, timeout_s)
        except BaseException:
            self.close()  # hung, dead or interrupted: no child is left behind
            raise
        self._last = time.monotonic()
        gpus = (key.src, key.dst) if isinstance(key, keys.Copy) else (key.gpu,)
        if any(topology.gpus[g].exclusive for g in gpus if g < len(topology.gpus)):
            self.close()
        return answer

    def _start(self) -> None:
        self.close()
        self._children = Children()
        self._proc = self._children.start(
            [sys.executable, "-m", "pytest_gputopo.bench.copies", "--serve", str(IDLE_S)],
            output=subprocess.PIPE,
            stdin=subprocess.PIPE,
        )

    def _answer(self, deadline: float, timeout_s: float) -> CopyAnswer:
        """Read the child's output until its answer line; what else it printed is kept for a reason."""
        out: list[str]
        out, pending = [], b""
        fd = self._proc.stdout.fileno()  # type: ignore[union-attr]  # started, piped
        while True:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([fd], [], [], left)[0]:
                raise BenchTimeout(
                    f"the copy benchmark did not answer within {timeout_s:g} s; it was killed"
                    + (f". Last output:\n{tail(''.join(out))}" if out else "")
                )
            chunk = os.read(fd, 65536)
            if not chunk:  # it ended without answering
                code = self._proc.wait()  # type: ignore[union-attr]  # started
                raise RuntimeError(f"the copy benchmark exited with status {code}: {tail(''.join(out), 3)}")
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for raw in lines:
                line = raw.decode(errors="replace")
                if line.startswith(RESULT):
                    return ANSWERS.decode(line[len(RESULT) :], "its output")
                out.append(line + "\n")

    def close(self) -> None:
        """End the child (its stdin closed first: a child between requests exits at once) and reap it."""
        if self._proc is not None:
            self._proc.stdin.close()  # type: ignore[union-attr]  # started with both pipes
        if self._children is not None:
            self._children.close()
        if self._proc is not None:
            self._proc.stdout.close()  # type: ignore[union-attr]  # as above
        self._children = self._proc = None


def run_copy_benchmark(
    key: keys.Copy | keys.HostCopy, topology: model.Topology, *, budget_s: float, timeout_s: float
) -> CopyAnswer:
    """One copy measured in a child of its own."""
    worker = CopyWorker()
    try:
        return worker.measure(key, topology, budget_s=budget_s, timeout_s=timeout_s)
    finally:
        worker.close()
