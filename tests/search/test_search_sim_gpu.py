"""A search keeps the GPU the simulator models (--sim-gpu, issue 36): a new
run records it in run.json (the dialect's default resolved, so a resume never
depends on what the default is later) and summary.json, every evaluation
and comparison of the run gets it, and a resume keeps it: the command line
refuses --sim-gpu with --resume as it refuses every option run.json fixes,
and run(resume=..., sim_gpu=...) refuses a GPU other than the run's.
Crafted evaluations (tests/scripted_runs.py): no kernel runs."""

import json

import pytest
from click.testing import CliRunner
from helpers import usage_error
from scripted_runs import SEED, Crafted, Scripted, crafted_compare, fenced, variant

from mlxsci.search import __main__ as search_cli
from mlxsci.search import loop, options, run

TABLE = {"seed": SEED, "a": (0.40, 0.01, 0.55, 0.02)}


@pytest.fixture
def gpus_seen(monkeypatch) -> list:
    """The sim_gpu every evaluation and comparison of a crafted run is given."""
    seen: list = []
    crafted, timed = Crafted(TABLE), crafted_compare(TABLE)

    def evaluate(task, source, **kw):
        seen.append(("evaluate", kw.get("sim_gpu")))
        return crafted(task, source, **kw)

    def compare(task, baseline, candidate, **kw):
        seen.append(("compare", kw.get("sim_gpu")))
        return timed(task, baseline, candidate, **kw)

    monkeypatch.setattr(loop, "evaluate", evaluate)
    monkeypatch.setattr(loop, "compare", compare)
    return seen


def crafted_search(tmp_path, **kw) -> dict:
    proposer = Scripted([fenced(variant("a"))])
    return run("saxpy", proposer=proposer, iterations=1, backend="sim", out=tmp_path / "run", **kw)


def test_a_run_records_its_gpu_and_evaluates_on_it(tmp_path, gpus_seen):
    summary = crafted_search(tmp_path, sim_gpu="nvidia-h100", accept="noise-aware")
    assert summary["sim_gpu"] == "nvidia-h100"
    assert json.loads((tmp_path / "run" / "run.json").read_text())["sim_gpu"] == "nvidia-h100"
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["sim_gpu"] == "nvidia-h100"
    kinds = {kind for kind, _ in gpus_seen}
    assert kinds == {"evaluate", "compare"}  # the noise-aware re-timing and the transfer check
    assert {gpu for _, gpu in gpus_seen} == {"nvidia-h100"}


@pytest.mark.parametrize(
    "given,dialect,recorded",
    [
        (None, None, "apple-m1-pro"),
        (None, "cuda", "nvidia-h100"),
        ("nvidia-h100", "metal", "nvidia-h100"),
    ],
)
def test_run_json_holds_the_gpu_resolved(given, dialect, recorded):
    opts, _ = options.new_options(
        options.given_options(task="saxpy", backend="sim", dialect=dialect, sim_gpu=given), None
    )
    assert opts.sim_gpu == recorded
    assert opts.to_json()["sim_gpu"] == recorded


def test_a_run_on_a_gpu_backend_takes_no_gpu_name():
    given = options.given_options(task="saxpy", backend="cuda", sim_gpu="nvidia-h100")
    with pytest.raises(ValueError, match="the cuda backend times the GPU it runs on"):
        options.new_options(given, None)


def test_a_resume_keeps_the_run_s_gpu(tmp_path, gpus_seen):
    crafted_search(tmp_path, sim_gpu="nvidia-h100")
    rd = tmp_path / "run"
    with pytest.raises(ValueError, match="timed on the modelled nvidia-h100: a resume keeps it"):
        run(None, resume=rd, sim_gpu="apple-m1-pro", iterations=2)
    assert json.loads((rd / "run.json").read_text())["iterations"] == 1  # nothing written
    gpus_seen.clear()
    summary = run(None, resume=rd, sim_gpu="nvidia-h100", iterations=2, proposer=Scripted([]))
    assert summary["sim_gpu"] == "nvidia-h100" and {g for _, g in gpus_seen} == {"nvidia-h100"}
    # the command line: --sim-gpu is an option run.json fixes
    usage_error(
        search_cli.main, ["--resume", rd, "--sim-gpu", "nvidia-h100"], "leave out --sim-gpu"
    )


def test_a_run_from_before_gpus_were_modelled_resumes_on_the_default(tmp_path, gpus_seen):
    crafted_search(tmp_path)
    rd = tmp_path / "run"
    recorded = json.loads((rd / "run.json").read_text())
    assert recorded.pop("sim_gpu") == "apple-m1-pro"
    (rd / "run.json").write_text(json.dumps(recorded))
    assert options.resumed_options(rd).sim_gpu is None  # what such a run.json says
    assert options.resumed_options(rd, sim_gpu="apple-m1-pro").sim_gpu is None  # no change
    with pytest.raises(ValueError, match="modelled apple-m1-pro"):
        options.resumed_options(rd, sim_gpu="nvidia-h100")


def test_the_last_line_names_the_gpu(tmp_path, gpus_seen):
    args = ["--task", "saxpy", "--backend", "sim", "--iterations", "0", "--quiet"]
    out = CliRunner().invoke(search_cli.main, [*args, "--out", str(tmp_path / "run")])
    assert out.exit_code == 0, (out.output, out.exception)
    assert "saxpy / autotune on sim (apple-m1-pro): S" in out.output
