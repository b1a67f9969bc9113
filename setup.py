"""The packages of t2t_lite; the project's metadata, dependencies and commands are in pyproject.toml.

`problems/` and `hparams/` live at the repository top but install as `t2t_lite.problems` and
`t2t_lite.hparams`, so they never collide with other top-level packages of those names.
pyproject.toml cannot list found packages and mapped folders together, so this file does.
"""

from setuptools import find_packages, setup

setup(
    packages=find_packages(include=["t2t_lite", "t2t_lite.*"]) + ["t2t_lite.problems", "t2t_lite.hparams"],
    package_dir={"t2t_lite.problems": "problems", "t2t_lite.hparams": "hparams"},
)
