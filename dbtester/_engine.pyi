# The native load engine (engine/, Rust; built by maturin as dbtester._engine).
from typing import Any, TypedDict, final

import numpy as np
import numpy.typing as npt

class Result(TypedDict):
    due_ns: npt.NDArray[np.int64]
    latency_ns: npt.NDArray[np.int64]
    service_ns: npt.NDArray[np.int64]
    code: npt.NDArray[np.uint8]
    step: npt.NDArray[np.uint16]
    codes: list[str]
    stopped: str

@final
class Load:
    def progress(self) -> tuple[int, int, int]: ...
    def stop(self) -> None: ...
    def wait(self, timeout_s: float) -> bool: ...
    def result(self) -> Result: ...

def start(plan: dict[str, Any]) -> Load: ...
