"""Running the worker under NVIDIA's compute-sanitizer (`--sanitize`), and
reading what it reports.

On a CUDA GPU a write past the end of an output usually lands in memory the
allocator owns, so the kernel "passes"; memcheck names such an access, and
racecheck names shared-memory hazards (a missing __syncthreads()). The worker
runs as

    compute-sanitizer --tool TOOL --error-exitcode 86 --log-file F ... python -m mlxsci.worker DIR

and the log F, written in the sanitizer's text format, becomes the size's
verdict when it reports an error. Timing under the sanitizer is meaningless
(every access is instrumented), so a sanitized evaluation is not scored.

Facts used here (compute-sanitizer 2025.2.1, `compute-sanitizer --help` of the
nvidia-cuda-sanitizer-api-cu12 12.9.79 wheel, and NVIDIA's Compute Sanitizer
user manual, "Memcheck Tool" and "Racecheck Tool"):
- options: --tool {memcheck,racecheck,...}; --error-exitcode N (returned when
  any error was detected); --log-file F (all text output); --print-limit N
  (stop printing after N errors, default 100); --show-backtrace no; --launch-
  timeout 0 (wait for the target without limit: the worker imports MLX first);
  --racecheck-report hazard (report each hazard with its block and threads,
  rather than the default per-source-line analysis).
- each line of the report starts with the prefix `=========`; a record's first
  line follows it after one space, its detail lines after more spaces, and a
  line holding only the prefix ends it. Memcheck records read
      ========= Invalid __global__ write of size 4 bytes
      =========     at mlx::core::cu::custom_kernel_saxpy(...)+0x1b0
      =========     by thread (103,0,0) in block (3,0,0)
      =========     Address 0x7f3a1e000fa0 is out of bounds
      =========     and is 0 bytes after the nearest allocation at 0x7f3a1e000000 of size 4000 bytes
  racecheck hazards read
      ========= Error: Potential RAW hazard detected at __shared__ 0x80 in block (2,0,0) :
      =========     Write Thread (32,0,0) at mlx::core::cu::custom_kernel_k(...)+0x150
      =========     Read Thread (0,0,0) at mlx::core::cu::custom_kernel_k(...)+0x1c0
  and race analyses `Error: Race reported between Write access at F+0x..` with
  `and Read access at F+0x.. [N hazards]`. Totals close the log:
  `ERROR SUMMARY: N errors`, `RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)`.
- kernels MLX compiles with NVRTC carry no line information (no -lineinfo),
  so a record names the kernel and an offset, not a source line.
"""

from __future__ import annotations

import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from mlxsci.backends import sanitizable

TOOLS = ("memcheck", "racecheck")
ERROR_EXITCODE = 86  # compute-sanitizer's exit code when it reported an error
PRINT_LIMIT = 10  # records printed; the summary still counts them all
PREFIX = "========="  # compute-sanitizer's default --prefix
STANDARD_DIRS = ("/usr/local/cuda/bin",)
EXECUTABLE = "compute-sanitizer"


# ------------------------------------------------------------- finding it
def search_dirs(env=None) -> list[Path]:
    """Where compute-sanitizer is looked for after PATH: $CUDA_HOME/bin,
    $CUDA_PATH/bin, /usr/local/cuda/bin, and the pip wheel's folder
    (nvidia-cuda-sanitizer-api-cu12 installs nvidia/cuda_sanitizer_api/bin)."""
    env = os.environ if env is None else env
    dirs = [Path(env[k]) / "bin" for k in ("CUDA_HOME", "CUDA_PATH") if env.get(k)]
    dirs += [Path(d) for d in STANDARD_DIRS]
    dirs += wheel_dirs()
    return dirs


def wheel_dirs() -> list[Path]:
    try:
        import nvidia  # namespace package of NVIDIA's CUDA wheels
    except ImportError:
        return []
    return [Path(p) / "cuda_sanitizer_api" / "bin" for p in getattr(nvidia, "__path__", [])]


def find_compute_sanitizer(env=None) -> str | None:
    env = os.environ if env is None else env
    found = shutil.which(EXECUTABLE, path=env.get("PATH"))
    if found:
        return found
    for d in search_dirs(env):
        path = d / EXECUTABLE
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def check_sanitize(tool: str | None, backend_name: str) -> str | None:
    """The compute-sanitizer executable for `tool` on this backend (None when
    not sanitizing). ValueError, saying what to do, when it cannot run."""
    if tool is None:
        return None
    if tool not in TOOLS:
        raise ValueError(f"unknown sanitizer tool {tool!r}; choose one of {', '.join(TOOLS)}")
    if not sanitizable(backend_name):
        raise ValueError(
            f"--sanitize runs the worker under NVIDIA's compute-sanitizer, which "
            f"checks CUDA kernels only; this run uses the {backend_name} backend "
            f"(use --backend cuda on an NVIDIA GPU; the simulator checks bounds "
            f"and races itself)"
        )
    path = find_compute_sanitizer()
    if path is None:
        where = ", ".join(str(d) for d in search_dirs())
        raise ValueError(
            f"--sanitize needs NVIDIA's compute-sanitizer, which is neither on PATH "
            f"nor in {where}; install the CUDA toolkit or "
            f"`pip install nvidia-cuda-sanitizer-api-cu12`, or set CUDA_HOME"
        )
    return path


def sanitizer_command(executable: str, tool: str, log_file, argv: list[str]) -> list[str]:
    """`argv` run under compute-sanitizer's `tool`, its report in `log_file`."""
    command = [
        executable,
        "--tool",
        tool,
        "--error-exitcode",
        str(ERROR_EXITCODE),
        "--log-file",
        str(log_file),
        "--print-limit",
        str(PRINT_LIMIT),
        "--show-backtrace",
        "no",
        "--launch-timeout",
        "0",
    ]
    if tool == "memcheck":
        # Failed CUDA API calls are not the kernel's fault (MLX may probe
        # features that a device lacks); faults in kernels are what we want.
        command += ["--report-api-errors", "no"]
    if tool == "racecheck":
        command += ["--racecheck-report", "hazard"]
    return command + list(argv)


# ------------------------------------------------------------- the report
@dataclass
class SanitizerFault:
    """One error record of a compute-sanitizer report."""

    tool: str
    kind: str  # "Invalid __global__ write of size 4 bytes", ...
    kernel: str | None = None  # the candidate's kernel (MLX's custom_kernel_ prefix dropped)
    thread: str | None = None  # "(103,0,0)"
    block: str | None = None  # "(3,0,0)"
    address: str | None = None  # "0x7f3a1e000fa0 is out of bounds", "__shared__ 0x80"
    details: list = field(default_factory=list)  # the record's other lines, as printed
    accesses: list = field(default_factory=list)  # racecheck: ("Write", "(32,0,0)"), ...

    def message(self) -> str:
        parts = [self.kind]
        if self.kernel:
            parts.append(f"in kernel {self.kernel}")
        if self.accesses:
            parts.append(
                ", ".join(f"{role} by thread {t}" if t else role for role, t in self.accesses)
            )
        elif self.thread:
            parts.append(f"by thread {self.thread}")
        if self.block:
            parts.append(f"in block {self.block}")
        text = " ".join(parts)
        if self.address:
            text += f": address {self.address}"
        near = [d for d in self.details if d.startswith("and is ")]
        if near:
            text += f" ({near[0][len('and ') :]})"
        return text


# Record headers that name a fault of the launched kernel (memcheck's access
# errors and hardware exceptions, racecheck's hazards and races); anything else
# with neither a thread nor a location is the tool talking about itself.
_FAULT_HEADERS = (
    "Invalid ",
    "Potential ",
    "Race reported",
    "Warp ",
    "Misaligned",
    "Illegal",
    "Out-of-range",
    "Malloc/Free",
    "Uninitialized",
    "Barrier",
    "Stack overflow",
    "Hardware",
    "Program hit",
)
_THREAD_BLOCK = re.compile(r"by thread (\(\d+,\s*\d+,\s*\d+\)) in block (\(\d+,\s*\d+,\s*\d+\))")
_HAZARD = re.compile(
    r"Potential (?P<kind>\w+) hazard detected at (?P<where>.+?)"
    r" in block (?P<block>\(\d+,\s*\d+,\s*\d+\))"
)
_ACCESS = re.compile(r"(?P<role>\w+) Thread (?P<thread>\(\d+,\s*\d+,\s*\d+\)) at (?P<at>.+)")
_RACE = re.compile(
    r"(?:Race reported between|and) (?P<role>\w+) access at (?P<at>.+?)"
    r"(?: \[\d+ hazards?\])?$"
)
_AT = re.compile(r"^at (?P<at>.+)$")


def kernel_of(location: str) -> str | None:
    """`mlx::core::cu::custom_kernel_saxpy(const float *, ...)+0x1b0 in f.cu:3`
    -> `saxpy`; older reports put it last: `0xc8 in f.cu:75:kern(float*)`."""
    text = location.strip()
    if re.match(r"0x[0-9a-fA-F]+ in ", text):
        text = text.rsplit(":", 1)[-1]
    text = re.split(r"\+0x[0-9a-fA-F]+", text)[0]
    text = text.split(" in ")[0].strip()
    depth, end = 0, len(text)
    for i, ch in enumerate(text):  # cut the parameter list, keep template brackets
        if ch == "<":
            depth += 1
        elif ch == ">":
            depth -= 1
        elif ch == "(" and depth == 0:
            end = i
            break
    name = text[:end].rsplit("::", 1)[-1].strip()
    if not name:
        return None
    return name[len("custom_kernel_") :] if name.startswith("custom_kernel_") else name


def split_records(text: str) -> list[list[str]]:
    """The report's records: each a list of lines, the first one its header."""
    records, current = [], None
    for raw in text.splitlines():
        if not raw.startswith(PREFIX):
            continue
        content = raw[len(PREFIX) :].rstrip()
        if not content.strip():
            current = None
        elif content.startswith(" ") and not content.startswith("  "):
            current = [content.strip()]
            records.append(current)
        elif current is not None:
            current.append(content.strip())
    return records


def header_text(header: str) -> str:
    """A record's header without its `Error:` severity."""
    return header.split(":", 1)[1].strip() if header.startswith("Error:") else header


def is_fault(lines: list[str]) -> bool:
    """Whether a record reports an error of a kernel (not a banner, summary,
    warning or a message of the tool about itself)."""
    if lines[0].startswith("Warning"):
        return False
    if header_text(lines[0]).startswith(_FAULT_HEADERS):
        return True
    return any(_THREAD_BLOCK.search(ln) or _ACCESS.match(ln) or _AT.match(ln) for ln in lines[1:])


def parse_record(lines: list[str], tool: str) -> SanitizerFault | None:
    """One record -> a fault (None for anything that is not one, see is_fault)."""
    if not is_fault(lines):
        return None
    kind = header_text(lines[0])
    fault = SanitizerFault(tool, kind.rstrip(" :"))
    if m := _HAZARD.search(kind):
        fault.kind = f"Potential {m['kind']} hazard (a shared-memory race)"
        fault.address, fault.block = m["where"], m["block"]
    if m := _RACE.search(kind):
        fault.kind = "Race reported"
        fault.accesses.append((m["role"], None))
        fault.kernel = kernel_of(m["at"])
    for line in lines[1:]:
        if m := _THREAD_BLOCK.search(line):
            fault.thread, fault.block = m[1], m[2]
        elif m := _ACCESS.match(line):
            fault.accesses.append((m["role"], m["thread"]))
            fault.kernel = fault.kernel or kernel_of(m["at"])
        elif m := _RACE.match(line):
            fault.accesses.append((m["role"], None))
        elif m := _AT.match(line):
            fault.kernel = fault.kernel or kernel_of(m["at"])
        elif line.startswith("Address "):
            fault.address = line[len("Address ") :]
        else:
            fault.details.append(line)
    return fault


def parse_sanitizer_log(text: str, tool: str) -> list[SanitizerFault]:
    """Every error record of a compute-sanitizer text report, in order."""
    faults = [parse_record(r, tool) for r in split_records(text)]
    return [f for f in faults if f is not None]


def error_total(text: str) -> int | None:
    """The errors the report's summary counts (more than it printed when over
    --print-limit), None without a summary."""
    m = re.search(r"ERROR SUMMARY: (\d+) errors?", text)
    if m:
        return int(m[1])
    m = re.search(r"RACECHECK SUMMARY: \d+ hazards? displayed \((\d+) errors?", text)
    return int(m[1]) if m else None


def kernel_faults(faults: list[SanitizerFault]) -> list[SanitizerFault]:
    """Faults inside kernels; a failed CUDA API call ("Program hit ...") is
    at most the consequence of one."""
    return [f for f in faults if not f.kind.startswith("Program hit")]


def verdict(faults: list[SanitizerFault], text: str) -> str:
    """The size's verdict from a report's kernel faults: the first one, and
    how many more the summary counts."""
    first = kernel_faults(faults)[0]
    total = error_total(text) or len(faults)
    more = f"; {total - 1} more error(s) reported" if total > 1 else ""
    return f"compute-sanitizer {first.tool}: {first.message()}{more}"


def tool_problems(text: str) -> list[str]:
    """What compute-sanitizer said about itself or about failed API calls
    (could not attach, timed out, an API error): context for a worker that
    ended without a result and without a kernel fault."""
    records = split_records(text)
    return [
        " ".join(r)
        for r in records
        if r[0].startswith(("Error:", "Program hit"))
        and not kernel_faults([f for f in [parse_record(r, "")] if f is not None])
    ]
