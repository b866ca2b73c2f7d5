"""The native modules, which pyproject.toml cannot declare without a warning yet.

Three hot pieces of a dispatcher's round in C: subsets of stored records cut for
deliveries (broker/subscription/_record_cut.c), a stored record's slot column
and subset head read from its bytes (_record_scan.c) and the Key_Shared plan
(_keyed_plan.c); and the compacted view's fold of a pass's records
(broker/view/_view_fold.c), which walks record bytes with the same header.
Optional: without a C compiler the install goes on and the broker does that
work in Python (broker/native.py). Everything else about the package is in
pyproject.toml.
"""

from setuptools import Extension, setup

SHARED = "broker/subscription"  # _native.h and _record_wire.h


def native(package: str, name: str) -> Extension:
    """broker/PACKAGE/NAME.c as the optional module broker.PACKAGE.NAME."""
    return Extension(f"broker.{package}.{name}", [f"broker/{package}/{name}.c"],
                     include_dirs=[SHARED],
                     depends=[f"{SHARED}/_native.h", f"{SHARED}/_record_wire.h"], optional=True,
                     extra_compile_args=["-O2", "-Wall", "-Wextra"])


setup(ext_modules=[native("subscription", "_record_cut"), native("subscription", "_record_scan"),
                   native("subscription", "_keyed_plan"), native("view", "_view_fold")])
