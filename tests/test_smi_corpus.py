"""Real nvidia-smi listings others published (../shared/corpus: smi-query/, smi-list/, smi-xml/), each
read by its parser and held to every fact its sidecar's ``expected`` reads off the text by hand.

A sample the publication altered so that it no longer says what nvidia-smi printed (lines commented out,
a bracket lost, one UUID pasted onto two GPUs) is refused with a message naming why, never read as
another machine."""

from __future__ import annotations

import json
import re

import pytest

from conftest import CORPUS, NO_CORPUS
from pytest_gputopo.parse.smi_list import SmiListParseError, parse_smi_list
from pytest_gputopo.parse.smi_query import SmiQueryParseError, parse_smi_query
from pytest_gputopo.parse.smi_xml import SmiXmlParseError, parse_smi_xml

# Mangled samples that must be refused, and the words the refusal says.
REFUSED = {
    ("smi-query", "006"): (SmiQueryParseError, r"no nvidia-smi --query-gpu header"),  # every line prefixed '# '
    ("smi-list", "006"): (SmiListParseError, r"no 'GPU <i>: <name> \(UUID: GPU-\.\.\.\)' line"),  # ')' lost
    ("smi-xml", "006"): (SmiXmlParseError, r"two <gpu> elements with one uuid"),  # UUIDs anonymized alike
}
PARSERS = {"smi-query": parse_smi_query, "smi-list": parse_smi_list, "smi-xml": parse_smi_xml}


def _samples(kind: str) -> list:
    folder = CORPUS / kind
    names = sorted(p.stem for p in folder.glob("[0-9][0-9][0-9].txt")) if folder.is_dir() else []
    return [pytest.param(kind, n, id=f"{kind}/{n}") for n in names] or [
        pytest.param(kind, None, marks=pytest.mark.skip(reason=NO_CORPUS), id=f"{kind}/none")
    ]


def _load(kind: str, name: str) -> tuple[str, dict]:
    text = (CORPUS / kind / f"{name}.txt").read_text(encoding="utf-8")
    return text, json.loads((CORPUS / kind / f"{name}.meta.json").read_text(encoding="utf-8"))


def _check_gpu(got, want: dict, where: str) -> None:
    """Each fact the sidecar gives, as the parser's SmiGpu names it."""
    pairs = {
        "index": got.index,
        "name": got.name,
        "uuid": got.uuid,
        "pci_bus_id": got.pci_bus_id,
        "compute_cap": got.compute_capability,
        "pcie_gen_current": got.pcie_gen_current,
        "pcie_gen_max": got.pcie_gen_max,
        "pcie_width_current": got.pcie_width_current,
        "pcie_width_max": got.pcie_width_max,
        "mig": got.mig,
        "compute_mode": got.compute_mode,
    }
    for key, value in want.items():
        if key == "memory_total_mib":
            assert got.memory_total_bytes == value * 2**20, where
        elif key == "n_mig_devices":  # -L: a MIG device listed says MIG is on; none listed says nothing
            assert got.mig is (True if value else None), where
        elif key in pairs:
            assert pairs[key] == value, f"{where}: {key}"


@pytest.mark.skipif(not CORPUS.is_dir(), reason=NO_CORPUS)
@pytest.mark.parametrize("kind,name", _samples("smi-query") + _samples("smi-list") + _samples("smi-xml"))
def test_published_listing_reads_as_its_facts(kind, name):
    """Every published --query-gpu CSV, -L and -q -x sample gives the GPUs, names, UUIDs, bus ids, memory,
    compute capability, PCIe links, MIG mode and driver versions read off it by hand; a GPU whose NVML
    index the text does not say keeps it unknown."""
    text, meta = _load(kind, name)
    expected = meta["expected"]
    if (kind, name) in REFUSED:
        assert meta["mangled"], "only a sample the publication altered may be refused"
        error, words = REFUSED[kind, name]
        with pytest.raises(error, match=words):
            PARSERS[kind](text)
        return
    got = PARSERS[kind](text)
    where = f"{kind}/{name}"
    assert len(got.gpus) == expected["n_gpus"], where
    assert got.attached == expected.get("attached_gpus", expected["n_gpus"]), where
    assert got.warnings == (), where
    if "driver_version" in expected:
        assert got.driver_version == expected["driver_version"], where
    if "cuda_version" in expected:
        assert got.cuda_driver_version == expected["cuda_version"], where
    for gpu, want in zip(got.gpus, expected["gpus"], strict=True):
        _check_gpu(gpu, want, f"{where} GPU {want.get('index')}")


def test_early_driver_mig_lines_without_profile_are_read():
    """``nvidia-smi -L`` of the first MIG drivers lists MIG devices with no profile name
    (``  MIG Device 0: (UUID: MIG-GPU-<uuid>/<gi>/<ci>)``): they say the GPU's MIG mode is on, no warning."""
    uuid = "GPU-00000000-1111-2222-3333-444444444444"
    text = f"GPU 0: Graphics Device (UUID: {uuid})\n  MIG Device 0: (UUID: MIG-{uuid}/1/0)\n"
    got = parse_smi_list(text)
    assert got.gpus[0].mig is True and got.warnings == ()


def test_sidecars_say_what_the_tests_read():
    """Every smi sidecar names its source and marks truncated/mangled, so a failing sample can be traced."""
    metas = [p for kind in PARSERS for p in (CORPUS / kind).glob("*.meta.json")] if CORPUS.is_dir() else []
    if not metas:
        pytest.skip(NO_CORPUS)
    for path in metas:
        meta = json.loads(path.read_text(encoding="utf-8"))
        assert meta["source"] and {"truncated", "mangled"} <= meta.keys(), path
        assert re.fullmatch(r"nvidia-smi .+", meta["expected"]["tool"]), path
