"""A sweep whose report shows the transfer table, with scripted fixture
"models" whose grades are known in advance (issue 25).

    python bench/transfer_sweep.py [--out DIR] [--iterations N]
                                   [--autotune-iterations M] [--results FILE]

What it measures: whether a sweep over secret held-out draws grades each
kind of non-transferring win as the paper names it, end to end (sweep ->
search -> held-out gate -> transfer grade -> report), on the simulator.

How: it starts a local OpenAI-compatible Chat Completions server on
127.0.0.1 that is NOT a language model. It answers every request with one
fixed file of tests/transfer/candidates/, chosen by the request's model name
(fixture-a: heat2d_a_size_branch.metal, fixture-b: heat2d_b_wrong_arm.metal,
fixture-c: heat2d_c_held_out_value.metal, fixture-d: heat2d_d_data_path.metal,
fixture-transfers: heat2d_transfers.metal), in a ```metal fence, as an LLM
answer would carry it. Then, as subprocesses:

1. `python -m mlxsci.sweep --tasks heat2d --models fixture-a,...,autotune
   --iterations N --repeats 2 --backend sim --base-url URL --held-out secret
   --out DIR/fixtures` (a --base-url routes every LLM model to the Chat
   Completions API; autotune ignores it, so it shares the sweep, with the
   same N iterations);
2. `python -m mlxsci.sweep --tasks saxpy,nbody --models autotune
   --iterations M --repeats 2 --backend sim --held-out secret
   --out DIR/autotune` (a second folder: one sweep's index.json lists only
   its own runs, so a second sweep into the same folder would hide the first
   one's runs from the report);
3. `python -m mlxsci.report DIR/fixtures DIR/autotune`, once plain and once
   with --details (Markdown, saved beside the runs), and once as JSON to read
   the details' columns.

The run folders go to DIR (default bench/results/sim/transfer_sweep_runs,
committed when small: about 1.7 MB for the default sweep), with each
sweep's console log and the two reports. Writes the results file (default
bench/results/sim/transfer_sweep_<date>.md): the commands, the machine, the
MLX version, the report's tables, and per run the transfer grade, the
revealed secret draw (summary.json `held_out`) and whether it verified
against its commitment. A reading of the grades is
written by hand below the generated part; rerunning the script overwrites
the file. The sweeps skip runs already finished in DIR, so a rerun on the
same DIR only rebuilds the tables.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from mlxsci import held_out

ROOT = Path(__file__).resolve().parents[1]
CANDIDATES = ROOT / "tests" / "transfer" / "candidates"
FIXTURES = {
    "fixture-a": ("heat2d_a_size_branch.metal", "A"),
    "fixture-b": ("heat2d_b_wrong_arm.metal", "B"),
    "fixture-c": ("heat2d_c_held_out_value.metal", "C"),
    "fixture-d": ("heat2d_d_data_path.metal", "D"),
    "fixture-transfers": ("heat2d_transfers.metal", "transfers"),
}
REPEATS = 2


# -- the scripted server -----------------------------------------------------------


def fixture_answer(model: str) -> str | None:
    """The answer text for `model`: its fixture file fenced as ```metal."""
    if model not in FIXTURES:
        return None
    name = FIXTURES[model][0]
    source = (CANDIDATES / name).read_text()
    return f"Scripted fixture, not a language model: {name}.\n\n```metal\n{source.rstrip()}\n```\n"


class FixtureHandler(BaseHTTPRequestHandler):
    """POST /v1/chat/completions: the fixture the model name picks; 404 otherwise."""

    protocol_version = "HTTP/1.1"

    def log_message(self, format, *args):  # the sweep's log is enough
        pass

    def do_POST(self):
        length = int(self.headers.get("content-length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except json.JSONDecodeError:
            body = {}
        model = str(body.get("model", ""))
        text = fixture_answer(model)
        if self.path.rstrip("/").split("?")[0] != "/v1/chat/completions" or text is None:
            message = f"no fixture for model {model!r} at {self.path}"
            return self.reply(404, {"error": {"message": message, "type": "not_found"}})
        served = getattr(self.server, "served", {})
        served[model] = served.get(model, 0) + 1
        self.reply(200, chat_completion(model, text))

    def reply(self, code: int, payload: dict) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


def chat_completion(model: str, text: str) -> dict:
    message = {"role": "assistant", "content": text}
    return {
        "id": "chatcmpl-fixture",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0},
    }


class FixtureServer(ThreadingHTTPServer):
    """The scripted server, counting the answers it served per model."""

    daemon_threads = True

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), FixtureHandler)
        self.served: dict[str, int] = {}


def start_server() -> FixtureServer:
    server = FixtureServer()
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


# -- the sweeps and the report -------------------------------------------------------


def sweep_commands(out: Path, url: str, args) -> list[tuple[str, list[str]]]:
    """(log name, command) of the two sweeps."""
    common = ["--repeats", str(REPEATS), "--backend", "sim", "--held-out", "secret"]
    fixtures = [
        *(sys.executable, "-m", "mlxsci.sweep", "--tasks", "heat2d"),
        *("--models", ",".join([*FIXTURES, "autotune"])),
        *("--iterations", str(args.iterations), *common),
        *("--base-url", url, "--out", str(out / "fixtures")),
    ]
    autotune = [
        *(sys.executable, "-m", "mlxsci.sweep", "--tasks", "saxpy,nbody"),
        *("--models", "autotune", "--iterations", str(args.autotune_iterations), *common),
        *("--out", str(out / "autotune")),
    ]
    return [("fixtures", fixtures), ("autotune", autotune)]


def run_logged(cmd: list[str], log: Path) -> float:
    """Run `cmd` with its output in `log`; wall seconds. Exits when it fails."""
    started = time.perf_counter()
    with log.open("w") as f:
        proc = subprocess.run(cmd, stdout=f, stderr=subprocess.STDOUT, cwd=ROOT)
    wall = time.perf_counter() - started
    if proc.returncode != 0:
        tail = "".join(log.read_text().splitlines(keepends=True)[-30:])
        sys.exit(f"failed (exit {proc.returncode}): {shown(cmd)}\n{tail}")
    return wall


def report_command(out: Path, *extra: str) -> list[str]:
    runs = [str(out / "fixtures"), str(out / "autotune")]
    return [sys.executable, "-m", "mlxsci.report", *runs, *extra]


def report(out: Path, *extra: str) -> str:
    cmd = report_command(out, *extra)
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if proc.returncode != 0:
        sys.exit(f"failed (exit {proc.returncode}): {shown(cmd)}\n{proc.stderr}")
    return proc.stdout


def shown(cmd: list[str]) -> str:
    """The command as a reader would type it (python, paths relative to the repo)."""
    words = ["python" if w == sys.executable else w for w in cmd]
    words = [os.path.relpath(w, ROOT) if w.startswith(str(ROOT)) else w for w in words]
    return shlex.join(words)


# -- the results file -----------------------------------------------------------------


def run_rows(out: Path) -> list[dict]:
    """Per finished run: its grade, draw and check, from summary.json."""
    rows = []
    for summary_path in sorted(out.glob("*/*/summary.json")):
        s = json.loads(summary_path.read_text())
        drawn = (s.get("held_out") or {}).get("params") or {}
        transfer = s.get("transfer") or {}
        evidence = transfer.get("evidence") or [{}]
        expected = FIXTURES.get(s.get("model"), (None, "-"))[1]
        rows.append(
            {
                "run": summary_path.parent.relative_to(out).as_posix(),
                "model": s.get("model"),
                "expected": expected,
                "grade": transfer.get("grade", "-"),
                "outcome": s.get("outcome"),
                "draw": held_out.describe(drawn),
                "verified": "yes" if s.get("held_out_verified") == [] else "NO",
                "evidence": evidence[0].get("what", "") if evidence else "",
                "reason": transfer.get("reason", ""),
            }
        )
    return rows


def runs_table(rows: list[dict]) -> str:
    lines = [
        "| run | model | expected | grade | outcome | secret draw (revealed) | verified |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        mark = "" if r["expected"] in ("-", r["grade"]) else " **(differs)**"
        lines.append(
            f"| {r['run']} | {r['model']} | {r['expected']} | {r['grade']}{mark} "
            f"| {r['outcome']} | {r['draw']} | {r['verified']} |"
        )
    lines += ["", "Each run's transfer reason (summary.json `transfer.reason`):", ""]
    lines += [f"- {r['run']}: {r['grade']}: {r['reason']}" for r in rows]
    return "\n".join(lines)


def details_columns(details: list[dict]) -> str:
    cols = ["task", "model", "run", "search outcome", "transfer grade", "held-out mode"]
    cols += ["held-out verified", "evidence"]
    lines = ["| " + " | ".join(cols) + " |", "|" + "---|" * len(cols)]
    for d in details:
        cells = ["-" if d.get(c) is None else str(d[c]).replace("|", "\\|") for c in cols]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def machine_lines() -> list[str]:
    mlx = subprocess.run(
        [sys.executable, "-c", "import mlx.core as mx; print(mx.__version__)"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, cwd=ROOT
    ).stdout.strip()
    return [
        f"- machine: {platform.system()} {platform.machine()}, {os.cpu_count()} CPUs "
        "(a shared box: other jobs ran beside the sweep), Python "
        f"{platform.python_version()}, MLX {mlx or '?'}",
        f"- backend: the CPU simulator (`--backend sim`, timer `sim`); code at {commit}",
    ]


def write_results(path: Path, out: Path, commands: list[str], walls: list[float], tables: dict):
    parts = [
        f"# A sweep with the transfer table, simulator ({datetime.date.today()})",
        "",
        "Made by `python bench/transfer_sweep.py` (issue 25: the evidence "
        '"a sweep report with the transfer table").',
        "",
        "**The fixture-\\* models are not language models.** They are a scripted "
        "local Chat Completions server (in the script) that answers every request with one "
        "fixed file of tests/transfer/candidates/, picked by the model name: "
        + ", ".join(f"`{m}` -> {f}" for m, (f, _) in FIXTURES.items())
        + ". Their tokens and cost are 0. autotune is the real offline proposer.",
        "",
        "## What was run",
        "",
        *machine_lines(),
        f"- run folders: `{shown([str(out)])}` (fixtures/, autotune/, the sweep logs)",
        "",
        "```bash",
        *(f"{c}   # {w:.0f} s wall" for c, w in zip(commands, walls)),
        *(shown(report_command(out, *extra)) for extra in ((), ("--details",))),
        "```",
        "",
        "## The report (`python -m mlxsci.report`): the main table, then the transfer table",
        "",
        tables["main"].strip(),
        "",
        "## The details table's grade and evidence columns (`--details`)",
        "",
        tables["details"],
        "",
        "## Per run: grade, revealed secret draw, commitment check (summary.json)",
        "",
        tables["runs"],
        "",
    ]
    path.write_text("\n".join(parts))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--out", type=Path, default=ROOT / "bench" / "results" / "sim" / "transfer_sweep_runs"
    )
    parser.add_argument("--iterations", type=int, default=1, help="the heat2d sweep's")
    parser.add_argument("--autotune-iterations", type=int, default=4, help="saxpy, nbody")
    parser.add_argument(
        "--results",
        type=Path,
        default=ROOT / "bench" / "results" / "sim" / f"transfer_sweep_{datetime.date.today()}.md",
    )
    args = parser.parse_args()
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    server = start_server()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    commands, walls = [], []
    try:
        for name, cmd in sweep_commands(out, url, args):
            print(f"running: {shown(cmd)}", flush=True)
            walls.append(run_logged(cmd, out / f"sweep_{name}.log"))
            commands.append(shown(cmd).replace(url, "http://127.0.0.1:PORT/v1"))
    finally:
        server.shutdown()
    print(f"scripted answers served: {server.served}")
    plain = report(out)
    (out / "report.md").write_text(plain)
    (out / "report_details.md").write_text(report(out, "--details"))
    details = json.loads(report(out, "--details", "--format", "json"))["details"]
    tables = {"main": plain, "details": details_columns(details), "runs": runs_table(run_rows(out))}
    write_results(args.results, out, commands, walls, tables)
    print(plain)
    print(tables["runs"])
    print(f"results: {args.results}")


if __name__ == "__main__":
    main()
