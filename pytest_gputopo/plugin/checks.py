"""``--gputopo-check``: health-check items collected beside the user's tests, each passing or failing
with measured, expected, floor and ratio in its message (judged by ``verdicts.judge_figure``, the rule
a ``min_*_bw`` marker uses)."""

from __future__ import annotations

import json
import re

import pytest

from ..core import fabric_health, faults, health, judgement, keys, spec, thresholds
from ..core.model import P2PStatus, Topology, unlisted_line
from ..core.nvlinks import nvlink_lost
from ..core.regressions import pcie_trained_down  # a link trained down, worded as --gputopo-expect words it
from ..core.requirements import mig_enabled
from ..core.units import counted
from ..render import report
from ..render.escape import terminal
from . import measurements, verdicts
from .check_report import FINDING_PROPERTY, NODEID, WHY_PROPERTY
from .properties import CHECK_PROPERTY
from .run import GputopoRun, run_of


class CheckItem(pytest.Item):
    """One health check; passes or fails with measured, expected, floor and ratio in its message."""

    def __init__(self, *, check, **kwargs):
        super().__init__(**kwargs)
        self._check = check

    def runtest(self) -> None:
        outcome, message, props = self._check()
        for key, value in props.items():
            self.user_properties.append((key, value))
        self.user_properties.append(
            (CHECK_PROPERTY, json.dumps({"check": self.name, "outcome": outcome, "message": message}))
        )

        if outcome == "failed":
            pytest.fail(terminal(message), pytrace=False)
        if outcome == "skipped":  # at the item, not at this line of the plugin (JUnit's skip text names it)
            raise pytest.skip.Exception(terminal(message), _use_item_location=True)

    def repr_failure(self, excinfo, style=None):
        return str(excinfo.value)

    def reportinfo(self):  # line 0: no source line, as pytest's own example of non-Python items has it
        return NODEID, 0, f"{NODEID} {self.name}: {self._doc}"

    @property
    def _doc(self) -> str:
        return getattr(self._check, "__doc__", "") or ""


class CheckCollector(pytest.Collector):
    def __init__(self, *, level: str, **kwargs):
        super().__init__(**kwargs)
        self.level = level

    def collect(self):
        run = run_of(self.config)
        for name, check in _checks(run, run.topology, self.level):
            yield CheckItem.from_parent(self, name=name, check=check)


def check_items(session: pytest.Session, level: str) -> list:
    collector = CheckCollector.from_parent(session, name=NODEID, nodeid=NODEID, level=level)
    # Collected through pytest's own hooks, so that the items are counted and reported like any others.
    rep = session.ihook.pytest_make_collect_report(collector=collector)
    session.ihook.pytest_collectreport(report=rep)
    return [item for item in rep.result if isinstance(item, pytest.Item)]


def _skipped(message: str, why: str, props: dict | None = None) -> tuple:
    """A check not judged: ``message`` names its subject; ``why`` says the reason without it, so that
    the items not judged for one reason are said in one line (``check_report``)."""
    return "skipped", message, {**(props or {}), WHY_PROPERTY: why}


def _failed(message: str, gpus: tuple, what: str, props: dict | None = None) -> tuple:
    """A check that failed: ``message`` names its subject; ``gpus`` are what it is about (a pair, one
    GPU: "GPU0", "GPU5"), ``what`` the problem without them, so that the items failed for one cause
    are said as that cause (``check_report.check_causes``: ``core.causes``' rule, the run gate's)."""
    finding = json.dumps({"gpus": [f"GPU{g}" for g in gpus], "what": what})
    return "failed", message, {**(props or {}), FINDING_PROPERTY: finding}


def _checks(run: GputopoRun, topology: Topology, level: str):
    def problem():
        """the machine was learned"""
        if not topology.gpus:
            return "failed", f"no GPU: {topology.problem or 'NVML lists none'} [{report.source_text(topology)}]", {}
        cudas = [topology.cuda_problem, unlisted_line(topology.cuda_unlisted) if topology.cuda_unlisted else None]
        warnings = [w for w in topology.warnings if not any(c and c in w for c in cudas)]
        if warnings:  # CUDA's failure, and a GPU it lacks, are the cuda item's: one cause, one line
            return "failed", "; ".join(warnings), {}
        return "passed", report.header_line(topology), {}

    yield "topology", problem

    if topology.is_this_host and topology.gpus:  # CUDA is started for this host only, in a child
        yield "cuda", _cuda_check(run, topology)
    if topology.is_this_host or topology.pci_unlisted is not None:
        yield "pci", _pci_check(topology)
    if topology.is_this_host or topology.xids is not None:
        yield "xid", _xid_check(topology)

    for gpu in topology.gpus:

        def pcie(gpu=gpu):
            """the PCIe link runs at its full width"""
            if gpu.pcie_width_current is None or gpu.pcie_width_max is None:
                return _skipped(f"GPU{gpu.index}: PCIe width unknown", "PCIe width unknown")
            # The width, against the maximum for this device and system: the generation is not
            # judged, as an idle GPU drops to Gen1 to save power (a slow link shows in the copies).
            now = f"Gen{gpu.pcie_gen_current or '?'} x{gpu.pcie_width_current} now"
            if gpu.pcie_width_current < gpu.pcie_width_max:
                down = pcie_trained_down(gpu, gpu.pcie_width_max, "its maximum width")
                return _failed(f"GPU{gpu.index} {down}", (gpu.index,), down)
            return (
                "passed",
                (
                    f"GPU{gpu.index} PCIe {now}, max Gen{gpu.pcie_gen_max or '?'} "
                    f"x{gpu.pcie_width_max} (current width against the maximum)"
                ),
                {},
            )

        yield f"pcie[GPU{gpu.index}]", pcie
        if gpu.nvlinks:
            yield f"nvlink[GPU{gpu.index}]", _nvlink_check(topology, gpu)
        if gpu.fabric is not None or (topology.is_this_host and gpu.nvlinks):
            yield f"fabric[GPU{gpu.index}]", _fabric_check(gpu)
        if gpu.health is not None or topology.is_this_host:
            yield f"health[GPU{gpu.index}]", _health_check(topology, gpu)

    for link in topology.pairs():

        def p2p_status(link=link):
            """NVML reports P2P read and write OK"""
            statuses = {link.p2p.read, link.p2p.write}
            label = link.label or "unknown link"
            mig = mig_enabled(topology, [link.a, link.b])
            if mig:  # MIG instances do no P2P (PCIe or NVLink): a refusal is no fault of the node
                return _skipped(
                    f"{link.name} ({label}): {mig}: no P2P under MIG, not judged",
                    "MIG enabled: no P2P under MIG, not judged",
                )
            if statuses == {P2PStatus.OK}:
                return "passed", f"{link.name} ({label}): P2P read and write OK", {}
            refused = sorted(s.description for s in statuses if s not in (P2PStatus.OK, P2PStatus.UNKNOWN))
            if not refused:
                why = "P2P status unknown (the source did not report it)"
                return _skipped(f"{link.name} ({label}): {why}", why)
            # GeForce cards report CNS as often as GNS: both are cards without P2P, not a broken node
            # (the fleet view's rule, core.faults: one rule for what a refusal is).
            if faults.p2p_refused(link) is None:
                why = f"P2P not supported by this GPU model or chipset ({', '.join(refused)}; not a fault)"
                return _skipped(f"{link.name} ({label}): {why}", why)
            what = f"P2P refused: {', '.join(refused)}"
            return _failed(f"{link.name} ({label}): {what}", (link.a, link.b), what)

        yield f"p2p_status[{link.name}]", p2p_status

    if level == "full":
        yield from _benchmark_checks(run, topology)


def _nvlink_check(topology: Topology, gpu):
    """The nvlink item of a GPU that lists NVLinks."""

    def nvlink():
        """every NVLink of a GPU that has NVLink is up"""
        mig = mig_enabled(topology, [gpu.index])
        if mig:  # no process uses its NVLinks (no P2P under MIG): NVML's link states judge nothing
            return _skipped(
                f"{mig}: its NVLinks are not used by a MIG instance, not judged",
                "MIG enabled: its NVLinks are not used by a MIG instance, not judged",
            )
        fault = nvlink_lost(topology, gpu)
        if fault:
            return _failed(f"GPU{gpu.index}: {fault}", (gpu.index,), fault)
        if not gpu.active_nvlinks:
            none = not any(g.active_nvlinks for g in topology.gpus)
            why = (
                "on any GPU: a machine without NVLink"
                if none
                else "and no pair or GPU of its model says it had one: a GPU without NVLink"
            )
            listed = "" if none else f"({len(gpu.nvlinks)} listed, all down) "
            why = f"{why} (e.g. PCIe cards without a bridge), not a fault"
            return _skipped(f"GPU{gpu.index}: no NVLink up {listed}{why}", f"no NVLink up {why}")
        note = spec.nvlink_version_note(gpu)  # an NVML answer the architecture cannot have: warned here
        return (
            "passed",
            (
                f"GPU{gpu.index}: {len(gpu.nvlinks)}/{len(gpu.nvlinks)} NVLinks up"
                + (f"; warning: {note}" if note else "")
            ),
            {},
        )

    return nvlink


FROM_RECORD = "CUDA's view from this boot's record"  # the probe's note (probe.this_host) where it was not asked


def _cuda_check(run: GputopoRun, topology: Topology):
    """The cuda item: CUDA starts and enumerates every GPU NVML lists that the environment leaves
    visible. A check asks CUDA anew (``hooks.pytest_gputopo_probe``); a view that came from this boot's
    record all the same is said so and not judged (issue 39 item 3)."""

    def cuda():
        """CUDA starts (cuInit) and lists every visible GPU NVML lists"""
        if topology.cuda_problem is not None:  # NVML's answers alone pass where no CUDA program can run
            what = f"CUDA cannot start: {topology.cuda_problem}"
            return _failed(what, (), what)
        if topology.cuda_devices is None:
            return _skipped("CUDA not asked", "CUDA not asked")
        if FROM_RECORD in run.machine.notes:
            why = "from this boot's record, not re-checked"
            return _skipped(f"CUDA's view {why} (--gputopo-reprobe asks CUDA)", why)
        lists = f"CUDA starts and lists {counted(topology.cuda_devices, 'device')}"
        if topology.cuda_unlisted:
            what = unlisted_line(topology.cuda_unlisted)
            return _failed(f"{lists}; {what}: no CUDA process can use it", (), what)
        if topology.cuda_unlisted is None:  # not compared: unknown, said as such, and not judged
            why = f"{NOT_COMPARED}, not judged"
            return _skipped(f"{lists}; {why}", why)
        return "passed", f"{lists}, every visible GPU NVML lists", {}

    return cuda


NOT_COMPARED = (
    "whether CUDA lists every GPU NVML lists is unknown (MIG instances visible, a device NVML cannot place, "
    "or CUDA_VISIBLE_DEVICES' indices that NVML's order does not map)"
)


def _fabric_check(gpu):
    """The fabric item: the GPU's NVLink fabric registration, and its health where NVML gives it."""

    def fabric():
        """the GPU's NVLink fabric is up and healthy (NVML's GPU fabric state and health mask)"""
        state = gpu.fabric
        if state is None or state.state == "Not Supported":
            why = (
                "NVLink fabric state not reported (NVML: the GPU has no GPU fabric, not supported)"
                if state is not None
                else "NVLink fabric state not reported (NVML gives none: a driver "
                "without nvmlDeviceGetGpuFabricInfo, or a GPU without GPU fabric)"
            )
            return _skipped(f"GPU{gpu.index}: {why}", why)
        problem = faults.fabric_down(gpu)
        if problem:
            return _failed(f"GPU{gpu.index}: {problem}", (gpu.index,), problem)
        if state.up is None:
            why = "NVLink fabric registration Completed, its status unknown"
            return _skipped(f"GPU{gpu.index}: {why}", why)
        member = (f"; clique {state.clique_id}" if state.clique_id is not None else "") + (
            f" of cluster {state.cluster_uuid}" if state.cluster_uuid else ""
        )
        up = f"GPU{gpu.index}: NVLink fabric up ({state.state}, {state.status}{member})"
        if state.health_mask is None:
            return "passed", f"{up}; {NO_HEALTH}", {}
        health = fabric_health.read(state.health_mask)
        if health.unknown:  # a value nvml.h does not define: unknown, never healthy
            why = f"NVLink fabric health unknown ({', '.join(health.unknown)}: not a value nvml.h defines)"
            return _skipped(f"{up}; {why}", why)
        rest = fabric_health.undocumented_bits(state.health_mask)
        tail = f"; health mask bits 16-31 {rest:#x} not read (nvml.h defines none)" if rest else ""
        return "passed", f"{up}; health: {health.text()}{tail}", {}

    return fabric


def _node_failed(topology: Topology, code: str) -> tuple | None:
    """The node item's failure: its findings of ``code``, each with its code and action; None if none."""
    found = [f.text() for f in health.node_findings(topology) if f.code == code]
    if not found:
        return None
    what = "; ".join(found)
    return _failed(what, (), what)


def _pci_check(topology: Topology):
    def pci():
        """every NVIDIA GPU this process may use on the PCI bus is one NVML lists"""
        if topology.pci_unlisted is None:
            why = "the PCI bus not read, or it shows none of NVML's GPUs (a virtual machine's or container's view)"
            return _skipped(f"GPUs on the PCI bus unknown: {why}", why)
        failed = _node_failed(topology, "gpu_off_bus")
        return failed or ("passed", "every NVIDIA GPU on the PCI bus bound to the nvidia driver is one NVML lists", {})

    return pci


def _xid_check(topology: Topology):
    def xid():
        """no XID in this boot's kernel log is the node's to act on (NVIDIA's Xid catalog)"""
        if topology.xids is None:
            why = "the kernel log cannot be read (it needs CAP_SYSLOG where kernel.dmesg_restrict is 1)"
            return _skipped(f"XIDs unknown: {why}", why)
        failed = _node_failed(topology, "xid")
        if failed:
            return failed
        if not topology.xids:
            return "passed", "no XID in this boot's kernel log", {}
        return "passed", f"{counted(len(topology.xids), 'XID')} in this boot's kernel log, each the application's", {}

    return xid


def _health_check(topology: Topology, gpu):
    """The health item: the GPU's memory, clocks, persistence and firmware by ``core.health``'s rules."""

    def gpu_health():
        """the GPU is healthy at rest: ECC, row remapping, page retirement, clocks, persistence, firmware"""
        facts = gpu.health
        if facts is None:
            why = f"health not reported (NVML gives none of {', '.join(health.NOT_REPORTED.values())})"
            return _skipped(f"GPU{gpu.index}: {why}", why)
        found = health.findings(topology, gpu)
        faulty = [f for f in found if f.severity == health.FAULT]
        warned = "".join(f"; warning: {f.text()}" for f in found if f.severity == health.WARNING)
        unknown = health.not_reported(facts)
        tail = warned + (f"; not reported: {', '.join(unknown)}" if unknown else "")
        if faulty:
            what = "; ".join(f.text() for f in faulty)
            return _failed(f"GPU{gpu.index}: {what}{tail}", (gpu.index,), what)
        said = ", ".join(health.judged_facts(facts)) or "nothing judged"
        return "passed", f"GPU{gpu.index}: {said}{tail}", {}

    return gpu_health


NO_HEALTH = "health not reported (no health mask: a driver before nvmlGpuFabricInfo_v2, or none of its fields)"


def _benchmark_checks(run: GputopoRun, topology: Topology):
    """The full level's items: every copy and the all-reduce, each measured when its item runs."""
    for link in topology.pairs():
        # Each way on its own: a link can be slow one way only (one copy engine, one lane set trained down).
        for src, dst in ((link.a, link.b), (link.b, link.a)):
            yield f"p2p_bw[GPU{src}->GPU{dst}]", _bandwidth_check(run, keys.Copy("p2p", src, dst))
        yield f"p2p_bidir_bw[GPU{link.a}<->GPU{link.b}]", _bandwidth_check(run, keys.Copy("p2p_bidir", link.a, link.b))
    for gpu in topology.gpus:
        for kind, pinned, name in (("h2d", True, "h2d_bw"), ("h2d", False, "h2d_pageable_bw"), ("d2h", True, "d2h_bw")):
            yield f"{name}[GPU{gpu.index}]", _bandwidth_check(run, keys.HostCopy(kind, gpu.index, pinned))
    s = measurements.suite(run)
    # One GPU's all-reduce crosses no link (its busbw is 0 by nccl-tests' formula): nothing to judge, so
    # nothing is measured (seen on a real H200: 10 s for a "not judged").
    if len(topology.gpus) >= 2 or s.settings.allreduce_backend == "gloo":
        yield "allreduce_bw", _bandwidth_check(run, s.allreduce_key(None, None))


_GPUS_FIRST = re.compile(r"^GPU\d+(?:(?:<->|->)GPU\d+)? ")


def _bandwidth_check(run: GputopoRun, key: keys.Key):
    # What a failure is about: a copy's pair, a host copy's GPU; an all-reduce (every GPU) stands alone.
    gpus = (key.src, key.dst) if isinstance(key, keys.Copy) else (key.gpu,) if isinstance(key, keys.HostCopy) else ()

    def check():
        """measured bandwidth reaches the floor of the expected"""
        result, judged = verdicts.judge_figure(run, key)
        measured = _GPUS_FIRST.sub("", result.what)  # "copy, P2P", "host -> device copy, pinned": no subject
        props = {"gputopo_measurement": json.dumps(result.to_json())}
        state = judged.state
        if state == judgement.ABSENT:  # on a recorded machine, or a pair without P2P: no fault of the node's
            not_p2p = result.detail.get("peer_access") is False  # the p2p_status item judges that
            message = f"{result.what}: no figure: {result.error}"
            if result.origin == "recorded" or not_p2p:
                return _skipped(message, f"no figure: {result.error}", props)
            return _failed(message, gpus, f"{measured}: no figure: {result.error}", props)
        origin = kind = "measured" if result.origin != "recorded" else f"recorded, not measured: {result.source}"
        if result.interval_gbps:
            origin += f"; {thresholds.interval_text(result.interval_gbps)} GB/s"
        if state == judgement.BROKEN:
            return _failed(
                f"{result.what}: {result.gbps:.2f} GB/s ({origin}); data wrong: {result.error}",
                gpus,
                f"{measured}: data wrong: {result.error}",
                props,
            )
        text = f"{result.what}: {judged.describe()} ({origin})"
        if state == judgement.UNKNOWN:  # nothing says what it should reach: unknown, never "assumed OK"
            # the figures' origin stays in the reason shared by the items skipped alike
            basis = judged.threshold.basis
            return _skipped(f"{text}; not judged: {basis}", f"not judged: {basis} (figures {kind})", props)
        if state == judgement.STAGED:
            return _failed(
                f"{text}; P2P is slower than staging through the host ({judged.staged_gbps:.2f} GB/s)",
                gpus,
                f"{measured}: P2P is slower than staging through the host",
                props,
            )
        if state == judgement.MET:
            return "passed", text, props
        return _failed(text, gpus, f"{measured}: below the floor of the expected", props)

    return check
