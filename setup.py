"""The native modules, which pyproject.toml cannot declare without a warning yet.

Three hot pieces of a dispatcher's round in C: subsets of stored records cut for
deliveries (broker/subscription/_record_cut.c), a stored record's slot column
and subset head read from its bytes (_record_scan.c) and the Key_Shared plan
(_keyed_plan.c). Optional: without a C compiler the install goes on and the
broker does that work in Python (broker/native.py). Everything else about the
package is in pyproject.toml.
"""

from setuptools import Extension, setup


def native(name: str) -> Extension:
    """broker/subscription/NAME.c as the optional module broker.subscription.NAME."""
    return Extension(f"broker.subscription.{name}", [f"broker/subscription/{name}.c"],
                     depends=["broker/subscription/_native.h",
                              "broker/subscription/_record_wire.h"], optional=True,
                     extra_compile_args=["-O2", "-Wall", "-Wextra"])


setup(ext_modules=[native("_record_cut"), native("_record_scan"), native("_keyed_plan")])
