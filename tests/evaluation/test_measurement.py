"""mlxsci.timing.measurement: the statistic, the trials' caps and the
interleaved order; and the timer's version in the roofline's key."""

from __future__ import annotations

import pytest

from mlxsci.backends.sim import SimBackend
from mlxsci.protocol.jobs import RunCap
from mlxsci.roofline.probes import plan_for, probe_digest
from mlxsci.timing import timers
from mlxsci.timing.measurement import Measurement, interleaved, trials, warm_up


def test_a_measurement_takes_its_timers_statistic():
    runs = [3.0, 1.0, 2.0, 10.0]
    median, fastest = Measurement.of(runs, "median"), Measurement.of(runs, "min")
    assert median.value == 2.5 and fastest.value == 1.0
    assert (median.low, median.high) == (1.0, 10.0)
    assert median.noise == pytest.approx((10.0 - 1.0) / 2.5)
    assert fastest.noise == pytest.approx((2.0 - 1.0) / 1.0)  # the fastest runs' spread
    assert Measurement.of(runs, None).value == 2.5  # no statistic said: the median


def test_trials_go_past_the_minimum_only_where_more_runs_help():
    ticks = iter(range(100))

    def one():
        return timers.Timing(float(next(ticks)), None)

    assert len(trials(one, 3, RunCap(10, 60.0), more_help=False)) == 3
    assert len(trials(one, 3, RunCap(10, 60.0), more_help=True)) == 10
    assert len(trials(one, 3, None, more_help=True)) == 3


def test_warm_up_runs_at_least_its_minimum():
    runs = []
    got = warm_up(lambda: runs.append(1) or 1.0, 4, RunCap(0, 0.0))
    assert len(runs) >= 3 and got["runs"] == len(runs)


def test_interleaved_rounds_alternate_the_order():
    order: list[str] = []

    def timed(name):
        def one():
            order.append(name)
            return 1.0

        return one

    seconds = interleaved([timed("a"), timed("b")], n_warmup=2, n_measure=4)
    assert order == ["a", "b", "a", "b", "b", "a", "a", "b", "b", "a"]
    assert [len(s) for s in seconds] == [4, 4]


def test_the_timers_version_keys_the_rooflines_entry(monkeypatch):
    """A roofline measured with a timer whose code has changed is measured
    again: the timer's version is part of the entry's probe digest."""
    be = SimBackend(dialect="metal")
    plan = plan_for(be)
    versions = {name: timers.timer_version(name) for name in ("sim", "wall", "cupti")}
    assert len(set(versions.values())) == 3  # each timer its own
    assert timers.timer_version("wall") == versions["wall"]  # and stable
    before = probe_digest(be, plan, "wall")
    real = timers.timer_version
    monkeypatch.setattr(timers, "timer_version", lambda name: real(name)[::-1])  # a changed timer
    assert probe_digest(be, plan, "wall") != before
    with pytest.raises(ValueError, match="unknown timer"):
        real("stopwatch")


def test_every_timer_name_has_its_class_and_makes_its_timer():
    assert set(timers.TIMER_NAMES) == set(timers.TIMER_CLASSES)
    be = SimBackend(dialect="metal")
    for name in ("sim", "wall"):
        made = timers.make_timer(name, be, ("saxpy",))
        assert isinstance(made, timers.TIMER_CLASSES[name]) and made.name == name
        made.close()
