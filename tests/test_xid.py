"""XID lines of the kernel log (``core.xid``): read from the forms the driver writes, each named by
number and meaning, and judged by NVIDIA's resolution bucket for it (its Xid catalog,
docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html, as NVIDIA NVSentinel's
xiderrorsmapping.csv carries it: 79 RESTART_BM, 48 WORKFLOW_XID_48, 94 RESTART_APP, 95 RESET_GPU, 63
IGNORE, 64 RESET_GPU, 13 and 31 RESTART_APP).

The lines are as published: a dmesg line of a row remap (stas00/ml-engineering, debug.md), an older
driver's line without ``PCI:`` (a pastebin of a GPU fallen off the bus), a journal line, and NVIDIA's
own forms for page retirement (docs.nvidia.com/deploy/dynamic-page-retirement/visibility.html).
"""

from __future__ import annotations

import pytest

from pytest_gputopo.core.xid import CATALOG, XidEvent, node_faults, xid_events

LOG = "\n".join(
    [
        "[  269.516977] NVRM: GPU at 0000:01:00.0 has fallen off the bus.",
        "[  269.517039] NVRM: Xid (0000:01:00): 3, C 00000005 SC 00000007 M 00001ffc Data ffffffff",
        "[ 1021.300000] NVRM: Xid (PCI:0000:10:1c): 63, pid=1896, Row Remapper: New row marked for remapping, "
        "reset gpu to activate.",
        "Oct 01 13:00:00 hostname kernel: NVRM: Xid (PCI:0000:3B:00): 79, pid='<unknown>', name=<unknown>, "
        "GPU has fallen off the bus.",
        "Oct 01 13:00:01 hostname kernel: NVRM: Xid (PCI:0000:3b:00): 31, pid=5678, name=python, Ch 00000008, "
        "intr 00000000. MMU Fault",
        "Oct 01 13:00:02 hostname kernel: NVRM: Xid (PCI:0000:86:00): 94, pid=77, Contained: SM (0x1). RST: No, "
        "D-RST: No",
        "Oct 01 13:00:03 hostname kernel: NVRM: Xid (PCI:0000:86:00): 95, pid=77, Uncontained: LTC TAG (0x2,0x0). "
        "RST: Yes, D-RST: No",
        "kernel: nvidia-nvswitch: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error",
    ]
)


def test_every_xid_line_is_read_in_order_with_its_gpu_and_number_and_nothing_else_is():
    events = xid_events(LOG)
    assert [(e.pci, e.xid) for e in events] == [
        ("0000:01:00", 3),
        ("0000:10:1c", 63),
        ("0000:3b:00", 79),  # the address as the driver wrote it, lower case
        ("0000:3b:00", 31),
        ("0000:86:00", 94),
        ("0000:86:00", 95),
    ]  # an NVSwitch's SXid is not a GPU's Xid
    assert events[2].text.endswith("GPU has fallen off the bus.")


@pytest.mark.parametrize(
    ("xid", "node", "words"),
    [
        (79, True, "Xid 79 (GPU has fallen off the bus; NVIDIA: RESTART_BM) on PCI 0000:3b:00"),
        (48, True, "Xid 48 (double-bit ECC error (uncorrectable memory error); NVIDIA: WORKFLOW_XID_48)"),
        (95, True, "Xid 95 (uncontained memory error; NVIDIA: RESET_GPU)"),
        (94, False, "Xid 94 (contained memory error (the affected application ended); NVIDIA: RESTART_APP)"),
        (63, False, "Xid 63 (ECC page retirement or row remapping recorded; NVIDIA: IGNORE)"),
        (64, True, "Xid 64 (ECC page retirement or row remapping failed; NVIDIA: RESET_GPU)"),
        (31, False, "Xid 31 (GPU memory page fault (an application's illegal access); NVIDIA: RESTART_APP)"),
        (147, True, "Xid 147 (NVLink 5 error; NVIDIA: WORKFLOW_NVLINK5_ERR)"),
        (3, True, "Xid 3 (not in the plugin's list of XIDs) on PCI 0000:3b:00"),  # unknown is never healthy
    ],
)
def test_each_xid_is_named_by_number_and_meaning_and_judged_by_nvidias_resolution(xid, node, words):
    event = XidEvent("0000:3b:00", xid, "")
    assert event.describe().startswith(words)
    assert (node_faults([event]) == [event]) is node


def test_the_catalog_judges_only_the_applications_buckets_as_not_the_nodes():
    assert {k.resolution for k in CATALOG.values() if not k.node_fault} == {"RESTART_APP", "IGNORE"}


def test_a_hostile_log_is_read_line_by_line_within_bounds():
    long = "NVRM: Xid (PCI:0000:3b:00): 79, " + "x" * 100_000
    assert [e.xid for e in xid_events(long + "\n\x00\x1b[31mNVRM: Xid (PCI:zz): 79\n")] == [79]
    assert len(xid_events(long)[0].text) < 4096
    assert xid_events("NVRM: Xid (PCI:0000:3b:00): 123456, x") == []  # no XID has five digits
