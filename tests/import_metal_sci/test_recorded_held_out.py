"""The held-out figures a Metal-Sci results folder records in _run_logs/
(mlxsci/import_metal_sci/recorded_held_out.py), read as hostile input and
carried into each imported run's summary. The files are written here in
the shape Metal-Sci's published table comes from."""

import json

from metal_sci_runs import heat2d_run

from mlxsci.import_metal_sci.importer import import_run
from mlxsci.import_metal_sci.recorded_held_out import recorded_held_out


def published(run_dir: str, frac=0.5, seed_frac=0.25, fail=None) -> list:
    return [
        {
            "task": "heat2d",
            "held": "768x768_75",
            "seed_frac": seed_frac,
            "models": {"some-model": {"frac": frac, "fail": fail, "dir": run_dir}},
        }
    ]


def write_logs(results, name: str, data) -> None:
    logs = results / "_run_logs"
    logs.mkdir(exist_ok=True)
    (logs / name).write_text(json.dumps(data))


def test_the_published_figures_reach_the_imported_summary(tmp_path):
    src = heat2d_run(tmp_path / "results")
    write_logs(tmp_path / "results", "three_held_out.json", published(src.name))
    found, notes = recorded_held_out(tmp_path / "results")
    assert notes == []
    figures = found[src.name]
    assert figures["ratio"] == 2.0 and figures["label"] == "768x768_75"
    assert figures["source"] == "_run_logs/three_held_out.json"
    done = import_run(src, tmp_path / "out", held_out=figures)
    summary = json.loads((done.out / "summary.json").read_text())
    assert summary["recorded"]["held_out"] == figures


def test_a_failed_best_has_no_ratio(tmp_path):
    write_logs(tmp_path, "a.json", published("r", frac=None, fail="correctness: max_abs=3"))
    figures = recorded_held_out(tmp_path)[0]["r"]
    assert figures["ratio"] is None and figures["fail"].startswith("correctness")


def test_other_shapes_and_hostile_files_are_passed_over(tmp_path):
    logs = tmp_path / "_run_logs"
    logs.mkdir()
    # another measurement's shape: a run's own seed and best, no "models"
    (logs / "a_pairs.json").write_text(json.dumps([{"run_dir": "r", "best_frac": 9.0}]))
    (logs / "b_not_json.json").write_text("{nope")
    (logs / "c_nested.json").write_text("[" * 100_000 + "]" * 100_000)
    (logs / "d_types.json").write_text(
        json.dumps([{"task": 1, "seed_frac": "x", "models": {"m": {"dir": 7}}}])
    )
    (tmp_path / "secret.json").write_text(json.dumps(published("r", frac=7.0)))
    (logs / "e_link.json").symlink_to(tmp_path / "secret.json")
    (logs / "f_nan.json").write_text('[{"task": "t", "seed_frac": NaN, "models": '
                                     '{"m": {"frac": 1e999, "dir": "s"}}}]')  # fmt: skip
    found, notes = recorded_held_out(tmp_path)
    assert "r" not in found  # neither the other shape nor the linked file gave figures
    assert found["s"]["ratio"] is None and found["s"]["best_fraction"] is None
    assert any("b_not_json" in n for n in notes) and any("c_nested" in n for n in notes)
    assert any("e_link" in n for n in notes)


def test_the_first_file_wins_and_the_other_is_named(tmp_path):
    write_logs(tmp_path, "a.json", published("r", frac=0.5))
    write_logs(tmp_path, "b.json", published("r", frac=0.9))
    found, notes = recorded_held_out(tmp_path)
    assert found["r"]["best_fraction"] == 0.5
    assert notes and "b.json" in notes[0] and "a.json" in notes[0]
