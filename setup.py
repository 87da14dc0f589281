"""The one compiled part: the quasiseparable decay product (metadata in pyproject.toml).

``optional=True``: without a C compiler the package installs and runs the same product in numpy
(:mod:`structmat.algebra.quasiseparable_decay_compiled` falls back).
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension("structmat.algebra._quasiseparable_decay", ["structmat/algebra/_quasiseparable_decay.c"],
                             extra_compile_args=["-O2"], optional=True)])
