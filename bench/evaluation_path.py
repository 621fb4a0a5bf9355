"""How much work ONE evaluation does: counts to compare before and after a refactor.

Runs evaluate(TASK, backend="sim", size_set=SIZES, unsandboxed=True) on the task's
seed (after one uncounted run, so caches are warm; --cold: none) and counts, in the
parent and in each worker process it starts:

  parse, spec   calls of mlxsci.kernel.candidate.parse / to_kernel_spec
  launch, smem  calls of mlxsci.kernel.launch_limits.check_launch / check_shared_memory
  gen     variant text generations: the sim dialects' generate() (sim/dialects.py;
          called by sim/kernel.py, and by variants.serve_request, variants.py's
          only text-making function)
  served  variants.serve_request (a kernel the parent builds for a sandboxed worker)
  vlib    variants.variant_library (rules, rewrite, TU and build of generated text)
  build   sim/build.py assemble + build_library (the TU; the cached compile)
  load    sim/build.py load_library (dlopen of a built variant)
  workers, procs  subprocess.Popen calls with an mlxsci frame on the stack: workers
          (argv names mlxsci.worker or mlxsci.sandbox.boot), and any others
  jobs, status, breq  (parent side) job lines written to a worker's stdin
          (CandidateWorker.tell), status lines read back (wait_for_line: ready,
          done, build), build requests answered (answer_build)
  mods, pkgs  hop count: distinct mlxsci modules (and packages) whose Python
          functions were entered; module-level (import) code is not counted

How: a sys.setprofile/threading.setprofile hook counts 'call' events per (module
__name__, qualname) of every mlxsci function (a generator once, not per resume), so
calls through `from x import f` names count too; nothing in the project is edited.
Workers: a sitecustomize.py in a temporary folder installs the same hook; the parent
wraps mlxsci.evaluation.runner.minimal_worker_env (the worker's scrubbed environment)
to add that folder to PYTHONPATH and set MLXSCI_PATH_COUNT_DIR. A worker writes its
counts as JSON there after each mlxsci.worker.serve.run_one and at exit (so one ended
by os._exit or SIGKILL keeps those of its last finished size). Unsandboxed, so that
the worker may write there; such a worker builds its own kernels (served, breq: 0).

    python bench/evaluation_path.py [--tasks saxpy,heat2d] [--sizes smoke] [--json PATH]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
from collections import Counter
from pathlib import Path
from typing import Any

ENV = "MLXSCI_PATH_COUNT_DIR"
C, L = "mlxsci.kernel.candidate", "mlxsci.kernel.launch_limits"
B, V, D = (f"mlxsci.backends.sim.{m}" for m in ("build", "variants", "dialects"))
TARGETS = {
    "parse": [(C, "parse")],
    "spec": [(C, "to_kernel_spec")],
    "launch": [(L, "check_launch")],
    "smem": [(L, "check_shared_memory")],
    "gen": [(D, "_MetalDialect.generate"), (D, "_CudaDialect.generate")],
    "served": [(V, "serve_request")],
    "vlib": [(V, "variant_library")],
    "build": [(B, "build_library"), (B, "assemble")],
    "load": [(B, "load_library")],
}
PARENT_ONLY = ("jobs", "status", "breq")
GEN_FLAGS = 0x20 | 0x80 | 0x200  # CO_GENERATOR, CO_COROUTINE, CO_ASYNC_GENERATOR

calls: Counter = Counter()  # "module:qualname" -> calls
packages: dict[str, str] = {}  # module -> its package
spawns: list[dict] = []
crossings: Counter = Counter()
_first_resume: dict = {}
counting: dict = {"dir": None}  # the folder workers write into (None: workers not counted)


def _resume_offset(code) -> int | None:
    if code not in _first_resume:
        import dis

        ops = dis.get_instructions(code)
        _first_resume[code] = next((i.offset for i in ops if i.opname == "RESUME"), None)
    return _first_resume[code]


def _profile(frame, event, arg):
    mod = frame.f_globals.get("__name__") or ""
    if not (mod == "mlxsci" or mod.startswith("mlxsci.")) or event not in ("call", "return"):
        return
    code = frame.f_code
    if event == "return":
        if code.co_name == "run_one" and mod == "mlxsci.worker.serve":
            flush()  # after each job: a worker may end without running atexit
        return
    if code.co_name == "<module>":
        return
    if code.co_flags & GEN_FLAGS and frame.f_lasti != (_resume_offset(code) or frame.f_lasti):
        return  # a generator resumed, not called (3.11+: its first RESUME is its call)
    calls[f"{mod}:{getattr(code, 'co_qualname', code.co_name)}"] += 1
    if mod not in packages:
        packages[mod] = frame.f_globals.get("__package__") or mod.rpartition(".")[0]


def install() -> None:
    """The hook, and the count of subprocesses started from mlxsci code."""
    threading.setprofile(_profile)
    sys.setprofile(_profile)
    init = subprocess.Popen.__init__
    if getattr(init, "counted", False):
        return

    def counted_init(self, args, *a, **kw):
        f: Any = sys._getframe(1)
        while f is not None and not str(f.f_globals.get("__name__", "")).startswith("mlxsci."):
            f = f.f_back
        if f is not None:
            argv = [str(x) for x in (args if isinstance(args, (list, tuple)) else [args])]
            worker = any(x in ("mlxsci.worker", "mlxsci.sandbox.boot") for x in argv)
            spawns.append({"worker": worker, "by": f.f_globals["__name__"], "argv": argv[:4]})
        init(self, args, *a, **kw)

    setattr(counted_init, "counted", True)  # noqa: B010 - a function attribute
    setattr(subprocess.Popen, "__init__", counted_init)  # noqa: B010


def snapshot() -> dict:
    return {
        "pid": os.getpid(), "argv": sys.argv[:4], "calls": dict(calls), "packages": dict(packages),
        "spawns": list(spawns), "crossings": dict(crossings),
    }  # fmt: skip


def flush() -> None:
    folder = os.environ.get(ENV)
    if folder:
        tmp = Path(folder, f"{os.getpid()}.tmp")
        tmp.write_text(json.dumps(snapshot()))
        os.replace(tmp, tmp.with_suffix(".json"))


def child_setup() -> None:
    """What the sitecustomize runs in a worker (only where ENV is set)."""
    install()
    atexit.register(flush)


SITECUSTOMIZE = """import os
if os.environ.get({env!r}):
    import importlib.util
    _s = importlib.util.spec_from_file_location("_evaluation_path_counter", {path!r})
    _m = importlib.util.module_from_spec(_s)
    _s.loader.exec_module(_m)
    _m.child_setup()
"""


def wrap_parent(site_dir: Path) -> None:
    """Pass the counting to workers, and count crossings seen from the parent."""
    from mlxsci.evaluation import per_size_runner, runner

    def env_wrapper(original):
        def minimal_worker_env(backend):
            env = original(backend)
            if counting["dir"] is None:
                return env
            env[ENV] = str(counting["dir"])
            paths = [str(site_dir), env.get("PYTHONPATH")]
            env["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
            return env

        return minimal_worker_env

    for module in (runner, per_size_runner):  # the latter: a process per size (sanitizer)
        setattr(module, "minimal_worker_env", env_wrapper(module.minimal_worker_env))  # noqa: B010
    W = runner.CandidateWorker
    tell, wait, answer = W.tell, W.wait_for_line, W.answer_build

    def counted_tell(self, line, deadline):
        crossings["jobs" if line.startswith('{"dir"') else "build_replies"] += 1
        return tell(self, line, deadline)

    def counted_wait(self, deadline):
        said = wait(self, deadline)
        if said:  # a line (None: timeout, "": the pipe closed)
            crossings["status"] += 1
            crossings["status_" + said.split(" ")[0]] += 1
        return said

    def counted_answer(self, *a, **kw):
        crossings["breq"] += 1
        return answer(self, *a, **kw)

    for name, fn in (
        ("tell", counted_tell),
        ("wait_for_line", counted_wait),
        ("answer_build", counted_answer),
    ):
        setattr(W, name, fn)


def row(name: str, data: dict, parent: bool) -> dict:
    r: dict[str, Any] = {"process": name}
    for key, funcs in TARGETS.items():
        r[key] = sum(data["calls"].get(f"{m}:{q}", 0) for m, q in funcs)
    r["workers"] = sum(s["worker"] for s in data["spawns"])
    r["procs"] = len(data["spawns"]) - r["workers"]
    for key in PARENT_ONLY:
        r[key] = data["crossings"].get(key, 0) if parent else "-"
    mods = {k.split(":")[0] for k in data["calls"]}
    r["mods"], r["pkgs"] = len(mods), len({data["packages"][m] for m in mods})
    return r


def measure(task: str, sizes: str, base: Path, warm: bool, sandboxed: bool = False) -> dict:
    from mlxsci.evaluation.evaluator import evaluate

    if warm:
        evaluate(task, backend="sim", size_set=sizes, unsandboxed=not sandboxed)
    count_dir = base / task
    count_dir.mkdir()
    for store in (calls, packages, spawns, crossings):
        store.clear()
    counting["dir"] = count_dir
    install()
    try:
        ev = evaluate(task, backend="sim", size_set=sizes, unsandboxed=not sandboxed)
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
        counting["dir"] = None
    procs = [("parent", snapshot())]
    for path in sorted(count_dir.glob("*.json")):
        procs.append((f"worker {path.stem}", json.loads(path.read_text())))
    workers_counted = any(k.startswith("mlxsci.worker.") for _, d in procs[1:] for k in d["calls"])
    if not sandboxed and not workers_counted:
        raise SystemExit(f"{task}: no worker's counts came back ({count_dir})")
    rows = [row(name, d, name == "parent") for name, d in procs]
    total: dict[str, Any] = {"process": "total"}
    for key in [*TARGETS, "workers", "procs", *PARENT_ONLY]:
        total[key] = sum(r[key] for r in rows if r[key] != "-")
    modules: dict[str, str] = {}
    sides: dict[str, set] = {}  # module -> "P" (parent) and/or "W" (a worker)
    for name, d in procs:
        for k in d["calls"]:
            m = k.split(":")[0]
            modules[m] = d["packages"][m]
            sides.setdefault(m, set()).add("P" if name == "parent" else "W")
    total["mods"], total["pkgs"] = len(modules), len(set(modules.values()))
    grouped: dict[str, list] = {}
    for m, p in sorted(modules.items()):
        grouped.setdefault(p, []).append(f"{m}[{''.join(sorted(sides[m]))}]")
    return {
        "task": task, "sizes": sizes, "score": ev.score, "correct": ev.correct,
        "fail_reason": ev.fail_reason,
        "rows": rows + [total], "modules_by_package": grouped,
        "processes": [{"name": n, **d} for n, d in procs],
    }  # fmt: skip


def markdown(res: dict) -> str:
    keys = list(res["rows"][0])
    lines = [f"### {res['task']} ({res['sizes']}; correct={res['correct']}, S={res['score']})"]
    lines += [f"(failed: {res['fail_reason']})"] if res["fail_reason"] else []
    lines += ["", "| " + " | ".join(keys) + " |", "|" + "---|" * len(keys)]
    lines += ["| " + " | ".join(str(r[k]) for k in keys) + " |" for r in res["rows"]]
    lines += ["", "Modules entered, by package ([P]arent, [W]orker):"]
    for pkg, mods in res["modules_by_package"].items():
        lines.append(f"- {pkg} ({len(mods)}): " + ", ".join(m.rpartition(".")[2] for m in mods))
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--tasks", default="saxpy,heat2d")
    ap.add_argument("--sizes", default="smoke")
    ap.add_argument("--json", type=Path, help="write all counts (per function, per process) here")
    ap.add_argument("--cold", action="store_true", help="no uncounted warm-up evaluation first")
    ap.add_argument(
        "--sandboxed",
        action="store_true",
        help="run the worker in the OS sandbox, as a search does: the parent then builds its "
        "kernels (served, breq), and the worker's own counts cannot come back (parent only)",
    )
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="evaluation-path-") as tmp:
        site_dir = Path(tmp, "site")
        site_dir.mkdir()
        here = os.path.abspath(__file__)
        (site_dir / "sitecustomize.py").write_text(SITECUSTOMIZE.format(env=ENV, path=here))
        wrap_parent(site_dir)
        for task in filter(None, args.tasks.split(",")):
            results.append(measure(task, args.sizes, Path(tmp), not args.cold, args.sandboxed))
            print(markdown(results[-1]))
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str) + "\n")


if __name__ == "__main__":
    main()
