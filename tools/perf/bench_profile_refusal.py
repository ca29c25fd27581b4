"""How long, and how much memory, refusing a hostile machine profile takes (issue 9.3).

    .venv/bin/python tools/perf/bench_profile_refusal.py

Prints, per case, the wall time of ``load_profile`` on a temporary file and the process's peak RSS
so far, and what the loader said. Figures are measured on this host, in-process.
"""

from __future__ import annotations

import copy
import json
import os
import resource
import tempfile
import time

from pytest_gputopo.probe.recorded import BUNDLED_DIR, ProfileError, load_profile


def cases() -> dict[str, str]:
    base = json.loads((BUNDLED_DIR / "hgx-h100.json").read_text())

    def with_change(change) -> str:
        data = copy.deepcopy(base)
        change(data["topology"])
        return json.dumps(data)

    return {
        "links[0].nvlinks = 1e12": with_change(lambda t: t["links"][0].update(nvlinks=10**12)),
        "gpus[0].nvlinks[0].link = 1e15": with_change(lambda t: t["gpus"][0]["nvlinks"][0].update(link=10**15)),
        "200,000 nested brackets": "[" * 200_000 + "]" * 200_000,
        "1,600 GPUs": with_change(lambda t: t.update(gpus=t["gpus"] * 200)),
        "3,000,000 NICs (20 MB)": with_change(lambda t: t.update(nics=["mlx5_0"] * 3_000_000)),
    }


def main() -> None:
    for name, text in cases().items():
        with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as handle:
            handle.write(text)
        start = time.perf_counter()
        try:
            load_profile(handle.name)
            said = "accepted"
        except ProfileError as exc:
            said = str(exc).split(": ", 1)[1][:80]
        elapsed_ms = 1000 * (time.perf_counter() - start)
        peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
        os.unlink(handle.name)
        print(f"{name:32s} {elapsed_ms:8.1f} ms  peak RSS {peak_mb} MB  (measured)  {said}")


if __name__ == "__main__":
    main()
