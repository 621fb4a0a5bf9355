"""A search's run directory: one file per artefact, written atomically.

Layout (Metal-Sci's, plus what resuming needs):
    run.json                 the options the run was started with
    00_seed.<ext>            the starting candidate, 00_result.json its result
    NN_prompt.md             the user prompt of iteration NN (system prompt in system_prompt.md)
    NN_proposal.json         tokens, cost, model, error of the proposer's call
    NN_response.md           the raw response; NN_reasoning.md when returned
    NN_candidate.<ext>       the extracted candidate; NN_result.json its evaluation
    history.jsonl            one record per finished iteration (its generation and
                             slot among its fields), a generation's appended together, last
    strategy_state.json      the strategy's state after the last generation (parents,
                             islands, the archive's cells), by iteration number
    best.<ext>, best_result.json, summary.json

NN is the iteration: the proposal's number in the run. A generation of K
proposals holds K consecutive iterations, one per slot (history.jsonl says
which generation and slot each is). An iteration counts as done only once its
generation's records are appended, so a run killed at any point resumes at
the first generation without all its records. A proposal already saved for
an iteration is reused, not asked for again, and so is a result saved for it.

A line of history.jsonl that is not a record (cut short by a kill, or
damaged) is skipped and reported with its line number; the records after it
still count, and the skipped text is kept in history_skipped.txt when the
history is rewritten without it.

Every file goes through `write_text`, `write_json`, `append_history` or
`repair_history`, and each redacts what it writes (mlxsci/evaluation/redaction.py): no
secret value reaches a run directory, whatever a worker or a model said.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from mlxsci.evaluation.redaction import redact, redact_json
from mlxsci.kernel import dialects
from mlxsci.storage.cache import atomic_write_bytes, atomic_write_json

ROLES = ("seed", "candidate", "skipped")  # what a history record's iteration was


class RunDir:
    def __init__(self, path: Path, dialect: str = "metal"):
        self.path = Path(path)
        self.ext = dialects.get(dialect).extension.lstrip(".")
        self.skipped_lines: list[tuple[int, str]] = []  # history() lines that held no record

    def file(self, name: str) -> Path:
        return self.path / name

    def iter_file(self, iteration: int, kind: str) -> Path:
        """kind: prompt.md, proposal.json, response.md, reasoning.md, candidate, result.json"""
        name = f"candidate.{self.ext}" if kind == "candidate" else kind
        return self.path / f"{iteration:02d}_{name}"

    def write_text(self, path: Path, text: str) -> None:
        atomic_write_bytes(path, redact(text).encode())

    def write_json(self, path: Path, obj) -> None:
        atomic_write_json(path, redact_json(obj))

    def read_json(self, name_or_path):
        path = name_or_path if isinstance(name_or_path, Path) else self.file(name_or_path)
        return json.loads(path.read_text())

    def options(self) -> dict:
        """The JSON object in run.json (search/options.py SearchOptions.from_json
        reads the options out of it). ValueError, saying what to do, when the
        folder is not a run directory or its run.json holds no JSON object."""
        path = self.file("run.json")
        if not self.path.is_dir():
            raise ValueError(
                f"{self.path} is not a folder: --resume takes a run directory "
                "(the --out folder of an earlier search)"
            )
        if not path.is_file():
            raise ValueError(
                f"{self.path} is not a run directory: it has no run.json (--resume "
                "takes the --out folder of an earlier search)"
            )
        try:
            opts = json.loads(path.read_bytes().decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ValueError(
                f"{path} is damaged ({type(exc).__name__}: {exc}): it must be the "
                "JSON object of options a search wrote; cannot resume "
                "this run"
            ) from None
        if not isinstance(opts, dict):
            raise ValueError(
                f"{path} is damaged: it must hold a JSON object of options, "
                "not " + type(opts).__name__ + "; cannot resume this run"
            )
        return opts

    def append_history(self, record: dict) -> None:
        """Append one line and fsync: the record is the commit point of an iteration."""
        self.append_records([record])

    def append_records(self, records: list[dict]) -> None:
        """Append a generation's records in one write, and fsync: together
        they are its commit point (a kill between two lines leaves a
        generation the loop drops and makes again)."""
        text = "".join(json.dumps(redact_json(r), sort_keys=True) + "\n" for r in records)
        with open(self.file("history.jsonl"), "a") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())

    def history(self) -> list[dict]:
        """Finished iterations, in order of iteration. Lines that are not
        records are skipped and listed in self.skipped_lines."""
        path = self.file("history.jsonl")
        self.skipped_lines = []
        if not path.exists():
            return []
        records = []
        # Bytes decoded leniently: a damaged line is skipped, never an exception.
        text = path.read_bytes().decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            record = parse_record(line)
            if record is not None:
                records.append(record)
            elif line.strip():
                self.skipped_lines.append((number, line))
        # Keep the first record of each iteration: a record is only appended once
        # per iteration, but be strict so a history never counts one twice.
        seen, unique = set(), []
        for r in records:
            if r["iteration"] not in seen:
                seen.add(r["iteration"])
                unique.append(r)
        return sorted(unique, key=lambda r: r["iteration"])

    def skipped_report(self) -> list[str]:
        """One console line per line history() skipped, naming file and line."""
        path = self.file("history.jsonl")
        return [
            f"warning: {path}:{number}: not a history record (cut short by a kill, or "
            f"damaged): skipped; the records after it are kept ({_excerpt(line)})"
            for number, line in self.skipped_lines
        ]

    def repair_history(self, records: list[dict]) -> None:
        """Rewrite history.jsonl with exactly these records (drops a torn tail
        and damaged lines), keeping the lines it drops in history_skipped.txt."""
        if self.skipped_lines:
            kept = "".join(f"history.jsonl line {n}: {line}\n" for n, line in self.skipped_lines)
            with open(self.file("history_skipped.txt"), "a") as f:
                f.write(redact(kept))
        text = "".join(json.dumps(redact_json(r), sort_keys=True) + "\n" for r in records)
        atomic_write_bytes(self.file("history.jsonl"), text.encode())


def spent_usd(record: dict) -> float:
    """What a history record's call cost, with an earlier answer it replaced
    (discarded_cost_usd); a figure on disk that is no count (negative, not a
    number) counts 0: a damaged line is no refund."""
    total = 0.0
    for key in ("cost_usd", "discarded_cost_usd"):
        value = record.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value >= 0:
            total += float(value)
    return total


def record_score(record: dict) -> float | None:
    """A history record's S: None unless its candidate (or seed) was correct."""
    return record.get("score") if record.get("correct") else None


def parse_record(line: str) -> dict | None:
    """The history record a line holds, or None when it holds none: not JSON,
    or JSON without an integer iteration and a role (a line cut short by a
    kill can still be valid JSON, a bare number)."""
    try:
        record = json.loads(line)
    except json.JSONDecodeError:
        return None
    if not isinstance(record, dict) or record.get("role") not in ROLES:
        return None
    iteration = record.get("iteration")
    if not isinstance(iteration, int) or isinstance(iteration, bool) or iteration < 0:
        return None
    return record


def _excerpt(line: str, width: int = 60) -> str:
    line = line.strip()
    return repr(line if len(line) <= width else line[:width] + "...")
