"""Which tool wrote a text: the one recogniser every reader of ``parse/`` asks before it reads, so that
each refuses another tool's text by that tool's name ("this is rocm-smi output (AMD GPUs), not
nvidia-smi -q: pytest-gputopo reads NVIDIA machines only").

A tool is told by lines only it prints: its banner (``ROCm System Management Interface``,
``==============NVSMI LOG==============``, ``nvbandwidth Version:``), its XML root
(``<nvidia_smi_log>``, NCCL's ``<system version=...>``), its table's header or summary (nccl-tests'
``#  size  count  type``, ``# Avg bus bandwidth``), its own rows (``GPU0  X  NV12`` of ``nvidia-smi topo
-m``, ``GPU0  X  OK`` of ``topo -p2p``, rocm-smi's ``0`` where a GPU meets itself), or its legend. A
clue is a whole line's shape, never a word that another tool's text could hold. These are clues, not
the formats' rules: each reader still reads by its own (``smi_topo``, ``smi_q``, ...).

A text may hold several tools' outputs (nccl-tests run with ``NCCL_DEBUG=INFO`` holds NCCL's log, a
paste may hold ``nvidia-smi`` above ``topo -m``): ``tools_in`` names each, in ``TOOLS``' order (a tool
whose output holds another's comes first). A reader refuses a text that holds another tool's output
and none of its own (``refusal``); a text that holds no known tool's is left to the reader's own
rules. Pure: text in, names out."""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["TOOLS", "Tool", "reader_name", "refusal", "tools_in"]


@dataclass(frozen=True)
class Tool:
    """A tool whose text pytest-gputopo knows: ``name`` as a reader calls itself ("not nvidia-smi -q"),
    ``said`` as a refusal says what a text is, ``readers`` the ``gputopo parse`` formats that read it
    (none: gputopo reads none of it, and ``advice`` says what to give instead), ``clues`` lines of its
    own (each a regular expression searched line by line), ``unless`` tools whose output holds these
    clues too (their presence says the clues are theirs)."""

    name: str
    said: str
    readers: tuple[str, ...]
    clues: tuple[re.Pattern[str], ...]
    advice: str = ""
    unless: tuple[str, ...] = ()

    def where_to(self) -> str:
        """What a refusal tells the user to do with the text."""
        return self.advice or f"read it with gputopo parse {self.readers[0]}"


def _clues(*patterns: str) -> tuple[re.Pattern[str], ...]:
    return tuple(re.compile(p, re.MULTILINE) for p in patterns)


_BUS = r"[0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7]"
_UUID = r"GPU-[0-9A-Fa-f-]{8,64}"
_CELL = rf"(?:{_UUID}|[0-9A-Fa-f]{{8}}:[0-9A-Fa-f]{{2}}:[0-9A-Fa-f]{{2}}\.[0-7])"
_LINKS = r"NV[0-9]{1,2}|PIX|PXB|PHB|NODE|SYS|SOC"  # nvidia-smi topo -m's cells (SOC: SYS before driver 396)
_P2P = r"OK|CNS|GNS|TNS|NS|DR|U"  # nvidia-smi topo -p2p's cells
# --query-gpu's header: field names (a unit in brackets after some), one of those it always names.
_FIELD = r"[a-z][a-z0-9_.]{0,60}(?:[ \t]*\[[^\]\n]{1,16}\])?"
_QUERY_FIELDS = r"index|name|uuid|pci\.bus_id|serial|driver_version|compute_cap|memory\.total|memory\.used"
_REDOPS = r"sum|prod|min|max|avg|premulsum|none"
_DTYPES = r"float|double|half|bfloat16|int8|uint8|int32|uint32|int64|uint64|f8e4m3|f8e5m2|fp8_e4m3|fp8_e5m2"

# Most specific first: a tool whose output holds another's clues comes before it.
TOOLS: tuple[Tool, ...] = (
    Tool(
        "rocm-smi",
        "rocm-smi output (AMD GPUs)",
        (),
        _clues(
            r"ROCm System Management Interface|End of ROCm SMI Log",
            r"^[ \t]*=+ ?[A-Za-z ]{1,60} between two GPUs ?=+[ \t]*$",  # --showtopo's section titles
            r"^GPU\[[0-9]{1,4}\][ \t]*: ",  # its per-GPU lines: "GPU[0]		: (Topology) Numa Node: 0"
            # its matrices print 0 where a GPU meets itself (nvidia-smi prints X): weight, hops, link type
            r"^[ \t]*GPU0[ \t]+0[ \t]+\S[^\n]*\n[ \t]*GPU1[ \t]+\S+[ \t]+0(?:[ \t]|$)",
        ),
        advice="pytest-gputopo reads NVIDIA machines only",
    ),
    Tool("nvidia-smi -q -x", "nvidia-smi -q -x output (XML)", ("smi-xml",), _clues(r"<(?:!DOCTYPE )?nvidia_smi_log\b")),
    Tool(
        "NCCL's topology dump (NCCL_TOPO_DUMP_FILE)",
        "NCCL's topology dump (NCCL_TOPO_DUMP_FILE)",
        ("nccl-topo",),
        _clues(r"<system[ \t\r\n]+version="),
    ),
    Tool(
        "nvidia-smi's summary table",
        "nvidia-smi's summary table (plain nvidia-smi)",
        (),
        _clues(r"^[ \t]*\|[ \t]*NVIDIA-SMI [0-9]"),
        advice="it lists no UUID and no link: give nvidia-smi -q (or -L, topo -m) instead",
    ),
    Tool(
        "nvidia-smi -q",
        "nvidia-smi -q output",
        ("smi-q",),
        _clues(
            r"^[ \t]*=+NVSMI LOG=+[ \t]*$",
            r"^[ \t]*Attached GPUs[ \t]*: ",
            rf"^[ \t]*GPU {_BUS}[ \t]*$",  # a GPU's section
        ),
    ),
    Tool(
        "nccl-tests",
        "nccl-tests output",
        ("nccl-tests",),
        _clues(
            r"#[ \t]*nThread [0-9]+ nGpus [0-9]+",
            r"#[ \t]+size[ \t]+count[ \t]+type[ \t]",
            r"#[ \t]*(?:Avg bus bandwidth|Out of bounds values)[ \t]*:",
            r"#[ \t]+Rank[ \t]+[0-9]+[ \t]+(?:Group[ \t]+[0-9]+[ \t]+)?Pid[ \t]",
            rf"^[ \t]*[0-9]{{1,13}}[ \t]+[0-9]{{1,13}}[ \t]+(?:{_DTYPES})[ \t]+(?:{_REDOPS})[ \t]",  # a result row
        ),
    ),
    Tool(
        "p2pBandwidthLatencyTest",
        "p2pBandwidthLatencyTest output (cuda-samples)",
        ("p2p-bandwidth",),
        _clues(
            r"p2pBandwidthLatencyTest|P2P \(Peer-to-Peer\) GPU Bandwidth Latency Test|P2P Connectivity Matrix",
            r"P2P=(?:Enabled|Disabled) ",
            r"^[ \t]*D\\D[ \t]",  # its matrices' head row
        ),
    ),
    Tool(
        "nvbandwidth",
        "nvbandwidth output",
        ("nvbandwidth",),
        _clues(
            r"^[ \t]*nvbandwidth Version:",
            r"^[ \t]*Running [a-z][a-z0-9]*(?:_[a-z0-9]+)+\.[ \t]*$",  # "Running device_to_device_memcpy_read_ce."
            r"^[ \t]*memcpy (?:CE|SM) (?:CPU|GPU)\((?:row|column)\)",
        ),
    ),
    Tool(
        "NCCL's log (NCCL_DEBUG=INFO)",
        "an NCCL_DEBUG=INFO log",
        ("nccl-log",),
        _clues(r"NCCL (?:INFO|WARN) ", r"NCCL version [0-9]"),
    ),
    Tool(
        "nvidia-smi nvlink -s",
        "nvidia-smi nvlink -s output",
        ("nvlink-status",),
        _clues(
            r"^[ \t]*Link [0-9]{1,3}: (?:[0-9][0-9.eE+-]{0,30} GB/s|(?i:<inactive>|&lt;inactive&gt;|inactive)[ \t]*$)",
            r"(?i:all[ \t]*links[ \t]*are[ \t]*inactive)",
        ),
    ),
    Tool(
        "nvidia-smi nvlink",
        "another nvidia-smi nvlink subcommand's output",
        (),
        _clues(r"^[ \t]*Link [0-9]{1,3}, "),  # nvlink -c: "Link 0, P2P is supported: true"
        advice="gputopo reads nvidia-smi nvlink -s (each link's state and speed)",
        unless=("nvidia-smi nvlink -s",),
    ),
    Tool(
        "nvidia-smi -L",
        "nvidia-smi -L output (a list of GPUs)",
        ("smi-list",),
        _clues(
            rf"^[ \t]*GPU [0-9]{{1,4}}: [^\n]{{0,300}}\(UUID: {_UUID}\)",
            r"^[ \t]*MIG [^\n]{0,60}Device +[0-9]+: \(UUID: MIG-",
        ),
        unless=("nvidia-smi nvlink -s", "nvidia-smi nvlink"),  # nvlink prints -L's lines above its links
    ),
    Tool(
        "nvidia-smi --query-gpu",
        "nvidia-smi --query-gpu CSV output",
        ("smi-query",),
        _clues(
            # its header: two fields or more, a unit in brackets after some, one of them a field it names
            rf"^(?=[^\n]*?(?<![a-z0-9_.])(?:{_QUERY_FIELDS})(?![a-z0-9_.]))"
            rf"[ \t]*{_FIELD}(?:,[ \t]*{_FIELD}){{1,200}}[ \t]*$",
            # a row printed noheader: a UUID or bus id as a cell of its own, between ", "
            rf"(?:, {_CELL}(?:, |[ \t]*$))|(?:^[ \t]*{_CELL}, )",
        ),
    ),
    Tool(
        "nvidia-smi topo -p2p",
        "an nvidia-smi topo -p2p matrix",
        ("smi-p2p",),
        _clues(
            rf"^[ \t]*GPU0[ \t]+X[ \t]+(?:{_P2P})(?:[ \t]|$)",
            r"^[ \t]*OK[ \t]+= Status Ok|^[ \t]*CNS[ \t]+= Chipset not supported",  # its legend
        ),
    ),
    Tool(
        "nvidia-smi topo -m",
        "an nvidia-smi topo -m matrix",
        ("smi-topo",),
        _clues(
            rf"^[ \t]*GPU0[ \t]+X[ \t]+(?:{_LINKS})(?:[ \t]|$)",
            r"^[ \t]*(?:NV#|SYS|SOC|NODE|PHB|PXB|PIX)[ \t]+= Connection traversing",  # its legend
        ),
    ),
    Tool(
        "nvidia-smi topo",
        "an nvidia-smi GPU matrix (topo -m or topo -p2p)",
        ("smi-topo", "smi-p2p"),
        _clues(r"^[ \t]*GPU0[ \t]+X(?:[ \t]|$)"),  # one GPU's: no cell says which
        advice="read it with gputopo parse smi-topo (or smi-p2p)",
        unless=("nvidia-smi topo -m", "nvidia-smi topo -p2p"),
    ),
    Tool(
        "nvidia-smi (a GPU it cannot reach)",
        "nvidia-smi's line for a GPU NVML cannot reach (no report)",
        ("smi-q",),
        _clues(r"Unable to (?:determine|detect) the device handle for "),
        advice="nothing to read (the GPU is lost, or NVML failing on it)",
    ),
)

# What each `gputopo parse` format calls itself in a refusal ("not nvidia-smi -q").
_READS = {tool.readers[0]: tool.name for tool in reversed(TOOLS) if len(tool.readers) == 1}


def reader_name(reader: str) -> str:
    """How the reader of ``gputopo parse`` format ``reader`` names what it reads ("nvidia-smi -q")."""
    return _READS[reader]


def tools_in(text: object) -> tuple[Tool, ...]:
    """Every known tool whose output ``text`` holds, in ``TOOLS``' order (anything not text: none)."""
    if not isinstance(text, str):
        return ()
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    seen = [tool for tool in TOOLS if any(clue.search(text) for clue in tool.clues)]
    names = {tool.name for tool in seen}
    return tuple(tool for tool in seen if not names.intersection(tool.unless))


def refusal(text: object, reader: str) -> str | None:
    """Why the reader of ``gputopo parse`` format ``reader`` refuses ``text``, in one line: the text
    holds another tool's output and none of its own ("this is <tool>, not <reader's>: <what to do>").
    None where it holds the reader's own, or no known tool's (the reader's own rules decide)."""
    found = tools_in(text)
    if not found or any(reader in tool.readers for tool in found):
        return None
    tool = found[0]
    return f"this is {tool.said}, not {reader_name(reader)}: {tool.where_to()}"
