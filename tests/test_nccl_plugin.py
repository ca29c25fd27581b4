"""NCCL transports in pytest sessions: requires_nccl_transport, the no-fallback gate, and the
header naming a fallback and its cause. Without GPUs, NCCL does not run: the verdicts come from
NCCL's settings (as NCCL reads them) and NVML's P2P status on recorded machines."""

import pytest

from pytest_gputopo.plugin.run import GATE_EXIT_STATUS

SRC = """
import pytest

@pytest.mark.requires_nccl_transport("P2P", gpus=2)
def test_pair_p2p(): pass

@pytest.mark.requires_nccl_transport("P2P")
def test_all_p2p(): pass

@pytest.mark.requires_nccl_transport("NET/IB", gdrdma=True)
def test_ib_gdr(): pass
"""


@pytest.fixture(autouse=True)
def no_nccl_settings(monkeypatch, tmp_path):
    for name in ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL", "NCCL_SHM_DISABLE", "NCCL_IB_DISABLE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NCCL_CONF_FILE", str(tmp_path / "no-such-nccl.conf"))  # not ~/.nccl.conf


def run(pytester, machine, *args):
    pytester.makepyfile(test_nccl=SRC)
    return pytester.runpytest("--gputopo-machine", machine, "-rs", "-p", "no:cacheprovider", *args)


def test_nvswitch_box_takes_p2p_everywhere(pytester):
    result = run(pytester, "dgx-a100")
    result.assert_outcomes(passed=2, skipped=1)
    result.stdout.fnmatch_lines(["*requires_nccl_transport('NET/IB', gdrdma=True): needs NCCL's own account*"])
    assert "fallback" not in result.stdout.str()


def test_pcie_box_beyond_the_default_level_uses_shm(pytester):
    result = run(pytester, "8x-l40s")
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*requires_nccl_transport('P2P'): GPU0-GPU2 (NODE) would use SHM: NODE "
            "(NCCL path PHB) is beyond NCCL's default P2P level PXB*"
        ]
    )


def test_header_names_the_fallback_and_its_cause(pytester, monkeypatch):
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    result = run(pytester, "dgx-a100")
    result.stdout.fnmatch_lines(
        [
            "gputopo fallback: GPU0-GPU1 NV12 uses SHM instead of P2P "
            "(NCCL_P2P_DISABLE=1 from environment); 27 more pairs [predicted*"
        ]
    )
    result.assert_outcomes(skipped=3)


def test_nvml_refusal_is_named_as_the_cause(pytester):
    result = run(pytester, "8x-l40s-p2p-disabled")
    result.stdout.fnmatch_lines(
        ["gputopo fallback: GPU0-GPU1 PIX uses SHM instead of P2P (NVML P2P read/write topology not supported (TNS))*"]
    )


def test_a_stray_level_in_a_config_file_is_found(pytester, monkeypatch, tmp_path):
    """nccl-tests#228: NCCL_P2P_LEVEL=LOC left in a config file forced P2P off on an NVSwitch node."""
    conf = tmp_path / "nccl.conf"
    conf.write_text("# site defaults\nNCCL_P2P_LEVEL=LOC\n")
    monkeypatch.setenv("NCCL_CONF_FILE", str(conf))
    result = run(pytester, "dgx-a100", "--gputopo-require", "gpus>=8,no-fallback")
    assert result.ret == GATE_EXIT_STATUS
    (gate,) = [line for line in result.stdout.lines if line.startswith("  - no-fallback: ")]
    assert gate.count("uses SHM instead of P2P") == 28  # a gate lists every pair
    assert f"NCCL_P2P_LEVEL=LOC from {conf} line 2" in gate


def test_no_fallback_gate_passes_on_a_healthy_node(pytester):
    run(pytester, "dgx-a100", "--gputopo-require", "no-fallback").assert_outcomes(passed=2, skipped=1)


@pytest.mark.parametrize(
    "args,message",
    [
        ("'PCIe'", "kind must be one of P2P, SHM, NET, NET/IB, NET/Socket, NVLS, COLLNET or 'NET/<plugin>'"),
        ("'P2P', gdrdma='yes'", "gdrdma must be True, False or None"),
    ],
)
def test_bad_transport_marker(pytester, args, message):
    pytester.makepyfile(test_x=f"import pytest\n@pytest.mark.requires_nccl_transport({args})\ndef test_x(): pass\n")
    result = pytester.runpytest("--gputopo-machine", "dgx-a100")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*test_x: @pytest.mark.requires_nccl_transport: {message}*"])


def test_nccl_account_and_measured_p2p_in_the_view():
    """NCCL's own account, when one ran, is what the view reports; a measured P2P copy far below
    its link's figure is named as a fallback cause."""
    from pytest_gputopo.nccl.expect import expected_transports
    from pytest_gputopo.nccl.fallbacks import NcclView
    from pytest_gputopo.nccl.nccl_settings import NcclSettings
    from pytest_gputopo.probe import probe_recorded

    topo = probe_recorded("dgx-a100")
    account = {"pairs": {"0-1": ["SHM"]}, "transports": ["NET/IB", "SHM"], "gdrdma": True}
    view = NcclView(topo, NcclSettings(), expected_transports(topo), account, "NCCL's own log")
    assert view.account_line() == "gputopo NCCL used NET/IB, SHM (GPUDirect RDMA on) [NCCL's own log]"
    (fallback,) = view.fallbacks({(0, 1): (12.0, 300.0)})
    assert (fallback.a, fallback.b, fallback.actual) == (0, 1, "SHM")
    assert any("measured P2P 12.0 GB/s, 4% of the 300 GB/s expected" in c for c in fallback.causes)
