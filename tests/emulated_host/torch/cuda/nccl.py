from .. import _emu


def version():
    return _emu.NCCL
