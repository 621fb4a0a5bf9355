"""--sim-gpu on every command that takes it (issue 36): an unknown GPU, or a
GPU named for a backend that times a real one, is a one-line usage error
(exit 2) said before anything runs; a GPU named reaches what the command
runs: the worker's job (its backend_options), the evaluation's JSON, the
roofline's backend, every search of a sweep, a transfer check's and a
re-score's evaluations. Nothing here runs a kernel: the worker, the
roofline and the searches are stand-ins."""

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from helpers import usage_error

import mlxsci.search
from mlxsci import eval as eval_cli
from mlxsci.backends import get_backend
from mlxsci.evaluation import evaluator
from mlxsci.import_metal_sci import __main__ as import_cli
from mlxsci.roofline import store as roofline
from mlxsci.roofline.ceilings import Roofline
from mlxsci.search import __main__ as search_cli
from mlxsci.search import loop
from mlxsci.storage.faults import EnvironmentFault
from mlxsci.sweep import sweeper as sweep
from mlxsci.transfer import __main__ as transfer_cli

ROOT = Path(__file__).resolve().parents[1]
SAXPY_SEED = ROOT / "tasks" / "saxpy" / "seed.metal"
VERBS = ("eval", "search", "sweep", "transfer", "import-metal-sci", "roofline")


def refuse(*args, **kwargs):
    raise AssertionError("a bad input reached what the command runs")


@pytest.fixture
def nothing_runs(monkeypatch):
    for module, name in (
        (eval_cli, "evaluate"),
        (loop, "evaluate"),
        (mlxsci.search, "run"),
        (transfer_cli, "evaluate"),
        (import_cli, "rescore"),
        (roofline, "load_or_measure"),
    ):
        monkeypatch.setattr(module, name, refuse)


def command(verb: str, tmp_path: Path) -> tuple:
    """The verb's click command and the arguments of a run, less --backend and --sim-gpu."""
    return {
        "eval": (eval_cli.main, ["saxpy"]),
        "search": (search_cli.main, ["--task", "saxpy", "--out", tmp_path / "run"]),
        "sweep": (
            sweep.main,
            ["--tasks", "saxpy", "--models", "autotune", "--iterations", "1", "--out", tmp_path],
        ),
        "transfer": (transfer_cli.main, ["saxpy", SAXPY_SEED]),
        "import-metal-sci": (import_cli.main, ["--out", tmp_path, "--rescore"]),
        "roofline": (roofline.main, []),
    }[verb]


@pytest.mark.parametrize("verb", VERBS)
def test_an_unknown_gpu_exits_2_naming_the_choices(verb, tmp_path, nothing_runs):
    main, args = command(verb, tmp_path)
    usage_error(
        main, [*args, "--backend", "sim", "--sim-gpu", "h200"], "--sim-gpu", "'h200' is not one of"
    )
    shown = usage_error(main, [*args, "--backend", "sim", "--sim-gpu", "h200"])
    assert "apple-m1-pro" in shown and "nvidia-h100" in shown
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("backend", ["cuda", "metal"])
@pytest.mark.parametrize("verb", VERBS)
def test_a_gpu_named_for_a_real_gpu_backend_exits_2(verb, backend, tmp_path, nothing_runs):
    main, args = command(verb, tmp_path)
    usage_error(
        main,
        [*args, "--backend", backend, "--sim-gpu", "nvidia-h100"],
        f"the {backend} backend times the GPU it runs on",
        "use --backend sim, or leave out --sim-gpu",
    )
    assert not (tmp_path / "run").exists()


def test_import_without_rescore_takes_no_gpu(tmp_path, nothing_runs):
    usage_error(import_cli.main, [tmp_path, "--out", tmp_path / "o", "--sim-gpu", "nvidia-h100"],
                "give --rescore too")  # fmt: skip


class FakeWorker:
    """Stands in for the candidate's worker: keeps each job, answers none."""

    def __init__(self, jobs: list, tmp_path: Path):
        self.jobs, self.tmp_path = jobs, tmp_path

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def prestart(self):
        return None

    def run(self, job, timeout):
        self.jobs.append(job)
        jobdir = self.tmp_path / f"job{len(self.jobs)}"
        jobdir.mkdir()
        return None, jobdir, "crash: a stand-in worker"

    def end(self):
        return None


@pytest.fixture
def fake_worker(monkeypatch, tmp_path):
    """The evaluation's worker and roofline as stand-ins; the jobs it was given."""
    jobs: list = []
    monkeypatch.setattr(evaluator, "candidate_worker", lambda *a: FakeWorker(jobs, tmp_path))
    roof = Roofline("sim", {"name": "stand-in"}, [[1024, 10.0], [2**30, 10.0]], 100.0, "now")
    monkeypatch.setattr(evaluator, "machine_roofline", lambda *a: roof)
    return jobs


@pytest.mark.parametrize(
    "given,dialect,expected",
    [
        (["--sim-gpu", "nvidia-h100"], "metal", "nvidia-h100"),
        ([], "metal", "apple-m1-pro"),
        ([], "cuda", "nvidia-h100"),
    ],
)
def test_eval_json_names_the_gpu_and_its_job_carries_it(fake_worker, given, dialect, expected):
    out = CliRunner().invoke(
        eval_cli.main, ["saxpy", "--backend", "sim", "--dialect", dialect, *given, "--json"]
    )
    assert out.exit_code == 0, (out.output, out.exception)
    record = json.loads(out.stdout)
    assert record["sim_gpu"] == expected and record["device"].endswith(f"modelling {expected}")
    (job,) = fake_worker  # the stand-in crashed the first size: the evaluation stopped there
    assert job.backend_options.get("sim_gpu") == (given[1] if given else None)
    # what the worker builds from its job (mlxsci/worker/serve.py run_job)
    assert get_backend(job.backend, **job.backend_options).gpu.name == expected


def test_the_text_result_names_the_gpu(fake_worker):
    out = CliRunner().invoke(
        eval_cli.main, ["saxpy", "--backend", "sim", "--sim-gpu", "nvidia-h100"]
    )
    assert out.exit_code == 0, (out.output, out.exception)
    assert "modelled GPU nvidia-h100" in out.stdout


def test_roofline_is_the_named_gpu_s(monkeypatch):
    seen = []

    def load(be, **kw):
        seen.append(be)
        return Roofline("sim", be.device_info(), [[1024, 10.0]], 100.0, "now")

    monkeypatch.setattr(roofline, "load_or_measure", load)
    out = CliRunner().invoke(roofline.main, ["--backend", "sim", "--sim-gpu", "nvidia-h100"])
    assert out.exit_code == 0, (out.output, out.exception)
    assert seen[0].gpu.name == "nvidia-h100" and "modelling nvidia-h100" in out.output
    CliRunner().invoke(roofline.main, ["--backend", "sim"])
    assert seen[1].gpu.name == "apple-m1-pro"


def test_a_sweep_gives_the_gpu_to_every_search_and_keeps_a_run_on_its_own(monkeypatch, tmp_path):
    searches = []

    def search(**kw):
        searches.append(kw)
        run_dir = Path(kw.get("out") or kw["resume"])
        (run_dir / "run.json").write_text(json.dumps({"sim_gpu": kw["sim_gpu"]}))
        (run_dir / "summary.json").write_text(json.dumps({"iterations": kw["iterations"]}))
        return {}

    monkeypatch.setattr(mlxsci.search, "run", search)

    def sweep_on(gpu: str):
        args = ["--tasks", "saxpy,heat2d", "--models", "autotune", "--iterations", "1"]
        args += ["--backend", "sim", "--sim-gpu", gpu, "--out", str(tmp_path)]
        return CliRunner().invoke(sweep.main, args)

    out = sweep_on("nvidia-h100")
    assert out.exit_code == 0, (out.output, out.exception)
    assert [(s["task"], s["sim_gpu"]) for s in searches] == [
        ("saxpy", "nvidia-h100"),
        ("heat2d", "nvidia-h100"),
    ]
    # Again on another GPU: the runs are the first GPU's, neither resumed nor counted.
    out = sweep_on("apple-m1-pro")
    assert out.exit_code == 1 and len(searches) == 2
    runs = json.loads((tmp_path / "index.json").read_text())["runs"]
    assert {(r["status"], r["action"]) for r in runs} == {("failed", "refused")}
    assert "timed on the modelled nvidia-h100, not apple-m1-pro" in runs[0]["error"]
    out = sweep_on("nvidia-h100")  # on their own GPU they are finished
    assert out.exit_code == 0 and len(searches) == 2


def test_a_transfer_check_evaluates_on_the_named_gpu(monkeypatch):
    seen = []

    def evaluate(*args, **kw):
        seen.append(kw)
        raise EnvironmentFault("stand-in: stop after the first evaluation")

    monkeypatch.setattr(transfer_cli, "evaluate", evaluate)
    args = ["saxpy", str(SAXPY_SEED), "--backend", "sim", "--sim-gpu", "nvidia-h100"]
    out = CliRunner().invoke(transfer_cli.main, args)
    assert out.exit_code == 3, (out.output, out.exception)
    assert seen[0]["sim_gpu"] == "nvidia-h100" and seen[0]["backend"] == "sim"
