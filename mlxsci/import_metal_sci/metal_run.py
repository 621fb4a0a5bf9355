"""Reading a Metal-Sci run directory: `results/<task>_<model>_<stamp>/` with
00_seed.metal, NN_prompt.md, NN_response.md, NN_reasoning.md,
NN_candidate.metal, NN_result.json, best.metal, best_result.json,
history.json and summary.json (the format is in docs/metal-sci.md).

A published run is input from elsewhere, read as hostile like a candidate's
output: every file is opened without following symbolic links (a link named
01_response.md to ~/.aws/credentials would otherwise be copied into the
imported run, and from there into reports and prompts), must be a regular
file under a size cap, is decoded with replacement of bad bytes, and every
JSON value is checked for the type it should have before it is used. What
is wrong with one file is recorded against its iteration, never raised: only
a folder that is not a Metal-Sci run at all raises NotAMetalSciRun.
"""

from __future__ import annotations

import json
import os
import re
import stat
from dataclasses import dataclass, field
from pathlib import Path

from mlxsci.task import task_names

MAX_SOURCE_BYTES = 1 << 20  # a kernel source; Metal-Sci's longest are ~20 KB
MAX_TEXT_BYTES = 8 << 20  # a prompt, response or reasoning text
MAX_JSON_BYTES = 32 << 20  # history.json of a long run
MAX_ITERATIONS = 10_000  # more is not a run but a malformed history
MAX_NAME_CHARS = 120  # of a recorded model or chip name

ROLES = ("seed", "candidate", "skipped")
TEXTS = ("prompt", "response", "reasoning")  # NN_<name>.md, copied as recorded
MARKERS = ("history.json", "summary.json", "00_seed.metal")
_NUMBERED = re.compile(r"^(\d{2,5})_(candidate\.metal|result\.json|prompt\.md|response\.md)$")
_STAMP = re.compile(r"^(.+?)_(\d{8}_\d{6})$")


class NotAMetalSciRun(ValueError):
    """A folder that holds no Metal-Sci run (nor, for find_runs, any run)."""


class UnreadableFile(Exception):
    """Why one file of a run could not be read (kept against its iteration)."""


@dataclass
class RecordedIteration:
    """One iteration as the run recorded it (0 = the seed)."""

    iteration: int
    role: str  # seed | candidate | skipped
    source: str | None = None  # the Metal source (00_seed.metal or NN_candidate.metal)
    source_file: str | None = None
    missing: str | None = None  # why an expected source is not there
    result: dict | None = None  # NN_result.json, or the seed's history record
    history: dict | None = None  # its history.json record
    texts: dict[str, str] = field(default_factory=dict)  # prompt/response/reasoning
    problems: list[str] = field(default_factory=list)  # files present but unreadable


@dataclass
class MetalSciRun:
    path: Path
    task: str
    model: str
    chip: str | None
    summary: dict
    history: list[dict]
    iterations: list[RecordedIteration]
    files: dict[str, str]  # recorded JSON files copied as they are: name -> text
    problems: list[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return self.path.name

    @property
    def best_iteration(self) -> int | None:
        """The recorded incumbent at the end: the last record that was a new
        best (the seed when none beat it)."""
        best = None
        for it in self.iterations:
            rec = it.history or {}
            if rec.get("is_new_best") is True or (it.role == "seed" and best is None):
                best = it.iteration
        return best


def read_bytes(path: Path, cap: int) -> bytes:
    """A regular file's bytes, not following a symbolic link, at most `cap`."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise
    except OSError as exc:
        if path.is_symlink():
            raise UnreadableFile(f"{path.name} is a symbolic link: not followed") from None
        raise UnreadableFile(f"{path.name}: {exc.strerror or exc}") from None
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableFile(f"{path.name} is not a regular file")
        if info.st_size > cap:
            raise UnreadableFile(f"{path.name} is {info.st_size} bytes, over the {cap}-byte limit")
        data = f.read(cap + 1)
    if len(data) > cap:
        raise UnreadableFile(f"{path.name} grew over the {cap}-byte limit while being read")
    return data


def read_text(path: Path, cap: int) -> str:
    return read_bytes(path, cap).decode("utf-8", errors="replace")


def read_json(path: Path) -> object:
    try:
        return json.loads(read_text(path, MAX_JSON_BYTES))
    except ValueError as exc:
        raise UnreadableFile(f"{path.name} is not JSON ({exc})") from None


def is_run(path: Path) -> bool:
    """Whether the folder holds a Metal-Sci run's own files."""
    return path.is_dir() and any((path / m).is_file() for m in MARKERS)


def find_runs(paths) -> tuple[list[Path], list[str]]:
    """The run directories the paths name: each a run, or a folder whose
    subfolders are runs (Metal-Sci's results/ folder). Returns them sorted,
    with a note per subfolder passed over; NotAMetalSciRun for a path that
    is neither."""
    runs, notes = [], []
    for p in map(Path, paths):
        if not p.exists():
            raise NotAMetalSciRun(f"{p} does not exist")
        if not p.is_dir():
            raise NotAMetalSciRun(f"{p} is a file, not a Metal-Sci run directory")
        if is_run(p):
            runs.append(p)
            continue
        inner = sorted(d for d in p.iterdir() if d.is_dir() and not d.is_symlink())
        found = [d for d in inner if is_run(d)]
        if not found:
            raise NotAMetalSciRun(
                f"{p} is not a Metal-Sci run directory: it has none of "
                f"{', '.join(MARKERS)}, nor does any folder inside it (a Metal-Sci run "
                "is results/<task>_<model>_<stamp>/ with 00_seed.metal, NN_candidate.metal, "
                "NN_result.json, history.json and summary.json)"
            )
        notes += [f"{d}: not a Metal-Sci run, passed over" for d in inner if d not in found]
        runs += found
    unique = list(dict.fromkeys(r.resolve() for r in runs))
    return [Path(r) for r in unique], notes


def _name_parts(name: str) -> tuple[str | None, str | None]:
    """(task, model) from `<task>_<model>_<YYYYmmdd_HHMMSS>`."""
    m = _STAMP.match(name)
    stem = m.group(1) if m else name
    for task in sorted(task_names(), key=len, reverse=True):
        if stem.startswith(task + "_") and len(stem) > len(task) + 1:
            return task, stem[len(task) + 1 :]
        if stem == task:
            return task, None
    return None, None


def _identity(path: Path, summary: dict) -> tuple[str, str, str | None]:
    """The run's task, model and chip: summary.json's, else the folder name's."""
    named_task, named_model = _name_parts(path.name)
    task = summary.get("task") if isinstance(summary.get("task"), str) else named_task
    if task not in task_names():
        raise NotAMetalSciRun(
            f"{path}: its task {task!r} is not one of the 12 Metal-Sci tasks "
            f"({', '.join(sorted(task_names()))}); neither summary.json nor the folder "
            "name (<task>_<model>_<stamp>) names one"
        )
    model = summary.get("model") if isinstance(summary.get("model"), str) else named_model
    chip = summary.get("chip") if isinstance(summary.get("chip"), str) else None
    return task, plain_name(model) or "unknown-model", plain_name(chip)


def plain_name(text: str | None) -> str | None:
    """A recorded name (model, chip) as one short printable line: it goes
    into tables, file names' neighbours and LaTeX."""
    if text is None:
        return None
    kept = "".join(c for c in text if c.isprintable())[:MAX_NAME_CHARS].strip()
    return kept or None


def _records(value, where: str, problems: list[str]) -> list[dict]:
    """history.json's (or summary.json's "history") records that are records."""
    if value is None:
        return []
    if not isinstance(value, list):
        problems.append(f"{where} is not a list of iteration records: ignored")
        return []
    good = []
    for rec in value[:MAX_ITERATIONS]:
        it = rec.get("iteration") if isinstance(rec, dict) else None
        if isinstance(it, int) and not isinstance(it, bool) and 0 <= it < MAX_ITERATIONS:
            good.append(rec)
        else:
            problems.append(f"{where}: a record without a valid iteration number: ignored")
    return good


def _load_json_file(path: Path, problems: list[str], files: dict) -> object:
    if not path.exists() and not path.is_symlink():
        return None
    try:
        text = read_text(path, MAX_JSON_BYTES)
        value = json.loads(text)
    except (UnreadableFile, OSError) as exc:
        problems.append(str(exc))
        return None
    except ValueError as exc:
        problems.append(f"{path.name} is not JSON ({exc}): ignored")
        return None
    files[path.name] = text
    return value


def read_run(path: Path) -> MetalSciRun:
    """The run at `path`, every iteration it recorded or left files for."""
    path = Path(path)
    if not is_run(path):
        raise NotAMetalSciRun(
            f"{path} is not a Metal-Sci run directory (none of {', '.join(MARKERS)})"
        )
    problems: list[str] = []
    files: dict[str, str] = {}
    summary = _load_json_file(path / "summary.json", problems, files)
    summary = summary if isinstance(summary, dict) else {}
    history_doc = _load_json_file(path / "history.json", problems, files)
    history = _records(history_doc, "history.json", problems)
    if not history:
        history = _records(summary.get("history"), "summary.json's history", problems)
    task, model, chip = _identity(path, summary)
    by_iteration = {rec["iteration"]: rec for rec in history}
    numbers = set(by_iteration) | {0} | _numbered_files(path)
    iterations = [_iteration(path, n, by_iteration.get(n)) for n in sorted(numbers)]
    return MetalSciRun(path, task, model, chip, summary, history, iterations, files, problems)


def _numbered_files(path: Path) -> set[int]:
    found = set()
    for p in path.iterdir():
        m = _NUMBERED.match(p.name)
        if m and int(m.group(1)) < MAX_ITERATIONS:
            found.add(int(m.group(1)))
    return found


def _role(n: int, record: dict | None, has_source: bool) -> str:
    if n == 0:
        return "seed"
    role = record.get("role") if record else None
    if role in ROLES and role != "seed":
        return role
    return "candidate" if has_source or record is None else "skipped"


def _iteration(path: Path, n: int, record: dict | None) -> RecordedIteration:
    nn = f"{n:02d}"
    source_name = "00_seed.metal" if n == 0 else f"{nn}_candidate.metal"
    src_path = path / source_name
    has_source = src_path.exists() or src_path.is_symlink()
    it = RecordedIteration(n, _role(n, record, has_source), history=record)
    if it.role != "skipped" or has_source:
        _read_source(it, src_path, source_name)
    if n > 0:
        result = _read_optional_json(path / f"{nn}_result.json", it.problems)
        it.result = result if isinstance(result, dict) else None
    elif record is not None:
        it.result = record  # Metal-Sci writes no 00_result.json: the seed's is its record
    for name in TEXTS:
        text_path = path / f"{nn}_{name}.md"
        if text_path.exists() or text_path.is_symlink():
            try:
                it.texts[name] = read_text(text_path, MAX_TEXT_BYTES)
            except (UnreadableFile, OSError) as exc:
                it.problems.append(str(exc))
    return it


def _read_source(it: RecordedIteration, src_path: Path, source_name: str) -> None:
    try:
        it.source = read_text(src_path, MAX_SOURCE_BYTES)
        it.source_file = source_name
    except FileNotFoundError:
        recorded = (it.history or {}).get("source_path")
        it.missing = f"{source_name} is missing" + (
            f" (history.json names {recorded!r})" if isinstance(recorded, str) else ""
        )
    except (UnreadableFile, OSError) as exc:
        it.missing = str(exc)


def _read_optional_json(path: Path, problems: list[str]) -> object:
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return read_json(path)
    except (UnreadableFile, OSError) as exc:
        problems.append(str(exc))
        return None
