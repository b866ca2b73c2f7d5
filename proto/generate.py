"""Generate the Python protobuf/gRPC code from proto/keybus.proto.

Why a script: grpc_tools writes `import keybus_pb2` into the gRPC module, an
absolute import that only works with the output folder on sys.path. The
generated code lives in the package `sdk.core.pb` (the lowest layer, which
broker and SDK both import), so the import is rewritten to a relative one.

Usage:
    python proto/generate.py            # write sdk/core/pb/
    python proto/generate.py --check    # exit 1 if the committed code is stale
"""

from __future__ import annotations

import argparse
import filecmp
import os
import pathlib
import sys
import tempfile

from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTO_DIR = ROOT / "proto"
OUT_DIR = ROOT / "sdk" / "core" / "pb"
GENERATED = ["keybus_pb2.py", "keybus_pb2.pyi", "keybus_pb2_grpc.py", "keybus_pb2_grpc.pyi"]


def generate(out_dir: pathlib.Path) -> None:
    """Run protoc into out_dir and make the gRPC module's import relative."""
    out_dir.mkdir(parents=True, exist_ok=True)
    # protoc finds the mypy plugins on PATH; they sit beside this interpreter.
    bin_dir = str(pathlib.Path(sys.executable).parent)
    os.environ["PATH"] = bin_dir + os.pathsep + os.environ.get("PATH", "")
    args = [
        "protoc",
        f"-I{PROTO_DIR}",
        f"--python_out={out_dir}",
        f"--grpc_python_out={out_dir}",
        f"--mypy_out=quiet:{out_dir}",  # quiet: no "Writing mypy to ..." per file
        f"--mypy_grpc_out=quiet:{out_dir}",
        str(PROTO_DIR / "keybus.proto"),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")
    for name in ("keybus_pb2_grpc.py", "keybus_pb2_grpc.pyi"):
        path = out_dir / name
        text = path.read_text()
        text = text.replace("import keybus_pb2 as", "from . import keybus_pb2 as")
        path.write_text(text)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare instead of writing")
    options = parser.parse_args()
    if not options.check:
        generate(OUT_DIR)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(pathlib.Path(tmp))
        stale = [n for n in GENERATED if not filecmp.cmp(OUT_DIR / n, pathlib.Path(tmp) / n, False)]
    if stale:
        print(f"generated code is stale: {', '.join(stale)}; run python proto/generate.py")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
