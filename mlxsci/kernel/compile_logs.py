"""The compilers' error logs a GPU backend gets from MLX, read as diagnostics.

One parser per dialect (mlxsci.kernel.dialects names each dialect's): Metal's
compiler log (`program_source:LINE:COL: error: MESSAGE`) and NVRTC's (CUDA).
Both give `Diagnostic`s; `first_error` picks the one a CompileError reports.
Nothing here imports MLX, so the parsers run (and are tested) anywhere.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = [
    "Diagnostic",
    "COMPILE_FAILED",
    "parse_nvrtc_log",
    "parse_metal_log",
    "first_error",
]


@dataclass(frozen=True)
class Diagnostic:
    """One diagnostic of a compiler log."""

    file: str
    line: int
    severity: str  # "error", "catastrophic error", "warning" or "remark"
    message: str

    @property
    def is_error(self) -> bool:
        return self.severity.endswith("error")

    @property
    def in_program(self) -> bool:
        """In the text MLX compiled, not in a header it includes: Metal names
        that text `program_source`; NVRTC names it `<kernel>_<hash>.cu`, with
        no directory."""
        if self.file == METAL_PROGRAM:
            return True
        return self.file.endswith(".cu") and "/" not in self.file and "\\" not in self.file


# ------------------------------------------------------------- NVRTC's log
# MLX 0.32.4 raises RuntimeError("Failed to compile kernel: <log>.") with the
# log of nvrtcGetProgramLog (mlx/backend/cuda/jit_module.cpp, compile()). The
# program is named "<kernel name>_<hex hash of its text>.cu" (the "{}_{:x}"
# format in libmlx.so of mlx-cuda-12 0.32.4). Each diagnostic of the log opens
# with `FILE(LINE): SEVERITY: MESSAGE`, warnings with their number
# (`warning #177-D: ...`), then echoes the source line and a caret line; the
# log ends with `N error(s) detected in the compilation of "FILE".` (the
# format of NVRTC logs quoted in NVIDIA/Fuser#1499, NVIDIA/warp#1129,
# cupy/cupy#5294). FILE is the program for its own lines, else a header it
# includes (MLX's embedded headers, the CUDA toolkit's).
COMPILE_FAILED = "Failed to compile kernel: "
_NVRTC_DIAGNOSTIC = re.compile(
    r"(?P<file>\S(?:.*?\S)?)\((?P<line>\d+)\): "
    r"(?P<severity>catastrophic error|error|warning|remark)"
    r"(?: #(?P<number>\d+)(?:-[A-Z])?)?: (?P<message>.*)"
)


def parse_nvrtc_log(text: str) -> list[Diagnostic]:
    """The diagnostics of an NVRTC log (or of MLX's exception text holding one)."""
    found = []
    for raw in text.splitlines():
        # MLX puts its prefix on the log's first line.
        line = raw.split(COMPILE_FAILED, 1)[-1]
        m = _NVRTC_DIAGNOSTIC.fullmatch(line.rstrip())
        if m:
            found.append(Diagnostic(m["file"], int(m["line"]), m["severity"], m["message"].strip()))
    return found


# ------------------------------------------------------------- Metal's log
# MLX raises "Unable to build metal library from source" followed by the
# Metal compiler's log, whose errors in the generated text read
# `program_source:LINE:COL: error: MESSAGE`. Only those are read: MLX's
# line numbers there count its preamble too (MetalBackend.preamble_lines).
METAL_PROGRAM = "program_source"
_METAL_ERROR = re.compile(r"program_source:(\d+):\d+: error: (.*)")


def parse_metal_log(text: str) -> list[Diagnostic]:
    """The errors in the generated text of a Metal compiler log."""
    return [
        Diagnostic(METAL_PROGRAM, int(m.group(1)), "error", m.group(2).strip())
        for m in _METAL_ERROR.finditer(text)
    ]


def first_error(diagnostics: list[Diagnostic]) -> Diagnostic | None:
    """The error to report: the first in the program's own text (where the
    candidate's lines are), else the first in any header."""
    errors = [d for d in diagnostics if d.is_error]
    in_program = [d for d in errors if d.in_program]
    return (in_program or errors)[0] if errors else None
