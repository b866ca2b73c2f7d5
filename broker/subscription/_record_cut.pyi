# The native record cutter (_record_cut.c); see record_cut.py.
import numpy as np
import numpy.typing as npt

VERSION: int

def cut(body: bytes, head: bytes, base: int, count: int,
        positions: npt.NDArray[np.int64], /) -> bytes | None: ...
def delivery(body: bytes, head: bytes, base: int, count: int,
             positions: npt.NDArray[np.int64], last: int, nacks_seen: int, send: int,
             bytes_max: int, /) -> bytes | bool | None: ...
