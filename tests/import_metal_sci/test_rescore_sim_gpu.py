"""A re-score on the simulator is made on a modelled GPU (--sim-gpu, issue
36): its records name the GPU, a re-score on another GPU evaluates every
candidate again beside the first one's records, and one on the same GPU
finds its records done. The evaluations are stand-ins (the verdicts are
tested in test_rescore.py): only which GPU each is asked for matters here."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from metal_sci_runs import heat2d_run

from mlxsci.evaluation.results import Evaluation
from mlxsci.import_metal_sci import rescore as rescore_module
from mlxsci.import_metal_sci.__main__ import main

QUICK = ("--backend", "sim", "--held-out", "none", "--no-transfer")


@pytest.fixture
def gpus_asked(monkeypatch) -> list:
    asked: list = []

    def evaluate(task, source, **kw):
        asked.append(kw.get("sim_gpu"))
        return Evaluation(task, "sim", "stand-in", correct=True, score=0.5)

    monkeypatch.setattr(rescore_module, "evaluate", evaluate)
    return asked


def rescore(out, *more) -> list[dict]:
    shown = CliRunner().invoke(main, ["--out", str(out), "--rescore", *QUICK, *more])
    assert shown.exit_code == 0, (shown.output, shown.exception)
    return json.loads((out / "rescore.json").read_text())


def test_records_are_kept_per_gpu(tmp_path, gpus_asked):
    out = tmp_path / "imported"
    src = heat2d_run(tmp_path / "results")
    imported = CliRunner().invoke(main, [str(src), "--out", str(out)])
    assert imported.exit_code == 0, imported.output
    first = rescore(out)  # the Metal default: the M1 Pro Metal-Sci ran on
    n = len(gpus_asked)
    assert n > 0 and set(gpus_asked) == {"apple-m1-pro"}
    assert {r["sim_gpu"] for r in first} == {"apple-m1-pro"}
    both = rescore(out, "--sim-gpu", "nvidia-h100")  # another GPU: every candidate again
    assert gpus_asked[n:] == ["nvidia-h100"] * n
    records = len(first)  # (a candidate whose file is missing is a record, not evaluated)
    assert (
        sorted(r["sim_gpu"] for r in both) == ["apple-m1-pro"] * records + ["nvidia-h100"] * records
    )
    again = rescore(out, "--sim-gpu", "apple-m1-pro")  # the default named: done already
    assert len(gpus_asked) == 2 * n and len(again) == 2 * records
