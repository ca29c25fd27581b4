"""How long probing a recorded machine takes (profile load + the model read straight: as_nvml_reads).

    .venv/bin/python tools/perf/bench_probe.py

Prints the median of repeated probes for each bundled machine and for a synthetic 72-GPU NVLink
domain (NVL72-like: 72 GPUs x 18 NVLinks to NVSwitches; simulated, not a real recording).
"""

import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

from pytest_gputopo.core import model
from pytest_gputopo.probe import probe_recorded
from pytest_gputopo.probe.recorded import bundled_names, profile_dict


def nvl72() -> model.Topology:
    n = 72
    gpus = tuple(
        model.Gpu(
            index=i,
            nvml_index=i,
            name="NVIDIA GB200",
            uuid=f"GPU-00000000-0000-4000-8000-{i:012d}",
            pci_bus_id=f"00000000:{i + 1:02X}:00.0",
            numa_node=i // 4 % 2,
            compute_capability="10.0",
            pcie_gen_current=5,
            pcie_gen_max=5,
            pcie_width_current=16,
            pcie_width_max=16,
            nvlinks=tuple(model.NvLink(k, True, f"00000000:{0xC0 + k:02X}:00.0", "SWITCH", "5.0") for k in range(18)),
        )
        for i in range(n)
    )
    ok = model.P2P(*(model.P2PStatus.OK,) * 4)
    links = tuple(model.Link(a, b, model.LinkClass.SYS, 18, ok) for a in range(n) for b in range(a + 1, n))
    return model.Topology(gpus=gpus, links=links)


def timed(name_or_path: str, runs: int) -> float:
    samples = []
    for _ in range(runs):
        t = time.perf_counter()
        probe_recorded(name_or_path)
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def main() -> None:
    probe_recorded("dgx-a100")  # import everything once
    for name in bundled_names():
        print(f"probe recorded:{name:24s} {timed(name, 20) * 1e3:7.2f} ms (median of 20)")
    with tempfile.TemporaryDirectory() as d:
        path = Path(d, "nvl72.json")
        path.write_text(json.dumps(profile_dict("nvl72-simulated", nvl72())))
        print(f"probe simulated 72-GPU NVLink domain  {timed(str(path), 5) * 1e3:7.2f} ms (median of 5)")


if __name__ == "__main__":
    sys.exit(main())
