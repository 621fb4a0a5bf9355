"""The runs of a sweep, whichever executor runs them (mlxsci.sweep).

Names and order (run_name, Job, plan), where a run stands (run_status),
running one (run_one: in the sweep's process or in a Ray worker), and the
driver's bookkeeping between runs (Driver: the queue, the cost budget,
index.json). LocalExecutor runs the runs one after another in this process;
mlxsci.sweep.ray_executor.RayExecutor runs them as Ray tasks.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path

from mlxsci.storage import locks
from mlxsci.storage.cache import atomic_write_json
from mlxsci.storage.faults import EnvironmentFault, fault_of
from mlxsci.storage.locks import Lock, LockHeld
from mlxsci.storage.names import safe_name
from mlxsci.sweep.budget import CostBudget, spent_by_run

# In the sweep folder: held while a sweep writes index.json (Driver.write).
INDEX_LOCK = ".index.lock"
# How a run left to the process holding it is noted in index.json (its error).
LEFT_TO_HOLDER = "left to its holder: "


def run_name(task: str, model: str, repeat: int = 1) -> str:
    safe = safe_name(model, "model")
    return f"{task}_{safe}" if repeat == 1 else f"{task}_{safe}_r{repeat}"


@dataclass(frozen=True)
class Job:
    """One run of a sweep: a task, a model and which repeat."""

    task: str
    model: str
    repeat: int = 1

    @property
    def name(self) -> str:
        return run_name(self.task, self.model, self.repeat)

    @property
    def seed(self) -> int:
        return self.repeat - 1


def plan(tasks: list[str], models: list[str], repeats: int = 1) -> list[Job]:
    """Every run of the sweep, repeat by repeat (see the module docstring)."""
    return [Job(t, m, k) for k in range(1, repeats + 1) for t in tasks for m in models]


def _summary(run_dir: Path) -> dict | None:
    try:
        return json.loads((run_dir / "summary.json").read_text())
    except (FileNotFoundError, NotADirectoryError, json.JSONDecodeError):
        return None


def verdict_note(run_dir: Path) -> str:
    """What a finished run came to, for the sweep's line on it: its outcome
    and its best's transfer grade ('' when it wrote no summary)."""
    s = _summary(run_dir) or {}
    grade = (s.get("transfer") or {}).get("grade") if isinstance(s.get("transfer"), dict) else None
    parts = [f"outcome {s['outcome']}"] if isinstance(s.get("outcome"), str) else []
    parts += [f"transfer {grade}"] if isinstance(grade, str) else []
    return f", {', '.join(parts)}" if parts else ""


def is_finished(run_dir: Path, iterations: int) -> bool:
    s = _summary(run_dir)
    if s is None:
        return False
    ran_dry = "nothing left to propose" in (s.get("stopped") or "")
    return (s.get("iterations") or 0) >= iterations or ran_dry


def gpu_clash(run_dir: Path, sim_gpu: str | None) -> str | None:
    """Why a run already in the sweep's folder cannot join a sweep on the
    modelled GPU `sim_gpu` (--sim-gpu): its run.json says it was timed on
    another, and times on two GPUs do not compare. None when it can (no GPU
    named, no run yet, or one from before GPUs were modelled: its search
    judges that on resume)."""
    if sim_gpu is None:
        return None
    try:
        recorded = json.loads((run_dir / "run.json").read_text()).get("sim_gpu")
    except (OSError, ValueError, AttributeError):
        return None
    if recorded is None or recorded == sim_gpu:
        return None
    return f"timed on the modelled {recorded}, not {sim_gpu}: sweep {sim_gpu} into another --out"


def run_status(run_dir: Path, iterations: int) -> str:
    """finished, stopped (a summary short of `iterations`) or unfinished."""
    if is_finished(run_dir, iterations):
        return "finished"
    return "unfinished" if _summary(run_dir) is None else "stopped"


def write_index(out: Path, entries: list[dict]) -> None:
    atomic_write_json(out / "index.json", {"runs": entries})


# -- one run, wherever it runs ----------------------------------------------------


def _prefixed_echo(name: str):
    """Console lines of a run away from the sweep's process (a Ray worker), named."""

    def echo(msg: str) -> None:
        print(f"{name}: {msg}", file=sys.stderr, flush=True)

    return echo


def lock_run(run_dir: Path, name: str) -> Lock:
    """The run's lock (made with its folder): LockHeld while another process
    (a sweep sharing the folder, a search) holds it."""
    from mlxsci.search.run_lock import take

    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise (fault_of(exc) or exc) from exc
    return take(run_dir, f"sweep run {name}")


def run_one(spec: dict, echo=None) -> dict:
    """Run or resume the search `spec` describes (run_spec), here: in the
    sweep's process or in a Ray worker. Never raises. Returns status, action,
    cost_usd (all sessions), stopped, and error when the search raised.

    The run's lock is taken here, where the run executes, and what to do is
    decided under it: a run another process holds is left to it (status
    unfinished, action "in use"); one another sweep finished since this sweep
    looked is not run again (action "skipped"). Decided here, not by the
    driver, also because a Ray task retried after its worker was lost resumes
    what the lost one began."""
    from mlxsci.search import run

    run_dir = Path(spec["run_dir"])
    iterations = spec["search"]["iterations"]
    echo = echo or _prefixed_echo(spec["name"])
    result: dict[str, object] = {"action": "ran", "error": None}
    lock = None
    try:
        lock = lock_run(run_dir, spec["name"])
        # A resume takes the options its run.json fixes and those given anew.
        where = {"resume" if (run_dir / "run.json").exists() else "out": run_dir}
        if is_finished(run_dir, iterations):
            result["action"] = "skipped"
        else:
            result["action"] = "resumed" if "resume" in where else "ran"
            run(**spec["search"], **where, quiet=spec["quiet"], echo=echo, lock=lock)
        result["status"] = run_status(run_dir, iterations)
    except LockHeld as exc:  # another sweep's or a search's: left to it, written nothing
        result.update(left_to_holder(exc))
    except EnvironmentFault as exc:  # the machine's, not the run's: unfinished, to resume
        result.update(
            status=run_status(run_dir, iterations),
            error=f"stopped by the machine: {exc}",
            machine_fault=True,
        )
    except Exception as exc:  # noqa: BLE001 - one failed search must not end a sweep
        result.update(status="failed", error=f"{type(exc).__name__}: {exc}")
    finally:
        if lock is not None:
            lock.release()
    result["cost_usd"] = spent_by_run(run_dir)
    result["stopped"] = (_summary(run_dir) or {}).get("stopped")
    return result


def left_to_holder(refusal: LockHeld) -> dict:
    """What a sweep records of a run another process holds (Driver.refresh
    follows it on disk from then on)."""
    return {"status": "unfinished", "action": "in use", "error": f"{LEFT_TO_HOLDER}{refusal}"}


def model_of(spec: dict) -> str:
    return spec["search"]["model"]


def free_model(model: str) -> bool:
    """A model whose runs make no paid calls: they need no share of a cost cap."""
    return model == "autotune" or model.startswith("replay:")


# What a sweep passes on to each mlxsci.search.run besides the search's options.
SESSION_KEYWORDS = ("prices", "start")


def run_spec(job: Job, out: Path, iterations: int, *, quiet: bool, options: dict) -> dict:
    """What a run needs to know, as plain data (it travels to Ray workers):
    its name and folder, and `search`: the keywords of its mlxsci.search.run.
    Those are the search's options by the names of their record
    (mlxsci.search.options.SearchOptions), each one left out at its default:
    `options` (those every run of the sweep shares: backend, strategy, accept,
    ...; TypeError for a name that is no option), the job's task, model and
    seed, the sweep's iterations and the run's cost cap (the driver's, set
    when it starts); with the SESSION_KEYWORDS among `options` (prices)."""
    from mlxsci.search.options import given_options

    shared = {k: v for k, v in options.items() if k not in SESSION_KEYWORDS}
    given = given_options(
        **shared,
        task=job.task,
        model=job.model,
        seed=job.seed,
        iterations=iterations,
        max_cost=None,
    )
    session = {k: v for k, v in options.items() if k in SESSION_KEYWORDS}
    return {
        "name": job.name,
        "run_dir": str((out / job.name).resolve()),
        "quiet": quiet,
        "search": {**given, **session},
    }


# -- the driver: queue, budget, index ------------------------------------------


class Driver:
    """The sweep's bookkeeping between runs, whichever executor runs them:
    which runs wait, the cost budget, and index.json after every change."""

    def __init__(
        self,
        out: Path,
        entries: list[dict],
        waiting: list[dict],
        budget: CostBudget,
        echo,
        iterations: int,
    ):
        self.out = out
        self.iterations = iterations  # what a finished run of this sweep has
        self.entries = {e["path"]: e for e in entries}
        self.order = [e["path"] for e in entries]
        self.waiting = waiting  # specs, in plan order
        self.prior: dict[str, float] = {}  # run name -> spent before it started now
        self.budget = budget
        self.echo = echo
        self.halted: str | None = None  # why the machine stopped the sweep
        self.write()

    def write(self) -> None:
        """index.json, as the runs are now. Another sweep on the folder writes
        it too: each takes the index lock, reads from disk the runs it is not
        running itself (refresh) and replaces the file whole, so whichever
        writes last writes what the disk holds."""
        index_lock = locks.acquire_blocking(self.out / INDEX_LOCK, "writing index.json")
        try:
            self.refresh()
            write_index(self.out, [self.entries[p] for p in self.order])
        finally:
            index_lock.release()

    def refresh(self) -> None:
        """The runs this sweep has not run, as they are on disk: one waiting
        here, or left to the process that held it ("in use"), may have been
        run by another sweep since."""
        for entry in self.entries.values():
            if entry.get("action") not in ("pending", "in use", "not started"):
                continue
            run_dir = self.out / entry["path"]
            entry["status"] = run_status(run_dir, self.iterations)
            if entry["action"] != "in use":
                continue
            entry["cost_usd"] = spent_by_run(run_dir)
            if locks.is_held(run_dir / locks.LOCK_NAME):
                entry["status"] = "unfinished"  # whatever it was: its holder is at it
            elif entry.get("error", "").startswith(LEFT_TO_HOLDER):
                entry.pop("error")  # the holder is gone; the disk says the rest

    def start(self, slots: int, running: int) -> list[dict]:
        """Up to `slots` runs to start now, each with its search cap. Once the
        budget is spent only runs that cannot spend (free_model) start;
        the others wait while runs in flight may give some back, and once
        nothing is in flight either they are marked not started."""
        if not self.waiting or slots <= 0 or self.halted:
            return []
        spent_out = self.budget.exhausted()
        starting = [s for s in self.waiting if not spent_out or free_model(model_of(s))][:slots]
        if not starting:
            if running == 0:
                self.give_up()
            return []
        chosen = {id(s) for s in starting}
        self.waiting = [s for s in self.waiting if id(s) not in chosen]
        paying = [s for s in starting if not free_model(model_of(s))]
        for spec in paying:
            self.prior[spec["name"]] = spent_by_run(Path(spec["run_dir"]))
        caps = self.budget.allot([(s["name"], self.prior[s["name"]]) for s in paying])
        for spec, cap_usd in zip(paying, caps):
            spec["search"]["max_cost"] = cap_usd
            if cap_usd is not None:
                self.entries[spec["name"]]["max_cost"] = cap_usd
        for spec in starting:
            search = spec["search"]
            cap = "" if search["max_cost"] is None else f", cap ${search['max_cost']:.4f}"
            self.echo(
                f"{spec['name']}: starting ({search['iterations']} iterations, seed "
                f"{search['seed']}{cap})"
            )
            self.entries[spec["name"]]["action"] = "running"
        self.write()
        return starting

    def give_up(self, why: str = "") -> None:
        """Mark every waiting run not started: the budget is spent, or `why`."""
        why = why or f"--max-cost reached ({self.budget.describe()})"
        for spec in self.waiting:
            self.echo(f"{spec['name']}: not started: {why}")
            status = run_status(Path(spec["run_dir"]), self.iterations)
            self.entries[spec["name"]].update(
                status=status, action="not started", error=f"{why}, before it started"
            )
        self.waiting = []
        self.write()

    def halt(self, name: str, error: str) -> None:
        """The machine stopped run `name` (no space, a worker that could not
        start): every other run would meet it too, so none starts; the runs in
        flight finish. The sweep run again once it is fixed resumes them all."""
        self.halted = f"{name}: {error}"
        self.give_up(f"the machine stopped {name}")
        for entry in self.entries.values():
            if entry.get("action") == "not started" and entry.get("status") != "finished":
                entry["machine_fault"] = True
        self.entries[name]["machine_fault"] = True
        self.write()

    def finish(self, spec: dict, result: dict) -> None:
        """Record a run's end; `result` from run_one (cost_usd None: unknown)."""
        name = spec["name"]
        self.budget.settle(name, self.prior.pop(name, 0.0), result.get("cost_usd"))
        entry = self.entries[name]
        entry.update(
            status=result["status"], action=result["action"], cost_usd=result.get("cost_usd")
        )
        if result.get("error"):
            entry["error"] = result["error"]
        else:
            entry.pop("error", None)
        if result.get("stopped"):
            entry["stopped"] = result["stopped"]
        note = (
            f": {result['error']}"
            if result.get("error")
            else (f" ({result['stopped']})" if result["status"] == "stopped" else "")
        )
        cost = "" if result.get("cost_usd") is None else f", ${result['cost_usd']:.4f}"
        judged = verdict_note(self.out / entry["path"]) if result["status"] != "unfinished" else ""
        self.echo(f"{name}: {result['status']}{cost}{judged}{note}")
        self.write()
        if result.get("machine_fault"):
            self.halt(name, result["error"])


class LocalExecutor:
    """Runs the searches one after another in this process."""

    name = "local"

    def run(self, driver: Driver) -> None:
        while True:
            started = driver.start(slots=1, running=0)
            if not started:
                return
            for spec in started:
                driver.finish(spec, run_one(spec, echo=driver.echo))

    def close(self) -> None:
        pass
