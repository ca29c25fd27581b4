import os

RELEASE = os.environ.get("GPUTOPO_EMU_TORCH", "2.13.0")
SERIES = tuple(int(p) for p in RELEASE.split(".")[:2])
# What each release's torch.cuda.nccl.version() returns (torch/cuda/nccl.py at that tag): a tuple of
# ints; releases since 2.1 append NCCL's suffix string when it has one.
NCCL = {(2, 0): (2, 14, 3), (2, 4): (2, 20, 5)}.get(SERIES, (2, 27, 7, "+cuda12.9"))
CUDA = {(2, 0): "11.8", (2, 4): "12.4"}.get(SERIES, "12.9")


def record(what):
    if os.environ.get("GPUTOPO_EMU_CALLS"):
        with open(os.environ["GPUTOPO_EMU_CALLS"], "a") as f:
            f.write(f"{os.getpid()} {what}\n")
