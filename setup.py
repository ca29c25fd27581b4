"""The wheel carries the project's docs (``docs/*.md``) as ``pytest_gputopo/docs``, so that a pip user
can read what ``--help`` names: ``gputopo docs NAME`` prints one (``pytest_gputopo/cli/docs.py``).
Everything else is in pyproject.toml."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py


class BuildWithDocs(build_py):
    def run(self):
        super().run()
        target = Path(self.build_lib) / "pytest_gputopo" / "docs"
        target.mkdir(parents=True, exist_ok=True)
        for doc in sorted(Path(__file__).with_name("docs").glob("*.md")):
            shutil.copyfile(doc, target / doc.name)


setup(cmdclass={"build_py": BuildWithDocs})
