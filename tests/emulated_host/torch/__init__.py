"""An emulated host's ``torch``, as the personality $GPUTOPO_EMU_TORCH (a release: 2.0.1, 2.4.1, 2.13.0)
has it in the parts the plugin may touch: ``torch.version``, ``torch.cuda.nccl.version()``'s shape and
``torch.cuda.get_device_properties``'s fields. Importing it takes $GPUTOPO_EMU_TORCH_IMPORT_S seconds
(2 s on a real GPU host) and appends "<pid> import torch" to $GPUTOPO_EMU_CALLS."""

import os
import time

from . import _emu

_emu.record("import torch")
time.sleep(float(os.environ.get("GPUTOPO_EMU_TORCH_IMPORT_S", "0")))
__version__ = _emu.RELEASE
from . import cuda, version  # noqa: E402,F401
