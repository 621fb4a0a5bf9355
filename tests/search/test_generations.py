"""The generational loop: the default strategy unchanged byte for byte, each
strategy's bookkeeping with scripted proposers, several proposals in flight
(out of order, one failing, the cost cap reached mid-generation), and resume."""

import json

import pytest

from tests.search.golden_runs import GOLDEN, SCRIPTS, golden_run


@pytest.mark.parametrize("accept", sorted(SCRIPTS))
def test_one_plus_one_prompts_and_decisions_are_byte_identical(tmp_path, monkeypatch, accept):
    # Written by the loop before generations existed (tests/search/golden_runs.py).
    golden = json.loads((GOLDEN / f"one_plus_one_{accept}.json").read_text())
    now = golden_run(tmp_path / "run", accept, monkeypatch)
    assert sorted(now["prompts"]) == sorted(golden["prompts"])
    for name, text in golden["prompts"].items():
        assert now["prompts"][name] == text, name
    assert now["shown"] == golden["shown"]
    assert now["decisions"] == golden["decisions"]
