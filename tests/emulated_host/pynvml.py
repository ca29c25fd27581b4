"""An emulated host's ``pynvml``: the project's fake NVML (``probe/fake_nvml.py``, built on the real
nvidia-ml-py module and its quirks) serving the recorded machine $GPUTOPO_EMU_MACHINE.

$GPUTOPO_EMU_NVML_MISSING: NVML functions this driver lacks (comma-separated); each raises
``NVMLError_FunctionNotFound``, as nvidia-ml-py's ``_nvmlGetFunctionPointer`` does when the driver's
libnvidia-ml has no such symbol. $GPUTOPO_EMU_CALLS: each ``nvmlInit`` appends "<pid> nvmlInit".
$GPUTOPO_EMU_NVML_HANG: a file to write the pid to, then never answer (a hung driver).
"""
import importlib.util
import os
import sys
import time

_spec = importlib.util.spec_from_file_location("pynvml", os.environ["GPUTOPO_EMU_REAL_PYNVML"])
_real = importlib.util.module_from_spec(_spec)
sys.modules["pynvml"] = _real
_spec.loader.exec_module(_real)
if os.environ.get("GPUTOPO_EMU_NVML_HANG"):
    with open(os.environ["GPUTOPO_EMU_NVML_HANG"], "w") as f:
        f.write(str(os.getpid()))
    time.sleep(600)

from pytest_gputopo.probe.fake_nvml import make_fake_pynvml  # noqa: E402
from pytest_gputopo.probe.recorded import load_profile  # noqa: E402

_fake = make_fake_pynvml(load_profile(os.environ["GPUTOPO_EMU_MACHINE"]).topology)
_init = _fake.nvmlInit


def _logged_init(*args, **kwargs):
    if os.environ.get("GPUTOPO_EMU_CALLS"):
        with open(os.environ["GPUTOPO_EMU_CALLS"], "a") as f:
            f.write(f"{os.getpid()} nvmlInit\n")
    return _init(*args, **kwargs)


_fake.nvmlInit = _logged_init


def _missing(name):
    def call(*args, **kwargs):
        raise _real.NVMLError(_real.NVML_ERROR_FUNCTION_NOT_FOUND)
    call.__name__ = name
    return call


for _name in filter(None, os.environ.get("GPUTOPO_EMU_NVML_MISSING", "").split(",")):
    setattr(_fake, _name, _missing(_name))
sys.modules["pynvml"] = _fake
