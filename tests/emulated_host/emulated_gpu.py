"""What a test on the emulated host calls to use GPU memory: the emulated NVML then lists this process
on each GPU it sees (its ``CUDA_VISIBLE_DEVICES``, as a lease names them), or on ``device`` alone
(``cuda:<device>``, as a rank uses its own), using that much."""

import os


def use(gib: float, device: int | None = None) -> None:
    """This process now holds ``gib`` GiB on each GPU it sees, or on ``cuda:<device>`` (0: none)."""
    folder = os.environ["GPUTOPO_EMU_GPU_MEMORY"]
    seen = [u for u in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if u]
    for uuid in seen if device is None else seen[device : device + 1]:
        path = os.path.join(folder, f"{os.getpid()}.{uuid}")
        with open(f"{path}.tmp", "w") as f:
            f.write(str(int(gib * 2**30)))
        os.replace(f"{path}.tmp", path)
