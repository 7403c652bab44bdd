"""A built wheel carries the corpus as package data under klineage/corpus/ (klineage.settings.CORPUS:
the expert kernels, the shipped library and its records, the pipelines, the apply workloads, the
held-out instances), so the shipped pipelines run from an installed package outside the checkout.
An editable install reads them from the checkout instead."""
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

CORPUS = ("expert_kernels", "skills_db", "pipelines", "apply_workloads", "heldout")


class BuildWithCorpus(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        target = Path(self.build_lib) / "klineage" / "corpus"
        for name in CORPUS:
            shutil.rmtree(target / name, ignore_errors=True)
            shutil.copytree(Path(__file__).parent / name, target / name,
                            ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithCorpus})
