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

Beyond one file: JSON nested deeper than MAX_JSON_DEPTH is refused (Python's
json recurses, and a file of brackets would end the import in a
RecursionError); a run's files together may hold at most MAX_RUN_BYTES (one
file of 8 MiB hard-linked, or sparse, under thousands of iteration names is
a small download that would otherwise be read whole into memory); and a
name from the run (a folder name can hold newlines and terminal escapes)
is printed only through `shown`.
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
MAX_JSON_DEPTH = 32  # Metal-Sci's JSON nests 4 deep (summary > history > record > sizes)
MAX_RUN_BYTES = 256 << 20  # every file of one run together; Metal-Sci's are a few MB

ROLES = ("seed", "candidate", "skipped")
TEXTS = ("prompt", "response", "reasoning")  # NN_<name>.md, copied as recorded
MARKERS = ("history.json", "summary.json", "00_seed.metal")
_NUMBERED = re.compile(r"^(\d{2,5})_(candidate\.metal|result\.json|prompt\.md|response\.md)$")
_STAMP = re.compile(r"^(.+?)_(\d{8}_\d{6})$")


class NotAMetalSciRun(ValueError):
    """A folder that holds no Metal-Sci run (nor, for find_runs, any run)."""


class UnreadableFile(Exception):
    """Why one file of a run could not be read (kept against its iteration)."""


def shown(text: object) -> str:
    """`text` (a path or name from a run: a folder name may hold a newline or
    a terminal escape) as one printable line for progress lines and
    messages: each character that is not printable written as its escape."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(text))


class _Budget:
    """The bytes one run's files may still hold (MAX_RUN_BYTES in all)."""

    def __init__(self, left: int):
        self.left = left

    def take(self, name: str, size: int) -> None:
        if size > self.left:
            raise UnreadableFile(
                f"{name} ({size} bytes) not read: the run's files are over "
                f"{MAX_RUN_BYTES} bytes in all"
            )
        self.left -= size


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


def read_bytes(path: Path, cap: int, budget: _Budget | None = None) -> bytes:
    """A regular file's bytes, not following a symbolic link, at most `cap`
    (and what is left of the run's `budget`)."""
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
        if budget is not None:
            budget.take(path.name, info.st_size)
        data = f.read(cap + 1)
    if len(data) > cap:
        raise UnreadableFile(f"{path.name} grew over the {cap}-byte limit while being read")
    return data


def read_text(path: Path, cap: int, budget: _Budget | None = None) -> str:
    return read_bytes(path, cap, budget).decode("utf-8", errors="replace")


def parse_json(text: str, name: str) -> object:
    """JSON text as a value; UnreadableFile when it is no JSON or nests
    deeper than MAX_JSON_DEPTH (json.loads recurses: `[[[[...` a hundred
    thousand deep raised RecursionError, which is no ValueError, through
    the whole import; a value that loads a little under Python's limit would
    raise it again when the importer writes it back)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise UnreadableFile(f"{name} nests deeper than {MAX_JSON_DEPTH} levels") from None
    except ValueError as exc:
        raise UnreadableFile(f"{name} is not JSON ({exc})") from None
    if _depth(value) > MAX_JSON_DEPTH:
        raise UnreadableFile(f"{name} nests deeper than {MAX_JSON_DEPTH} levels")
    return value


def _depth(value: object) -> int:
    """How deep lists and dicts nest in `value` (iteratively: no recursion)."""
    deepest, stack = 0, [(value, 1)]
    while stack:
        v, d = stack.pop()
        if isinstance(v, (list, dict)):
            deepest = max(deepest, d)
            if d > MAX_JSON_DEPTH:
                break
            stack.extend((x, d + 1) for x in (v.values() if isinstance(v, dict) else v))
    return deepest


def read_json(path: Path, budget: _Budget | None = None) -> object:
    return parse_json(read_text(path, MAX_JSON_BYTES, budget), path.name)


def is_run(path: Path) -> bool:
    """Whether the folder holds a Metal-Sci run's own files (False for one
    that cannot be looked into: a downloaded folder may be unreadable)."""
    try:
        return path.is_dir() and any((path / m).is_file() for m in MARKERS)
    except OSError:
        return False


def find_runs(paths) -> tuple[list[Path], list[str]]:
    """The run directories the paths name: each a run, or a folder whose
    subfolders are runs (Metal-Sci's results/ folder). Returns them sorted,
    with a note per subfolder passed over; NotAMetalSciRun for a path that
    is neither."""
    runs, notes = [], []
    for p in map(Path, paths):
        if not p.exists():
            raise NotAMetalSciRun(f"{shown(p)} does not exist")
        if not p.is_dir():
            raise NotAMetalSciRun(f"{shown(p)} is a file, not a Metal-Sci run directory")
        if is_run(p):
            runs.append(p)
            continue
        try:
            inner = sorted(d for d in p.iterdir() if d.is_dir() and not d.is_symlink())
        except OSError as exc:
            raise NotAMetalSciRun(f"{shown(p)} cannot be listed: {exc.strerror}") from None
        found = [d for d in inner if is_run(d)]
        if not found:
            raise NotAMetalSciRun(
                f"{shown(p)} is not a Metal-Sci run directory: it has none of "
                f"{', '.join(MARKERS)}, nor does any folder inside it (a Metal-Sci run "
                "is results/<task>_<model>_<stamp>/ with 00_seed.metal, NN_candidate.metal, "
                "NN_result.json, history.json and summary.json)"
            )
        notes += [f"{shown(d)}: not a Metal-Sci run, passed over" for d in inner if d not in found]
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
            f"{shown(path)}: its task {shown(repr(task)[:200])} is not one of the 12 Metal-Sci tasks "
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


def _load_json_file(path: Path, problems: list[str], files: dict, budget: _Budget) -> object:
    if not path.exists() and not path.is_symlink():
        return None
    try:
        text = read_text(path, MAX_JSON_BYTES, budget)
        value = parse_json(text, path.name)
    except (UnreadableFile, OSError) as exc:
        problems.append(f"{exc}: ignored")
        return None
    files[path.name] = text
    return value


def read_run(path: Path) -> MetalSciRun:
    """The run at `path`, every iteration it recorded or left files for."""
    path = Path(path)
    if not is_run(path):
        raise NotAMetalSciRun(
            f"{shown(path)} is not a Metal-Sci run directory (none of {', '.join(MARKERS)})"
        )
    problems: list[str] = []
    files: dict[str, str] = {}
    budget = _Budget(MAX_RUN_BYTES)
    summary = _load_json_file(path / "summary.json", problems, files, budget)
    summary = summary if isinstance(summary, dict) else {}
    history_doc = _load_json_file(path / "history.json", problems, files, budget)
    history = _records(history_doc, "history.json", problems)
    if not history:
        history = _records(summary.get("history"), "summary.json's history", problems)
    task, model, chip = _identity(path, summary)
    by_iteration = {rec["iteration"]: rec for rec in history}
    numbers = set(by_iteration) | {0} | _numbered_files(path)
    iterations = [_iteration(path, n, by_iteration.get(n), budget) for n in sorted(numbers)]
    return MetalSciRun(path, task, model, chip, summary, history, iterations, files, problems)


def _numbered_files(path: Path) -> set[int]:
    found = set()
    try:
        for p in path.iterdir():
            m = _NUMBERED.match(p.name)
            if m and int(m.group(1)) < MAX_ITERATIONS:
                found.add(int(m.group(1)))
    except OSError as exc:  # a downloaded folder may be unreadable
        raise NotAMetalSciRun(f"{shown(path)} cannot be listed: {exc.strerror}") from None
    return found


def _role(n: int, record: dict | None, has_source: bool) -> str:
    if n == 0:
        return "seed"
    role = record.get("role") if record else None
    if role in ROLES and role != "seed":
        return role
    return "candidate" if has_source or record is None else "skipped"


def _iteration(path: Path, n: int, record: dict | None, budget: _Budget) -> RecordedIteration:
    nn = f"{n:02d}"
    source_name = "00_seed.metal" if n == 0 else f"{nn}_candidate.metal"
    src_path = path / source_name
    has_source = src_path.exists() or src_path.is_symlink()
    it = RecordedIteration(n, _role(n, record, has_source), history=record)
    if it.role != "skipped" or has_source:
        _read_source(it, src_path, source_name, budget)
    if n > 0:
        result = _read_optional_json(path / f"{nn}_result.json", it.problems, budget)
        it.result = result if isinstance(result, dict) else None
    elif record is not None:
        it.result = record  # Metal-Sci writes no 00_result.json: the seed's is its record
    for name in TEXTS:
        text_path = path / f"{nn}_{name}.md"
        if text_path.exists() or text_path.is_symlink():
            try:
                it.texts[name] = read_text(text_path, MAX_TEXT_BYTES, budget)
            except (UnreadableFile, OSError) as exc:
                it.problems.append(str(exc))
    return it


def _read_source(it: RecordedIteration, src_path: Path, source_name: str, budget) -> None:
    try:
        it.source = read_text(src_path, MAX_SOURCE_BYTES, budget)
        it.source_file = source_name
    except FileNotFoundError:
        recorded = (it.history or {}).get("source_path")
        it.missing = f"{source_name} is missing" + (
            f" (history.json names {recorded!r})" if isinstance(recorded, str) else ""
        )
    except (UnreadableFile, OSError) as exc:
        it.missing = str(exc)


def _read_optional_json(path: Path, problems: list[str], budget: _Budget) -> object:
    if not path.exists() and not path.is_symlink():
        return None
    try:
        return read_json(path, budget)
    except (UnreadableFile, OSError) as exc:
        problems.append(str(exc))
        return None
