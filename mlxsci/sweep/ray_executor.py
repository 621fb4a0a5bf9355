"""The Ray executor of `python -m mlxsci.sweep --executor ray` (`pip install 'mlxsci[ray]'`).

Each search is one Ray task (mlxsci.sweep.runs.run_one in a Ray worker) whose
resource request fits the backend:

    cuda   num_gpus=1 (and num_cpus=1): one GPU per run
    metal  the custom resource apple_gpu=1 (and num_cpus=1). Ray does not know
           Apple GPUs: declare one on each Mac node, `ray start --resources
           '{"apple_gpu": 1}'`; a Ray instance this executor starts on a Mac
           declares it itself
    sim    num_cpus=1

The driver keeps no more runs in flight than the cluster has room for (its
total of that resource, looked up again before each start, so nodes that
join are used): a run's share of the cost budget is given when it really
starts, and what a finished run leaves goes to the next.

Where runs write. By default (shared filesystem) every node sees the sweep
folder at the same absolute path (one machine, or a network filesystem): each
task writes its run directory there as it goes, as the local executor does,
so a lost worker or a killed sweep leaves every finished iteration on disk.
With ship_results (--ship-results) the nodes need no shared filesystem: the
task takes the run's files so far with it, runs in a temporary folder on its
node and returns every file of the run, which the driver writes into the
sweep folder; a lost worker then loses the iterations it made since it
started (redone when the sweep runs again).

Address: None starts a Ray instance on this machine for the sweep and stops it
after (or uses the one this process already started, e.g. with ray.init in a
notebook or a test, and leaves it running); "auto" joins the cluster this
machine is a node of; HOST:PORT a cluster's head, from one of its nodes;
ray://HOST:PORT through Ray Client, from outside the cluster (ray[client], in
mlxsci[ray]).

A task whose worker or node dies is retried by Ray (MAX_RETRIES times); the
retry resumes the run directory the lost worker began (shared filesystem).
A shipped task is not retried (see MAX_RETRIES): the run is left unfinished,
its whole allotment counted spent, and the next sweep resumes it from the
files that last came back. One call in flight when a worker dies may be
billed by its provider without being recorded (the search saves a call's
cost when its answer arrives), so a lost worker can take the sweep past its
cap by at most that one call.
Every node needs mlxsci installed, and the environment of its Ray processes
must hold what the models need (ANTHROPIC_API_KEY, ... set before `ray
start`): keys are not sent through Ray.
"""

from __future__ import annotations

import copy
import logging
import tempfile
from pathlib import Path

from mlxsci.backends import BACKENDS
from mlxsci.storage.cache import atomic_write_bytes
from mlxsci.storage.faults import EnvironmentFault
from mlxsci.storage.locks import LOCK_NAME, Lock, LockHeld
from mlxsci.sweep.budget import spent_by_run
from mlxsci.sweep.runs import is_finished, left_to_holder, lock_run, run_one, run_status

# Re-runs of a task whose worker or node died, each resuming the run from the
# shared folder. Shipped runs get none: what a lost task spent never comes
# back, so its whole allotment is counted spent and the run waits for the
# next sweep, rather than a retry spending the allotment a second time.
MAX_RETRIES = 2
# Written last when shipped files land: until they are, the run reads as unfinished.
WRITTEN_LAST = ("history.jsonl", "summary.json")


class RayUnavailable(Exception):
    """Ray is not installed, or the cluster cannot be reached or cannot run the runs."""


def require_ray():
    try:
        import ray
    except ImportError:
        raise RayUnavailable(
            "--executor ray needs Ray, an optional extra: pip install "
            "'mlxsci[ray]' (or use --executor local)"
        ) from None
    return ray


def resources_for(backend: str) -> tuple[dict, str]:
    """(Ray task options, the resource that limits how many run at once)."""
    info = BACKENDS.get(backend, BACKENDS["sim"])  # auto, remote: one CPU, as on the simulator
    return copy.deepcopy(info.ray_task), info.ray_limit


# -- shipping a run directory's files --------------------------------------------


def take_files(run_dir: Path) -> dict:
    """{relative path: bytes} of every file under run_dir ({} when there is
    none) but its lock file: a lock is no record, and one written over by
    put_files would be a new file that the holder of the old does not hold."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        return {}
    return {
        p.relative_to(run_dir).as_posix(): p.read_bytes()
        for p in sorted(run_dir.rglob("*"))
        if p.is_file() and p.relative_to(run_dir).as_posix() != LOCK_NAME
    }


def put_files(run_dir: Path, files: dict) -> None:
    """Write shipped files under run_dir, each atomically, history.jsonl and
    summary.json last: a driver killed halfway leaves a run that resumes."""
    order = sorted(n for n in files if n not in WRITTEN_LAST)
    for name in order + [n for n in WRITTEN_LAST if n in files]:
        path = Path(run_dir) / name
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, files[name])


def run_shipped(spec: dict, files: dict) -> dict:
    """run_one on a node without the sweep folder: in a temporary folder that
    starts with `files` (the run so far); every file of the run comes back."""
    with tempfile.TemporaryDirectory(prefix="mlxsci-sweep-") as tmp:
        run_dir = Path(tmp) / spec["name"]
        if files:
            put_files(run_dir, files)
        result = run_one(dict(spec, run_dir=str(run_dir)))
        result["files"] = take_files(run_dir)
    return result


# -- the executor -------------------------------------------------------------------


class RayExecutor:
    """Runs each search as a Ray task; see the module docstring."""

    name = "ray"

    def __init__(
        self, address: str | None = None, ship_results: bool = False, backend: str = "auto"
    ):
        from mlxsci.backends import resolve_backend_name

        self.ray = require_ray()
        self.backend = resolve_backend_name(backend)
        self.options, self.limiting = resources_for(self.backend)
        self.ship_results = ship_results
        self.held: dict[str, Lock] = {}  # run name -> its lock, held here while shipped
        self.started_here = False
        self.connect(address)
        # Registered once; each submit names its run (Ray's dashboard and logs).
        self.task = self.ray.remote(run_shipped if ship_results else run_one)
        if self.capacity() < 1:
            self.close()
            raise RayUnavailable(self.no_room_message())

    def connect(self, address: str | None) -> None:
        ray = self.ray
        if ray.is_initialized():  # a Ray this process started: use it, leave it running
            return
        kwargs: dict[str, object] = {"logging_level": logging.WARNING}
        if address is None:
            kwargs["include_dashboard"] = False
            # A resource the runs request that Ray does not detect (this Mac's
            # GPU): the local Ray declares one of it.
            custom = self.options.get("resources")
            if custom:
                kwargs["resources"] = dict(custom)
        else:
            kwargs["address"] = address
        try:
            ray.init(**kwargs)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            where = (
                "start Ray on this machine"
                if address is None
                else f"connect to the Ray cluster at {address}"
            )
            raise RayUnavailable(
                f"--executor ray: cannot {where}: {' '.join(str(exc).split())} "
                "(check --address: auto, HOST:PORT or ray://HOST:PORT; "
                "ray:// needs pip install 'ray[client]')"
            ) from None
        self.started_here = True

    def capacity(self) -> int:
        """How many runs the cluster can hold at once."""
        total = self.ray.cluster_resources().get(self.limiting, 0.0)
        per_run = {"CPU": self.options.get("num_cpus", 1), "GPU": 1, "apple_gpu": 1}
        return int(total // per_run[self.limiting])

    def no_room_message(self) -> str:
        if self.limiting == "apple_gpu":
            return (
                "--executor ray: no node of the Ray cluster declares the resource "
                "apple_gpu: start each Mac node with ray start --resources "
                "'{\"apple_gpu\": 1}' (or use --backend sim)"
            )
        return (
            f"--executor ray: the Ray cluster has no {self.limiting} for a "
            f"{self.backend} run: add nodes that have one, or pick another --backend"
        )

    def submit(self, spec: dict):
        task = self.task.options(
            **self.options,
            name=f"mlxsci-sweep {spec['name']}",
            max_retries=0 if self.ship_results else MAX_RETRIES,
        )
        if self.ship_results:
            return task.remote(spec, take_files(Path(spec["run_dir"])))
        return task.remote(spec)

    def hold(self, spec: dict) -> dict | None:
        """Shipped, a run executes where the sweep folder is not, so the
        driver holds the run's lock (mlxsci/storage/locks.py) from before its files
        leave until they land (collect). None when it holds it now; else the
        run's result: another process holds it (left to it), or finished it."""
        if not self.ship_results:
            return None  # the task takes the lock where it runs (mlxsci.sweep.runs.run_one)
        run_dir, iterations = Path(spec["run_dir"]), spec["search"]["iterations"]
        try:
            lock = lock_run(run_dir, f"{spec['name']} (shipped to a Ray node)")
        except LockHeld as exc:
            return dict(left_to_holder(exc), cost_usd=spent_by_run(run_dir), stopped=None)
        except EnvironmentFault as exc:  # the sweep folder cannot be written: no run can go on
            return {
                "status": run_status(run_dir, iterations),
                "action": "not started",
                "cost_usd": spent_by_run(run_dir),
                "error": f"stopped by the machine: {exc}",
                "machine_fault": True,
            }
        if is_finished(run_dir, iterations):  # by another sweep, since this one looked
            lock.release()
            return {"status": "finished", "action": "skipped", "cost_usd": spent_by_run(run_dir)}
        self.held[spec["name"]] = lock
        return None

    def collect(self, ref, spec: dict) -> dict:
        """The run's result; its files written into the sweep folder when shipped."""
        try:
            try:
                result = self.ray.get(ref)
            except self.ray.exceptions.RayError as exc:  # its worker or node lost, retries spent
                return self.lost(spec, exc)
            if self.ship_results:
                put_files(Path(spec["run_dir"]), result.pop("files"))
            return result
        finally:
            lock = self.held.pop(spec["name"], None)
            if lock is not None:
                lock.release()

    def lost(self, spec: dict, exc: Exception) -> dict:
        """A run whose task could not finish. With a shared filesystem its
        directory tells what it spent and where it stopped; shipped, its whole
        allotment is counted spent (cost_usd None)."""
        run_dir = Path(spec["run_dir"])
        reason = " ".join(str(exc).split())[:300]
        shared = not self.ship_results
        return {
            "status": run_status(run_dir, spec["search"]["iterations"]) if shared else "unfinished",
            "action": "lost",
            "cost_usd": spent_by_run(run_dir) if shared else None,
            "stopped": None,
            "error": f"the Ray task was lost ({type(exc).__name__}: {reason}); run the "
            "sweep again to resume it",
        }

    def run(self, driver) -> None:
        in_flight: dict = {}
        while True:
            # With no room left (nodes gone) one run is still queued: Ray holds it
            # until a node that fits joins, rather than the sweep spinning.
            room = max(self.capacity() - len(in_flight), 0 if in_flight else 1)
            for spec in driver.start(slots=room, running=len(in_flight)):
                settled = self.hold(spec)
                if settled is not None:
                    driver.finish(spec, settled)
                else:
                    in_flight[self.submit(spec)] = spec
            if not in_flight:
                return
            ready, _ = self.ray.wait(list(in_flight), num_returns=1)
            for ref in ready:
                spec = in_flight.pop(ref)
                driver.finish(spec, self.collect(ref, spec))

    def close(self) -> None:
        if self.started_here and self.ray.is_initialized():
            self.ray.shutdown()
        self.started_here = False
