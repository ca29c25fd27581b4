"""What a test on the emulated host calls to use GPU memory: the emulated NVML then lists this process
on each GPU it sees (its ``CUDA_VISIBLE_DEVICES``, as a lease names them) using that much."""

import os


def use(gib: float) -> None:
    """This process now holds ``gib`` GiB on each GPU it sees (0: none)."""
    folder = os.environ["GPUTOPO_EMU_GPU_MEMORY"]
    for uuid in filter(None, os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")):
        with open(os.path.join(folder, f"{os.getpid()}.{uuid}.tmp"), "w") as f:
            f.write(str(int(gib * 2**30)))
        os.replace(os.path.join(folder, f"{os.getpid()}.{uuid}.tmp"), os.path.join(folder, f"{os.getpid()}.{uuid}"))
