"""The one native module, which pyproject.toml cannot declare without a warning yet.

Subsets of stored records cut in C on the delivery path
(broker/subscription/_record_cut.c). Optional: without a C compiler the install
goes on and the broker cuts them in Python (broker/subscription/record_cut.py).
Everything else about the package is in pyproject.toml.
"""

from setuptools import Extension, setup

setup(ext_modules=[Extension(
    "broker.subscription._record_cut", ["broker/subscription/_record_cut.c"],
    optional=True, extra_compile_args=["-O2", "-Wall", "-Wextra"])])
