"""The checker's own score: how many broken seeds the checks catch.

    python bench/mutation_score.py [--tasks heat2d,lbm] [--dialects metal,cuda]
        [--operators race,drop_term] [--sizes smoke+first] [--jobs 2] [--out DIR]
        [--only ID,ID | --only RESULTS.json]
    python bench/mutation_score.py --show heat2d/metal/drop_term/L20.32

Makes mutants of every task's seed in both dialects (bench/mutation_operators.py:
off-by-one bounds, dropped boundary handling, a missing barrier, swapped
indices, half precision, a dropped term, a stale ping-pong buffer, partial
writes, a race, the input written back, the input mutated, constant outputs),
evaluates each on the simulator exactly as a candidate is evaluated
(`mlxsci.evaluate(..., backend="sim")`; by default at the smoke sizes, then at
the first in-distribution size for the mutants smoke lets through: half
precision, for one, passes heat2d's 5 smoke steps and fails its 50) and sorts
it (the seed itself is evaluated first; a seed failing at these sizes has its mutants
run at smoke where it passes there, else not run):

  stillborn   it does not compile (or parse): not a mutant the checks face
  killed      it compiles and the evaluation fails; the checks that fired are
              recorded (reference error, unwritten, race, input_mutated,
              nondeterministic, out_of_bounds and the other runtime faults,
              timeout, crash)
  equivalent  it passes, and bench/mutation_equivalents.json explains why, one
              entry per mutant id, by kind: "code" (the same answer at every
              size of the task), "inputs" (the same answer for every input the
              task makes, whatever its seed), "tolerance" (an answer the task's
              tolerance accepts by design, at the first in-dist size too)
  survived    it passes: a gap in the checks; an entry of kind "gap" in the
              same file says which check misses it and what would catch it

Kill % = killed / (compiled mutants - equivalent). Writes
`DIR/mutation_score.md` (tables) and `DIR/mutation_score.json` (`mutants`,
`killed`, `equivalent`, `stillborn`, `tasks`, `operators`, `checks`,
`survivors` with their reasons, every mutant's record, machine, commit,
date). DIR defaults to bench/results/sim; a run over a subset writes
`mutation_score_subset.*` there unless --out is given. Progress goes to stderr.
"""

from __future__ import annotations

import datetime
import difflib
import json
import os
import platform
import subprocess
import sys
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from multiprocessing import get_context
from pathlib import Path

import click
from tabulate import tabulate

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutation_operators import OPERATORS, Mutant, mutants, seed_info  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
EQUIVALENTS = ROOT / "bench" / "mutation_equivalents.json"
DIALECTS = ("metal", "cuda")


def all_tasks() -> list[str]:
    from mlxsci.task import task_names

    return list(task_names())


# Tasks whose first in-distribution size is too slow on the simulator to add
# to every surviving mutant: hmc's d8_K16384_T200 took 129 s on 2 cores.
SMOKE_ONLY = {"hmc"}


def size_list(task_name: str, sizes: str) -> list:
    """The sizes a mutant runs: a size set's name, or `smoke+first` (the smoke
    sizes and the first in-distribution size, but for SMOKE_ONLY tasks; the
    larger size runs only for mutants the smoke sizes let through, as
    evaluation stops at the first failing size)."""
    from mlxsci.task import load_task

    task = load_task(task_name)
    if sizes == "smoke+first":
        first = [] if task_name in SMOKE_ONLY else [task.size_set("in-dist")[0]]
        return [*task.size_set("smoke"), *first]
    return list(task.size_set(sizes))


def checks_fired(ev) -> list[str]:
    """The checks that failed a compiled, incorrect evaluation."""
    failing = next((s for s in ev.sizes if not s.correct), None)
    fired = [f for f in (failing.flags if failing else []) if f != "suspicious"]
    if "(tol=" in (ev.fail_reason or ""):
        fired.insert(0, "reference")
    return fired or ["other"]


def evaluate_mutant(job: dict) -> dict:
    """One mutant's record (run in a pool's process or in this one)."""
    import mlxsci

    t0 = time.perf_counter()
    try:
        ev = mlxsci.evaluate(
            job["task"],
            job["text"],
            backend="sim",
            dialect=job["dialect"],
            sizes=size_list(job["task"], job["sizes"]),
            timeout=job["timeout"],
        )
    except Exception as exc:  # the harness itself failed: say so, do not count it
        return {"status": "error", "checks": [], "reason": f"{type(exc).__name__}: {exc}"[:400]}
    checks: list[str] = []
    if not ev.compile_ok:
        status = "stillborn"
    elif ev.correct:
        status = "survived"
    else:
        status, checks = "killed", checks_fired(ev)
    return {
        "status": status,
        "checks": checks,
        "reason": (ev.fail_reason or "")[:400],
        "sizes_run": [s.label for s in ev.sizes],
        "seconds": round(time.perf_counter() - t0, 2),
    }


def evaluate_all(jobs_list: list[dict], n: int):
    """(job, record) for every job, in order, `n` at a time in spawned
    processes. A process that dies (a crash in the parent side of an
    evaluation) breaks the pool: the unfinished jobs go to a new one, and a
    job that was in flight twice when that happened is recorded as an error."""
    pending, tries = list(jobs_list), [0] * len(jobs_list)
    index = {id(j): i for i, j in enumerate(jobs_list)}
    while pending:
        with ProcessPoolExecutor(max(n, 1), mp_context=get_context("spawn")) as pool:
            futures = [pool.submit(evaluate_mutant, job) for job in pending]
            done = 0
            try:
                for job, fut in zip(pending, futures):
                    yield job, fut.result()
                    done += 1
            except BrokenProcessPool:
                pass
        pending = pending[done:]
        for job in pending[: max(n, 1)]:  # the ones that were running
            tries[index[id(job)]] += 1
        while pending and tries[index[id(pending[0])]] >= 2:
            why = "its evaluation process died twice (not a verdict of the checks)"
            yield pending.pop(0), {"status": "error", "checks": [], "reason": why}


def load_equivalents(path: Path = EQUIVALENTS) -> dict:
    return json.loads(path.read_text()) if path.is_file() else {}


def judge(records: list[dict], equivalents: dict) -> None:
    """Label survivors listed in the equivalents file (when its entry names the
    same change: a seed edited since makes the entry stale, never a pass). An
    entry of kind "gap" explains a survivor the checks should kill: it stays a
    survivor, with the gap and its fix as its reason."""
    for r in records:
        entry = equivalents.get(r["id"])
        if r["status"] == "survived":
            if entry and entry.get("change") == r["description"]:
                kind = entry.get("kind", "code")
                if kind == "gap":
                    r["why"] = f"gap: {entry['reason']}"
                else:
                    r["status"], r["why"] = "equivalent", f"equivalent ({kind}): {entry['reason']}"
            elif entry:
                r["why"] = "unexplained: the equivalents entry describes another change"
            else:
                r["why"] = "unexplained"
        elif entry and r["status"] == "killed" and entry.get("kind") != "gap":
            r["note"] = "listed in mutation_equivalents.json but killed: drop the entry"


def tally(records: list[dict]) -> dict:
    c = Counter(r["status"] for r in records)
    compiled = c["killed"] + c["survived"] + c["equivalent"]
    scored = compiled - c["equivalent"]
    return {
        "mutants": compiled,
        "stillborn": c["stillborn"],
        "killed": c["killed"],
        "equivalent": c["equivalent"],
        "survived": c["survived"],
        "errors": c["error"],
        "kill_percent": round(100.0 * c["killed"] / scored, 1) if scored else None,
    }


def _git(*args: str) -> str:
    run = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
    return run.stdout.strip()


def machine() -> str:
    cpu = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"


def summary(records: list[dict], sizes: str) -> dict:
    per_task = []
    for task in sorted({r["task"] for r in records}):
        for dialect in DIALECTS:
            rs = [r for r in records if r["task"] == task and r["dialect"] == dialect]
            if rs:
                per_task.append({"task": task, "dialect": dialect, **tally(rs)})
    per_op = [
        {"operator": op, **tally([r for r in records if r["operator"] == op])}
        for op in OPERATORS
        if any(r["operator"] == op for r in records)
    ]
    killed = [r for r in records if r["status"] == "killed"]
    checks = Counter(c for r in killed for c in r["checks"])
    alone = Counter(r["checks"][0] for r in killed if len(r["checks"]) == 1)
    dirty = _git("status", "--porcelain", "--", "mlxsci", "tasks", "reference")
    return {
        **tally(records),
        "tasks": per_task,
        "operators": per_op,
        "checks": [
            {"check": k, "kills": n, "sole_check": alone[k]} for k, n in checks.most_common()
        ],
        "survivors": [
            {"id": r["id"], "description": r["description"], "reason": r.get("why", "unexplained")}
            for r in records
            if r["status"] in ("survived", "equivalent")
        ],
        "stillborn_mutants": [
            {"id": r["id"], "description": r["description"], "reason": r["reason"]}
            for r in records
            if r["status"] == "stillborn"
        ],
        "sizes": sizes,
        "backend": "sim",
        "machine": machine(),
        "mlxsci_commit": _git("rev-parse", "HEAD") + ("+dirty" if dirty else ""),
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "records": records,
    }


COLUMNS = ["mutants", "stillborn", "killed", "equivalent", "survived", "kill_percent"]


def markdown(s: dict) -> str:
    head = ["task", "dialect", *COLUMNS[:-1], "kill %"]
    rows = [[t["task"], t["dialect"], *(t[c] for c in COLUMNS)] for t in s["tasks"]]
    rows.append(["**total**", "", *(s[c] for c in COLUMNS)])
    ops = [[o["operator"], *(o[c] for c in COLUMNS)] for o in s["operators"]]
    checks = [[c["check"], c["kills"], c["sole_check"]] for c in s["checks"]]
    lines = [
        "# Mutation score of the checks (simulator)",
        "",
        f"{s['date']}, mlxsci {s['mlxsci_commit']}, sizes `{s['sizes']}`, {s['machine']}.",
        "Generated by `python bench/mutation_score.py`; kill % = killed / (mutants - equivalent);",
        "stillborn mutants (no compile) are not counted as mutants.",
        "",
        tabulate(rows, head, tablefmt="github"),
        "",
        "## By operator",
        "",
        tabulate(ops, ["operator", *COLUMNS[:-1], "kill %"], tablefmt="github"),
        "",
        "## Which checks kill (a mutant may fail several)",
        "",
        tabulate(checks, ["check", "kills", "the only check that fired"], tablefmt="github"),
        "",
        "## Survivors",
        "",
    ]
    for r in s["survivors"]:
        lines.append(f"- `{r['id']}`: {r['description']}. **{r['reason']}**")
    if not s["survivors"]:
        lines.append("none")
    if s.get("seed_failures") or s.get("errors"):
        lines += ["", "## Notes on this run", ""]
        lines += [f"- {why}" for why in s.get("seed_failures", [])]
        if s.get("errors"):
            lines.append(f"- {s['errors']} mutant(s) not evaluated (seed failures, harness errors)")
    return "\n".join(lines) + "\n"


def _parse_list(value: str | None, allowed, what: str) -> list[str]:
    if not value:
        return list(allowed)
    items = [v.strip() for v in value.split(",") if v.strip()]
    unknown = [v for v in items if v not in allowed]
    if unknown:
        raise click.BadParameter(
            f"unknown {what}: {', '.join(unknown)} (known: {', '.join(allowed)})"
        )
    return items


def find_mutant(ident: str) -> tuple[Mutant, str]:
    task, dialect, operator, _site = ident.split("/", 3)
    seed = seed_info(task, dialect)
    for m in mutants(seed, [operator], max_sites=10**6):
        if m.ident(task, dialect) == ident:
            return m, seed.text
    raise click.ClickException(f"no mutant {ident} (at any number of sites)")


@click.command(help=__doc__.split("\n\n")[2] if __doc__ else None)
@click.option("--tasks", default=None, help="Comma-separated tasks (default: all).")
@click.option("--dialects", default=None, help="metal,cuda (default: both).")
@click.option("--operators", default=None, help="Comma-separated operators (default: all).")
@click.option("--sizes", default="smoke+first", show_default=True,
              help="A size set, or smoke+first: smoke, then the first in-dist size "
              "for the mutants smoke lets through (but SMOKE_ONLY tasks).")  # fmt: skip
@click.option("--max-sites", default=3, show_default=True, help="Mutants per operator per seed.")
@click.option("--jobs", default=1, show_default=True, help="Mutants evaluated at once.")
@click.option("--timeout", default=60.0, show_default=True, help="Seconds per size.")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=None,
              help="Folder for mutation_score.md/.json (default bench/results/sim).")  # fmt: skip
@click.option("--only", default=None,
              help="Only these mutant ids (comma-separated), or the survivors of a results JSON.")  # fmt: skip
@click.option("--show", default=None, help="Print one mutant's diff (its id) and exit.")
@click.option("--relabel", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="Re-read the equivalents for a results JSON's records, "
              "rewrite its .json and .md (no evaluation) and exit.")  # fmt: skip
def main(tasks, dialects, operators, sizes, max_sites, jobs, timeout, out, only, show, relabel):
    if relabel:
        old = json.loads(relabel.read_text())
        records = old["records"]
        for r in records:
            r.pop("why", None), r.pop("note", None)
            if r["status"] == "equivalent":
                r["status"] = "survived"
        judge(records, load_equivalents())
        s = {**summary(records, old["sizes"]), "seed_failures": old.get("seed_failures", [])}
        for name in ("machine", "mlxsci_commit", "date"):  # of the run, not of the relabel
            s[name] = old[name]
        write_results(s, relabel.parent, relabel.stem)
        print(markdown(s))
        return
    if show:
        m, seed_text = find_mutant(show)
        print(m.description)
        diff = difflib.unified_diff(seed_text.splitlines(), m.text.splitlines(), lineterm="")
        print("\n".join(diff))
        return
    task_list = _parse_list(tasks, all_tasks(), "task")
    dialect_list = _parse_list(dialects, DIALECTS, "dialect")
    op_list = _parse_list(operators, list(OPERATORS), "operator")
    subset = bool(tasks or dialects or operators or only)
    wanted = None
    if only and Path(only).is_file():
        wanted = {r["id"] for r in json.loads(Path(only).read_text())["survivors"]}
    elif only:
        wanted = {i.strip() for i in only.split(",") if i.strip()}
    jobs_list = []
    for task in task_list:
        for dialect in dialect_list:
            seed = seed_info(task, dialect)
            seen = set()
            for m in mutants(seed, op_list, max_sites):
                if m.text in seen or (wanted is not None and m.ident(task, dialect) not in wanted):
                    continue  # another operator made the same text
                seen.add(m.text)
                jobs_list.append(
                    {
                        "id": m.ident(task, dialect),
                        "task": task,
                        "dialect": dialect,
                        "operator": m.operator,
                        "site": m.site,
                        "description": m.description,
                        "text": m.text,
                        "sizes": sizes,
                        "timeout": timeout,
                    }
                )
    say = lambda msg: print(msg, file=sys.stderr, flush=True)  # noqa: E731
    say(f"{len(jobs_list)} mutants of {len(task_list)} task(s) x {len(dialect_list)} dialect(s)")
    records = []
    t0 = time.perf_counter()

    def record(job: dict, res: dict) -> None:
        rec = {k: job[k] for k in ("id", "task", "dialect", "operator", "site", "description")}
        rec.update(res)
        records.append(rec)
        checks = ",".join(res["checks"])
        say(
            f"[{len(records)}/{len(jobs_list)} {time.perf_counter() - t0:.0f}s] {rec['id']}: "
            f"{res['status']}{f' ({checks})' if checks else ''}"
        )

    # The seeds first: a mutant of a seed that fails at these sizes says
    # nothing about the checks.
    pairs = sorted({(j["task"], j["dialect"]) for j in jobs_list})
    seed_jobs = [
        {"task": t, "dialect": d, "text": seed_info(t, d).text, "sizes": sizes, "timeout": timeout}
        for t, d in pairs
    ]
    failing, notes = {}, []
    for job, res in evaluate_all(seed_jobs, jobs):
        if res["status"] == "survived":
            continue
        key = (job["task"], job["dialect"])
        note = f"{key[0]}/{key[1]}: the seed fails at {sizes}: {res['reason'][:300]}"
        if sizes != "smoke" and evaluate_mutant({**job, "sizes": "smoke"})["status"] == "survived":
            notes.append(note + "; its mutants ran at the smoke sizes only")
            for j in jobs_list:
                if (j["task"], j["dialect"]) == key:
                    j["sizes"] = "smoke"
        else:
            failing[key] = f"the seed itself fails: {res['reason']}"
            notes.append(note + "; its mutants were not run")
        say(notes[-1])
    for job in jobs_list:
        why = failing.get((job["task"], job["dialect"]))
        if why:
            record(job, {"status": "error", "checks": [], "reason": why[:400]})
    runnable = [j for j in jobs_list if (j["task"], j["dialect"]) not in failing]
    for job, res in evaluate_all(runnable, jobs):
        record(job, res)
    judge(records, load_equivalents())
    s = summary(records, sizes)
    s["seed_failures"] = notes
    folder = out or ROOT / "bench" / "results" / "sim"
    stem = "mutation_score_subset" if subset and out is None else "mutation_score"
    write_results(s, folder, stem)
    print(markdown(s))
    say(f"wrote {folder / stem}.md and .json in {time.perf_counter() - t0:.0f} s")


def write_results(s: dict, folder: Path, stem: str = "mutation_score") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{stem}.json").write_text(json.dumps(s, indent=1) + "\n")
    (folder / f"{stem}.md").write_text(markdown(s))


if __name__ == "__main__":
    main()
