# The native Key_Shared plan (_keyed_plan.c); see dispatch.plan_keyed.
import numpy as np
import numpy.typing as npt

VERSION: int

def plan(slots: npt.NDArray[np.int32], owner_of_slot: npt.NDArray[np.uint32],
         flags: npt.NDArray[np.uint8], permits: npt.NDArray[np.int64], blocking: int,
         /) -> tuple[bytearray, bytearray, bytearray]: ...
