# The native record scanner (_record_scan.c); see record_scan.py.

VERSION: int

def scan(body: bytes, base: int, count: int, /) -> tuple[bytes, bytearray] | None: ...
