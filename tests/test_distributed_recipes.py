"""docs/distributed.md's launch recipes (torchrun, srun) give the ranks a fresh secret from the job
(issue 32.5): every block that starts ranks sets PYTEST_GPUTOPO_STORE_SECRET or ..._FILE, and the
block's own lines, run in bash with each launch replaced by the plugin's reader of the secret
(``environ.store_secret``), give a secret the ranks would take. The launches themselves need GPU
nodes and Slurm: they are not run here."""

import re
import subprocess
import sys
from pathlib import Path

import pytest

from doc_examples import blocks

READ = (
    f"{sys.executable} -c 'from pytest_gputopo.runtime.environ import store_secret; "
    'print("taken from", store_secret()[1].split("=")[0])\''
)
LAUNCH = re.compile(r"\b(srun|torchrun)\b.*?(?<!\\)$", re.S | re.M)  # a launch, with its continued lines


def launching_blocks():
    return [
        b
        for b in blocks()
        if b.path == "docs/distributed.md"
        and re.search(r"\b(srun|torchrun)\b.*\bpytest\b", b.text.replace("\\\n", " "))
    ]


def test_every_recipe_that_starts_ranks_gives_them_a_secret():
    found = launching_blocks()
    assert len(found) >= 4, [str(b) for b in found]  # torchrun one node, two nodes; srun with and without torchrun
    for block in found:
        assert re.search(r"PYTEST_GPUTOPO_STORE_SECRET(_FILE)?=", block.text), f"{block}: the ranks get no secret"


@pytest.mark.parametrize("block", launching_blocks(), ids=str)
def test_the_recipes_secret_is_one_the_ranks_take(block, tmp_path):
    script = LAUNCH.sub(READ, block.text)
    done = subprocess.run(
        ["bash", "-c", script],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        env={
            "PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin",
            "HOME": str(tmp_path),
            "SLURM_JOB_ID": "42",
            "SLURM_JOB_NODELIST": "node-001",
        },
    )
    taken = re.findall(r"^taken from (\S+)$", done.stdout, re.M)
    assert taken and set(taken) <= {"PYTEST_GPUTOPO_STORE_SECRET", "PYTEST_GPUTOPO_STORE_SECRET_FILE"}, (
        done.stdout + done.stderr
    )
    assert not list(tmp_path.glob(".gputopo-secret-42"))  # a secret file the job made is removed with the job
