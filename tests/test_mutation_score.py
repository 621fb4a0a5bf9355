"""bench/mutation_score.py, the checker's own score: its mutation operators
change what they claim to change, name their mutants stably, and the results
it writes carry the keys the issue asks for. (The full run is a bench, not a
test: `python bench/mutation_score.py`.)"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
sys.path.insert(0, str(BENCH))

import mutation_operators as ops  # noqa: E402
import mutation_score  # noqa: E402

# operator -> (task, dialect, a text the operator's mutant holds and the seed does not)
WHERE = {
    "off_by_one": ("saxpy", "metal", "if (i > N)"),
    "drop_boundary": ("heat2d", "metal", "if (i == 0 || i == NX - 1 || j == NY - 1)"),
    "drop_barrier": ("gradshaf", "cuda", None),
    "swap_index": ("heat2d", "cuda", "uint32_t idx = i * nx + j;"),
    "precision": ("nbody", "metal", "half3 ri = half3(P[i].xyz);"),
    "drop_term": ("wave3d", "metal", "float lap = xm + ym + yp + zm + zp - 6.0f * c;"),
    "stale_buffer": ("heat2d", "metal", "float c = u_out[idx];"),
    "partial_write": ("saxpy", "cuda", "if (((i) % 7u) != 0u) y_out[i]"),
    "race": ("lj", "metal", "atomic_load_explicit(&cell_count[cell]"),
    "input_passthrough": ("saxpy", "metal", "y_out[i] = y[i];"),
    "input_mutation": ("nbody", "cuda", "((float4*)pos_in)[i] ="),
    "constant_output": ("lbm", "metal", "(16, 16, 1)\nreturn;"),
}


def test_every_operator_is_exercised():
    assert set(WHERE) == set(ops.OPERATORS)


@pytest.mark.parametrize("operator", sorted(WHERE))
def test_operator_mutates_where_its_construct_is(operator):
    task, dialect, expected = WHERE[operator]
    seed = ops.seed_info(task, dialect)
    found = ops.mutants(seed, [operator], max_sites=50)
    assert found, f"{operator} made no mutant of {task}/{dialect}"
    assert all(m.text != seed.text and m.operator == operator for m in found)
    if operator == "drop_barrier":
        barriers = seed.text.count("__syncthreads();")
        assert all(m.text.count("__syncthreads();") == barriers - 1 for m in found)
    else:
        assert any(expected in m.text and expected not in seed.text for m in found), [
            m.description for m in found
        ]


def test_mutant_ids_are_stable_and_unique():
    for task, dialect in (("heat2d", "metal"), ("lj", "cuda"), ("fft3d", "metal")):
        first = ops.mutants(ops.seed_info(task, dialect))
        again = ops.mutants(ops.seed_info(task, dialect))
        ids = [m.ident(task, dialect) for m in first]
        assert ids == [m.ident(task, dialect) for m in again]
        assert len(ids) == len(set(ids))
        assert [m.text for m in first] == [m.text for m in again]


def test_sites_are_bounded_and_spread():
    seed = ops.seed_info("hmc", "metal")
    every = ops.mutants(seed, ["off_by_one"], max_sites=10**6)
    some = ops.mutants(seed, ["off_by_one"], max_sites=3)
    assert len(every) > 3 and len(some) == 3
    assert some[0].site == every[0].site and some[-1].site == every[-1].site
    assert ops.spread(list(range(10)), 3) == [0, 4, 9]


def test_comments_and_directives_are_not_mutated():
    text = "//! kernel k\n// if (a < b) x = y + z;\nout[i] = a /* + b */ + c;\n"
    masked = ops.mask(text)
    assert len(masked) == len(text) and masked.count("\n") == text.count("\n")
    assert "<" not in masked and "kernel" not in masked and "+ c" in masked


def _record(i, status, checks=(), operator="race"):
    return {
        "id": f"saxpy/metal/{operator}/L{i}.1",
        "task": "saxpy",
        "dialect": "metal",
        "operator": operator,
        "site": f"L{i}.1",
        "description": f"change {i}",
        "status": status,
        "checks": list(checks),
        "reason": "",
    }


def test_results_have_the_keys_the_issue_names(tmp_path):
    records = [
        _record(1, "killed", ["reference", "race"]),
        _record(2, "killed", ["unwritten"]),
        _record(3, "survived"),
        _record(4, "survived"),
        _record(5, "stillborn"),
    ]
    equivalents = {
        "saxpy/metal/race/L3.1": {"change": "change 3", "reason": "same answer"},
        "saxpy/metal/race/L4.1": {"change": "another change", "reason": "stale"},
        "saxpy/metal/race/L1.1": {"change": "change 1", "reason": "killed anyway"},
        "saxpy/metal/race/L2.1": {"change": "change 2", "reason": "a gap", "kind": "gap"},
    }
    mutation_score.judge(records, equivalents)
    s = mutation_score.summary(records, "smoke")
    mutation_score.write_results(s, tmp_path)
    data = json.loads((tmp_path / "mutation_score.json").read_text())
    for key in ("mutants", "killed", "tasks", "survivors", "equivalent", "stillborn"):
        assert key in data
    assert (data["mutants"], data["killed"], data["equivalent"], data["stillborn"]) == (4, 2, 1, 1)
    assert data["kill_percent"] == pytest.approx(100 * 2 / 3, abs=0.1)
    assert isinstance(data["tasks"], list) and data["tasks"][0]["task"] == "saxpy"
    reasons = {r["id"]: r["reason"] for r in data["survivors"]}
    assert reasons["saxpy/metal/race/L3.1"] == "equivalent (code): same answer"
    assert reasons["saxpy/metal/race/L4.1"].startswith("unexplained")
    assert data["records"][0]["note"].startswith("listed in mutation_equivalents.json")
    assert "| **total**" in (tmp_path / "mutation_score.md").read_text()


def test_the_committed_equivalents_name_known_operators():
    for ident, entry in mutation_score.load_equivalents().items():
        task, dialect, operator, _ = ident.split("/", 3)
        assert operator in ops.OPERATORS and dialect in ("metal", "cuda"), ident
        assert entry["change"] and entry["reason"], ident
        assert entry.get("kind", "code") in ("code", "inputs", "tolerance", "gap"), ident


@pytest.mark.slow
def test_one_mutant_is_evaluated_and_killed():
    seed = ops.seed_info("saxpy", "metal")
    mutant = next(m for m in ops.mutants(seed, ["constant_output"]) if "stored as" in m.description)
    job = {
        "task": "saxpy",
        "dialect": "metal",
        "text": mutant.text,
        "sizes": "smoke",
        "timeout": 60,
    }
    res = mutation_score.evaluate_mutant(job)
    assert res["status"] == "killed" and "reference" in res["checks"], res


def test_the_committed_equivalents_describe_current_mutants():
    # An entry whose change no longer matches its mutant (a seed was edited)
    # labels nothing: the survivor shows up as unexplained. Keep them in step.
    by_seed: dict = {}
    for ident, entry in mutation_score.load_equivalents().items():
        task, dialect, operator, _ = ident.split("/", 3)
        if (task, dialect) not in by_seed:
            seed = ops.seed_info(task, dialect)
            by_seed[task, dialect] = {
                m.ident(task, dialect): m.description for m in ops.mutants(seed, max_sites=10**6)
            }
        assert by_seed[task, dialect].get(ident) == entry["change"], ident
