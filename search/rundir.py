"""A search's run directory: one file per artefact, written atomically.

Layout (Metal-Sci's, plus what resuming needs):
    run.json                 the options the run was started with
    00_seed.<ext>            the starting candidate, 00_result.json its result
    NN_prompt.md             the user prompt of iteration NN (system prompt in system_prompt.md)
    NN_proposal.json         tokens, cost, model, error of the proposer's call
    NN_response.md           the raw response; NN_reasoning.md when returned
    NN_candidate.<ext>       the extracted candidate; NN_result.json its evaluation
    history.jsonl            one record per finished iteration, appended last
    best.<ext>, best_result.json, summary.json

An iteration counts as done only once its history record is appended, so a
run killed at any point resumes at the first iteration without a record. A
proposal already saved for that iteration is reused, not asked for again.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from mlxsci.cache import atomic_write_bytes, atomic_write_json


class RunDir:
    def __init__(self, path: Path, dialect: str = "metal"):
        self.path = Path(path)
        self.ext = "metal" if dialect == "metal" else "cu"

    def file(self, name: str) -> Path:
        return self.path / name

    def iter_file(self, iteration: int, kind: str) -> Path:
        """kind: prompt.md, proposal.json, response.md, reasoning.md, candidate, result.json"""
        name = f"candidate.{self.ext}" if kind == "candidate" else kind
        return self.path / f"{iteration:02d}_{name}"

    def write_text(self, path: Path, text: str) -> None:
        atomic_write_bytes(path, text.encode())

    def write_json(self, path: Path, obj) -> None:
        atomic_write_json(path, obj)

    def read_json(self, name_or_path):
        path = name_or_path if isinstance(name_or_path, Path) else self.file(name_or_path)
        return json.loads(path.read_text())

    def append_history(self, record: dict) -> None:
        """Append one line and fsync: the record is the commit point of an iteration."""
        line = json.dumps(record, sort_keys=True) + "\n"
        with open(self.file("history.jsonl"), "a") as f:
            f.write(line)
            f.flush()
            os.fsync(f.fileno())

    def history(self) -> list[dict]:
        """Finished iterations, in order. A torn last line (killed mid-write) is dropped."""
        path = self.file("history.jsonl")
        if not path.exists():
            return []
        records = []
        for line in path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError:
                break
        # Keep the first record of each iteration: a record is only appended once
        # per iteration, but be strict so a history never counts one twice.
        seen, unique = set(), []
        for r in records:
            if r["iteration"] not in seen:
                seen.add(r["iteration"])
                unique.append(r)
        return unique

    def repair_history(self, records: list[dict]) -> None:
        """Rewrite history.jsonl with exactly these records (drops a torn tail)."""
        text = "".join(json.dumps(r, sort_keys=True) + "\n" for r in records)
        atomic_write_bytes(self.file("history.jsonl"), text.encode())
