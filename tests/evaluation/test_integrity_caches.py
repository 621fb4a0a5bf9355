"""What the parent reads back is what it wrote (issue 21, outcome 5, parent side).

- Verified cache entries (mlxsci/storage/cache.py): an entry is used only when its
  sidecar's HMAC, keyed by the cache directory's own secret, matches its name
  and bytes; a planted, altered, cut short, empty or unsealed entry, or a
  sidecar copied from another entry, reads as absent.
- The reference cache: a planted reference (tolerance 1e30, zero outputs) is
  computed again, so a wrong output still fails; an empty or truncated entry
  too, without a traceback.
- The roofline cache: planted ceilings are measured again.
- A finished run's manifest (search/manifest.py): the report names and
  marks a run whose summary.json was edited, or whose files were removed or
  added after it finished; an untouched run is not flagged; a resume of a
  finished run writes the manifest anew.

Every test points MLXSCI_CACHE_DIR at its tmp_path (as tests/roofline/test_roofline.py
does), so keys and entries are its own. Searches are crafted ones
(tests/search/test_search.py: no kernel runs).
"""

import io
import json
import os
import shutil
import stat
import threading
from dataclasses import asdict

import numpy as np
import pytest
from click.testing import CliRunner
from scripted_runs import SEED, Scripted, crafted_run, fenced, variant

from mlxsci.backends.sim import SimBackend
from mlxsci.evaluation import references as reference_store
from mlxsci.report import build as report
from mlxsci.report.build import details_table, load_runs, main_table, report_text
from mlxsci.roofline import store as roofline
from mlxsci.roofline.ceilings import Roofline
from mlxsci.roofline.probes import probe_digest
from mlxsci.search import manifest as run_manifest
from mlxsci.search import run
from mlxsci.storage import cache
from mlxsci.task import load_reference, load_task

TASK = load_task("saxpy")
PARAMS = TASK.size_set("smoke")[0].params


@pytest.fixture(autouse=True)
def own_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


# -- verified entries ----------------------------------------------------------------


def test_a_verified_entry_reads_back_and_any_change_reads_as_absent(own_cache):
    path = cache.cache_dir("things") / "a.bin"
    cache.write_verified(path, b"the parent's bytes")
    assert cache.read_verified(path) == b"the parent's bytes"
    key = own_cache / cache.KEY_NAME
    assert stat.S_IMODE(key.stat().st_mode) == 0o600 and key.stat().st_size == cache.KEY_BYTES
    path.write_bytes(b"the parent's bytez")  # altered
    assert cache.read_verified(path) is None
    path.write_bytes(b"the parent's")  # cut short
    assert cache.read_verified(path) is None
    path.write_bytes(b"")
    assert cache.read_verified(path) is None
    cache.write_verified(path, b"again")
    cache.sidecar(path).unlink()  # an entry written before sidecars existed
    assert cache.read_verified(path) is None
    assert cache.read_verified(own_cache / "missing.bin") is None


def test_a_sidecar_copied_from_another_entry_does_not_validate():
    d = cache.cache_dir("things")
    cache.write_verified(d / "a.bin", b"same bytes")
    cache.write_verified(d / "b.bin", b"other bytes")
    # An entry and its sidecar copied onto another name: bound to "a.bin".
    shutil.copy(d / "a.bin", d / "b.bin")
    shutil.copy(cache.sidecar(d / "a.bin"), cache.sidecar(d / "b.bin"))
    assert cache.read_verified(d / "b.bin") is None
    assert cache.read_verified(d / "a.bin") == b"same bytes"
    # The same in place for files verified without reading them into memory.
    cache.seal_file(d / "a.bin")
    assert cache.verify_file(d / "a.bin")
    assert not cache.verify_file(d / "b.bin")


def test_a_sealed_file_verifies_until_it_changes():
    path = cache.cache_dir("sim") / "lib.so"
    path.write_bytes(os.urandom(3 << 20))  # larger than one read chunk
    assert not cache.verify_file(path)  # not sealed yet
    cache.seal_file(path)
    assert cache.verify_file(path)
    with open(path, "r+b") as f:
        f.seek(2 << 20)
        f.write(b"\x90")
    assert not cache.verify_file(path)


def test_a_sidecar_made_with_another_key_does_not_validate(own_cache):
    path = cache.cache_dir("things") / "a.bin"
    cache.write_verified(path, b"x")
    forged = cache.keyed_digest(os.urandom(32), cache.entry_name(path), [b"y"])
    path.write_bytes(b"y")
    cache.sidecar(path).write_text(f"hmac-sha256 {forged}\n")
    assert cache.read_verified(path) is None


def test_concurrent_first_uses_agree_on_one_key(own_cache):
    keys, start = [], threading.Barrier(8)

    def take():
        start.wait()
        keys.append(cache.integrity_key())

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(keys) == 8 and len(set(keys)) == 1
    assert [p.name for p in own_cache.iterdir()] == [cache.KEY_NAME]  # no temp file left


def test_a_key_of_the_wrong_size_is_replaced_and_its_entries_rebuilt(own_cache):
    path = cache.cache_dir("things") / "a.bin"
    cache.write_verified(path, b"x")
    old = cache.integrity_key()
    (own_cache / cache.KEY_NAME).write_bytes(old[:8])  # cut short
    assert cache.read_verified(path) is None  # the damaged key is not used
    assert cache.integrity_key() not in (old, old[:8])
    assert stat.S_IMODE((own_cache / cache.KEY_NAME).stat().st_mode) == 0o600


def test_a_key_others_may_read_is_made_private_again(own_cache):
    key = cache.integrity_key()
    os.chmod(own_cache / cache.KEY_NAME, 0o644)
    assert cache.integrity_key() == key
    assert stat.S_IMODE((own_cache / cache.KEY_NAME).stat().st_mode) == 0o600


# -- the reference cache ---------------------------------------------------------------


def _reference_path():
    return (
        cache.cache_dir("reference", TASK.name)
        / f"{reference_store.reference_key(TASK, PARAMS)}.npz"
    )


def _count_solves(monkeypatch) -> list:
    module = load_reference(TASK.name)
    real, calls = module.solve, []
    monkeypatch.setattr(module, "solve", lambda i, p: calls.append(p) or real(i, p))
    return calls


def _planted(ref) -> bytes:
    meta = {
        "outputs": sorted(ref.outputs),
        "tolerance": 1e30,
        "input_checksums": ref.input_checksums,
    }
    buf = io.BytesIO()
    zeros = {k: np.zeros_like(v) for k, v in ref.outputs.items()}
    np.savez(buf, __meta__=np.array(json.dumps(meta)), **zeros)
    return buf.getvalue()


@pytest.mark.parametrize("sidecar", ["kept", "none"])
def test_a_planted_reference_is_computed_again_and_a_wrong_output_still_fails(monkeypatch, sidecar):
    real = reference_store.get_reference(TASK, PARAMS)
    path = _reference_path()
    path.write_bytes(_planted(real))  # the real entry's sidecar beside it, or none
    if sidecar == "none":
        cache.sidecar(path).unlink()
    calls = _count_solves(monkeypatch)
    ref = reference_store.get_reference(TASK, PARAMS)
    assert len(calls) == 1 and ref.tolerance == real.tolerance < 1.0
    zeros = {k: np.zeros_like(v) for k, v in ref.outputs.items()}
    assert reference_store.verdict(TASK.name, zeros, ref, PARAMS)[1] is False
    assert reference_store.get_reference(TASK, PARAMS).tolerance == real.tolerance
    assert len(calls) == 1  # the recomputed entry is sealed and served from disk


@pytest.mark.parametrize("damage", ["empty", "truncated", "empty but sealed", "garbage but sealed"])
def test_an_empty_or_truncated_reference_is_computed_again(monkeypatch, damage):
    real = reference_store.get_reference(TASK, PARAMS)
    path = _reference_path()
    data = {
        "empty": b"",
        "truncated": path.read_bytes()[:100],
        "empty but sealed": b"",
        "garbage but sealed": b"PK\x03\x04 not a zip",
    }[damage]
    if "sealed" in damage:  # a verified entry the parser cannot read: no traceback either
        cache.write_verified(path, data)
    else:
        path.write_bytes(data)
    calls = _count_solves(monkeypatch)
    ref = reference_store.get_reference(TASK, PARAMS)
    assert len(calls) == 1 and ref.tolerance == real.tolerance
    for k, v in real.outputs.items():
        np.testing.assert_array_equal(ref.outputs[k], v)


# -- the roofline cache ---------------------------------------------------------------


def _sim_roofline(be, gbps=5.0, gflops=9.0):
    digest = probe_digest(be, roofline.plan_for(be))
    return Roofline("sim", {}, [[65536, gbps]], gflops, "now", timer="sim", probe_digest=digest)


@pytest.mark.parametrize("plant", ["no sidecar", "sidecar of the real entry", "stale but sealed"])
def test_a_planted_roofline_is_measured_again(monkeypatch, plant):
    monkeypatch.setenv("MLXSCI_SIM_CLOCK", "host")  # a measured roofline, cached as a GPU's
    be = SimBackend(dialect="metal")
    fresh = _sim_roofline(be)
    calls = []
    monkeypatch.setattr(
        roofline, "measure", lambda backend, progress=None, timer=None: calls.append(1) or fresh
    )
    assert roofline.load_or_measure(be, timer="sim") == fresh and calls == [1]
    path = roofline.cache_path(be, "sim")
    huge = asdict(_sim_roofline(be, gbps=1e-9, gflops=1e-9))  # every candidate "at the roof"
    if plant == "stale but sealed":  # the staleness rules still apply to a verified entry
        cache.write_verified_json(path, dict(huge, probe_digest="0" * 16))
    else:
        path.write_text(json.dumps(huge))
        if plant == "no sidecar":
            cache.sidecar(path).unlink()
    assert roofline.load_or_measure(be, timer="sim") == fresh and calls == [1, 1]
    assert roofline.load_or_measure(be, timer="sim") == fresh and calls == [1, 1]  # sealed now


# -- a finished run's manifest and the report ------------------------------------------


TABLE = {"seed": SEED, "best": (0.31, 0.05, 0.50, 0.02)}  # flat: inside the noise


@pytest.fixture
def finished(tmp_path, monkeypatch):
    summary, _, _ = crafted_run(tmp_path, monkeypatch, TABLE, ["best"])
    assert summary["outcome"] == "within_noise"
    return tmp_path / "run"


def test_a_finished_run_records_every_file_and_is_not_flagged(finished, capsys):
    manifest = json.loads((finished / "manifest.json").read_text())
    # The run's lock file is no record of it (search/manifest.py).
    names = {p.name for p in finished.iterdir()} - {"manifest.json", ".lock"}
    assert set(manifest["files"]) == names and "summary.json" in names
    assert run_manifest.check(finished).status == run_manifest.SEALED
    runs = load_runs([finished])
    err = capsys.readouterr().err
    assert "TAMPERED" not in err and "manifest" not in err
    (row,) = main_table(runs)
    assert not any(k.endswith("tampered") for k in row)
    assert row["scripted outcome"] == "within_noise"
    assert details_table(runs)[0]["integrity"] == "sealed"
    assert "tampered" not in report_text(runs, "md", details=True).lower()


def _edit_outcome(run_dir):
    path = run_dir / "summary.json"
    summary = json.loads(path.read_text())
    summary.update(outcome="improved", best_score=0.6, improvement=2.0)
    path.write_text(json.dumps(summary, indent=2))


TAMPERINGS = {
    "summary edited": (_edit_outcome, "summary.json changed"),
    "file removed": (lambda d: (d / "01_candidate.metal").unlink(), "01_candidate.metal removed"),
    "file added": (
        lambda d: (d / "02_candidate.metal").write_text("x"),
        "02_candidate.metal added",
    ),
}


@pytest.mark.parametrize("how", list(TAMPERINGS))
def test_a_run_changed_after_it_finished_is_flagged_and_left_out(finished, capsys, how):
    tamper, problem = TAMPERINGS[how]
    tamper(finished)
    integrity = run_manifest.check(finished)
    assert integrity.status == run_manifest.TAMPERED and problem in integrity.problems
    runs = load_runs([finished])
    err = capsys.readouterr().err
    assert "TAMPERED" in err and str(finished) in err and problem in err
    main = json.loads(report_text(runs, "json", details=True))
    assert main["main"][0]["scripted tampered"] == 1
    assert main["main"][0]["scripted speedup"] is None  # left out of the cell
    assert main["details"][0]["integrity"] == "tampered"
    md = report_text(runs, "md")
    assert "scripted tampered" in md and "left out of the cells" in md
    kept = main_table(runs, include_tampered=True)[0]
    assert kept["scripted tampered"] == 1 and kept["scripted speedup"] is not None


def test_a_manifest_rewritten_without_the_key_is_flagged(finished):
    _edit_outcome(finished)
    path = finished / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["files"] = run_manifest.file_digests(finished)  # digests recomputed by the forger
    path.write_text(json.dumps(manifest))
    integrity = run_manifest.check(finished)
    assert integrity.tampered and "not signed by this machine's key" in integrity.problems[0]


def test_a_run_sealed_by_another_machine_is_checked_by_its_digests(finished, monkeypatch, tmp_path):
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(tmp_path / "other-machine"))
    assert run_manifest.check(finished).status == run_manifest.DIGESTS_MATCH
    (finished / "best.metal").write_text("changed")
    assert run_manifest.check(finished).tampered


def test_a_removed_summary_of_a_finished_run_is_named(finished, capsys):
    (finished / "summary.json").unlink()
    assert load_runs([finished.parent]) == []
    assert "TAMPERED" in capsys.readouterr().err


def test_the_cli_names_a_tampered_run_and_keeps_it_on_request(finished):
    _edit_outcome(finished)
    out = CliRunner().invoke(report.main, [str(finished), "--format", "json"])
    assert out.exit_code == 0, out.output
    assert "TAMPERED" in out.stderr
    assert json.loads(out.stdout)["main"][0]["scripted speedup"] is None
    out = CliRunner().invoke(report.main, [str(finished), "--format", "json", "--include-tampered"])
    assert json.loads(out.stdout)["main"][0]["scripted speedup"] == pytest.approx(2.0)


def test_a_resumed_finished_run_writes_its_manifest_anew(finished, monkeypatch):
    run(None, resume=finished, iterations=2, proposer=Scripted([fenced(variant("best"))]))
    manifest = json.loads((finished / "manifest.json").read_text())
    assert "02_candidate.metal" in manifest["files"]
    assert run_manifest.check(finished).status == run_manifest.SEALED
    # Resumed and not finished again (here: refused after reopening): unsealed, not tampered.
    run_manifest.remove(finished)
    assert run_manifest.check(finished).status == run_manifest.UNSEALED
