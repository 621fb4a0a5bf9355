"""The search's held-out gate with a secret draw (mlxsci/held_out.py): the
commitment in run.json from the start, the secret in no prompt, console line
or file before the run ends, revealed and verified at the end, drawn anew when
a finished run is extended; the listed (metal-sci) held-out on demand; the
machine key out of a candidate's reach."""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from pathlib import Path

import pytest
from helpers import kernel_rules_off
from scripted_runs import SEED, Scripted, crafted_run, fenced, variant

from mlxsci import held_out
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.sandbox import landlock
from mlxsci.search import run
from mlxsci.storage.cache import cache_dir
from mlxsci.task import load_task

HEAT2D = load_task("heat2d")


# ------------------------------------------------------------ the record
def test_a_revealed_draw_verifies_and_any_change_to_it_is_named():
    record = held_out.begin(HEAT2D, "secret")
    assert record.secret is None and record.params is None  # nothing of the draw yet
    assert held_out.verify(HEAT2D, record) == [
        "the secret is not revealed (the run has not finished)"
    ]
    revealed = held_out.reveal(HEAT2D, record)
    assert held_out.verify(HEAT2D, revealed) == []
    assert revealed.params == held_out.held_out_sizes(HEAT2D, record)[0].params
    other = held_out.reveal(HEAT2D, held_out.begin(HEAT2D, "secret"))
    forged = [
        dataclasses.replace(revealed, secret=other.secret),  # another secret
        dataclasses.replace(revealed, commitment=other.commitment),  # another commitment
        dataclasses.replace(revealed, params=dict(revealed.params, NX=revealed.params["NX"] + 1)),
    ]
    for record in forged:
        assert held_out.verify(HEAT2D, record), record


def test_a_secret_made_with_another_machines_key_is_refused(tmp_path, monkeypatch):
    record = held_out.begin(HEAT2D, "secret")
    monkeypatch.setenv("MLXSCI_CACHE_DIR", str(tmp_path))  # another key, made anew
    with pytest.raises(held_out.HeldOutUnavailable, match="another machine"):
        held_out.held_out_sizes(HEAT2D, record)


# ------------------------------------------------ a secret run, end to end
class Snooping(Scripted):
    """A scripted proposer that also keeps every file of the run directory
    as it stands when each call is made: what anything could have read
    before the run ended."""

    def __init__(self, answers, run_dir: Path):
        super().__init__(answers)
        self.run_dir = run_dir
        self.snapshots: list[dict] = []

    def propose(self, ctx):
        files = sorted(p for p in self.run_dir.rglob("*") if p.is_file())
        self.snapshots.append({p.name: p.read_bytes() for p in files})
        return super().propose(ctx)


def numbers_in(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"(?<![\w.])\d+(?![\w.])", text)}


@pytest.mark.slow
def test_a_secret_run_commits_first_reveals_last_and_prompts_never_hold_the_draw(tmp_path):
    out = tmp_path / "run"
    seed = HEAT2D.seed("metal")
    proposer = Snooping([fenced(seed + "// the same kernel\n")] * 2, out)
    lines: list[str] = []
    summary = run(
        "heat2d",
        proposer=proposer,
        iterations=2,
        backend="sim",
        out=out,
        quiet=False,
        echo=lines.append,
    )
    record = summary["held_out"]
    assert record["mode"] == "secret" and summary["held_out_verified"] == []
    params = record["params"]
    drawn = {params["NX"], params["NY"]}  # 560..999: no other number of a prompt is
    # The commitment was in run.json before the first call, without the draw.
    first = json.loads(proposer.snapshots[0]["run.json"])["held_out_draw"]
    assert first["commitment"] == record["commitment"] and first["nonce"] == record["nonce"]
    assert first["secret"] is None and first["params"] is None
    # Nothing a proposer was shown or could read held a drawn value.
    shown = [c.system + c.user for c in proposer.seen]
    files = [data.decode(errors="replace") for snap in proposer.snapshots for data in snap.values()]
    assert shown and files
    for text in shown + files:
        assert not drawn & numbers_in(text)
        assert params["distribution"] not in text
    # Nor did a console line before the held-out gate's.
    gate = next(i for i, line in enumerate(lines) if line.startswith("held-out:"))
    assert not any(drawn & numbers_in(line) for line in lines[:gate])
    # At the end: the held-out results are at the revealed configuration.
    saved = json.loads((out / "held_out_seed.json").read_text())
    assert [s["params"] for s in saved["result"]["sizes"]] == [params]
    assert saved["result"]["sizes"][0]["label"] == held_out.SECRET_LABEL
    final = json.loads((out / "run.json").read_text())["held_out_draw"]
    assert final == record
    assert held_out.verify(HEAT2D, held_out.HeldOutDraw.from_json(final)) == []


# ------------------------------------------------------ the crafted searches
def test_metal_sci_mode_evaluates_the_listed_held_out(tmp_path, monkeypatch):
    summary, fake, _ = crafted_run(tmp_path, monkeypatch, {"seed": SEED}, [], held_out="metal-sci")
    assert summary["held_out"]["mode"] == "metal-sci"
    assert summary["held_out"]["secret"] is None and summary["held_out_verified"] == []
    assert summary["held_out_seed"] == SEED[2]
    assert [c["size_set"] for c in fake.calls].count("held-out") == 1


def test_a_finished_run_extended_draws_anew(tmp_path, monkeypatch):
    table = {"seed": SEED, "a": (0.31, 0.01, 0.50, 0.02)}
    summary, fake, _ = crafted_run(tmp_path, monkeypatch, table, ["a"])
    first = summary["held_out"]
    if first["mode"] != "secret":
        pytest.skip("saxpy declares no secret draw")
    assert summary["held_out_verified"] == []
    rd = tmp_path / "run"
    summary = run(None, resume=rd, iterations=2, proposer=Scripted([fenced(variant("a"))]))
    second = summary["held_out"]
    assert second["nonce"] != first["nonce"] and summary["held_out_verified"] == []
    saved = json.loads((rd / "held_out_seed.json").read_text())
    assert saved["draw"] == second["commitment"]  # evaluated again at the new draw


# ------------------------------------------------------------ the machine key
@pytest.mark.slow
@pytest.mark.skipif(
    sys.platform != "linux" or landlock.abi_version() < 1, reason="Linux with Landlock"
)
def test_a_candidate_cannot_read_the_machine_key(monkeypatch):
    """A candidate that reads the key and writes its bytes into its output:
    refused by the sandbox, so its output is the seed's (correct); run without
    the sandbox the same candidate does read it (its output is wrong)."""
    kernel_rules_off(monkeypatch)
    key = cache_dir("held-out") / "machine.key"
    held_out.machine_key()
    body = (
        "uint i = thread_position_in_grid.x;\n"
        "if (i < N) y_out[i] = a * x[i] + y[i];\n"
        "if (i == 0) {\n"
        f'  int fd = open("{key}", 0);\n'
        "  unsigned char k[32];\n"
        "  long n = fd >= 0 ? read(fd, k, 32) : -1;\n"
        "  float leaked = 0.0f;\n"
        "  for (long j = 0; j < n; j++) leaked += 1000.0f + k[j];\n"
        "  y_out[0] += leaked;  // thread 0 writes only its own element\n"
        "}\n"
    )
    source = (
        '//! header\nextern "C" int open(const char*, int, ...);\n'
        'extern "C" long read(int, void*, unsigned long);\n'
        "//! kernel saxpy\n//! grid = (ceil_div(N, 256) * 256, 1, 1)\n"
        "//! threadgroup = (256, 1, 1)\n" + body
    )
    kwargs = dict(backend="sim", size_set="smoke", n_warmup=1, n_measure=1)
    sandboxed = evaluate("saxpy", source, **kwargs)
    assert sandboxed.correct, sandboxed.fail_reason
    assert key.read_bytes().hex() not in json.dumps(sandboxed.to_json(), default=str)
    unsandboxed = evaluate("saxpy", source, unsandboxed=True, **kwargs)
    assert not unsandboxed.correct  # the attack itself works: only the sandbox stops it


# ------------------------------------------------ a size-keyed best, graded
CANDIDATES = Path(__file__).parents[1] / "transfer" / "candidates"


@pytest.mark.slow
def test_a_search_that_keeps_a_size_keyed_kernel_ends_graded_a(tmp_path, monkeypatch):
    """A proposer offers a kernel tuned for the widths it is measured at
    beside a slow fallback (tests/transfer/candidates): the search keeps it
    (S up at the smoke size), and its summary grades the win A, with the
    scan's finding of the size comparison and the held-out speed as
    evidence, at the run's own secret draw. On the simulator's host-time
    clock, which the fixture's slow fallback is designed for
    (tests/transfer/test_transfer_sim.py)."""
    monkeypatch.setenv("MLXSCI_SIM_CLOCK", "host")
    keyed = (CANDIDATES / "heat2d_a_size_branch.metal").read_text()
    summary = run(
        "heat2d",
        proposer=Scripted([fenced(keyed)]),
        iterations=1,
        backend="sim",
        out=tmp_path / "r",
    )
    assert summary["best_iteration"] == 1 and summary["improvement_verdict"] == "improved"
    transfer = summary["transfer"]
    assert transfer["grade"] == "A", transfer["reason"]
    assert summary["outcome"] in ("not_transferred", "held_out_regression")
    what = " ".join(e["what"] for e in transfer["evidence"])
    assert "NX == 67u" in what and "held-out speedup" in what
    assert summary["held_out"]["mode"] == "secret" and summary["held_out_verified"] == []
    saved = json.loads((tmp_path / "r" / "transfer.json").read_text())
    assert saved["result"] == transfer and saved["draw"] == summary["held_out"]["commitment"]


def test_a_run_stopped_during_its_gate_and_extended_draws_anew(tmp_path, monkeypatch):
    """Held-out results at the drawn configuration are in the run's folder
    once its gate began: a run stopped there (no summary, the secret not yet
    revealed) and extended with more iterations must not go on proposing
    with them beside it, so its extension draws anew."""
    table = {"seed": SEED, "a": (0.36, 0.01, 0.60, 0.02)}
    summary, fake, _ = crafted_run(tmp_path, monkeypatch, table, ["a"])
    rd = tmp_path / "run"
    # As stopped during the gate: run.json's draw unrevealed, no summary yet.
    options = json.loads((rd / "run.json").read_text())
    first = dict(options["held_out_draw"], secret=None, params=None)
    (rd / "run.json").write_text(json.dumps(dict(options, held_out_draw=first)))
    for name in ("summary.json", "manifest.json", "transfer.json"):
        (rd / name).unlink(missing_ok=True)
    summary = run(None, resume=rd, iterations=2, proposer=Scripted([fenced(variant("a"))]))
    assert summary["held_out"]["nonce"] != first["nonce"]
    assert summary["held_out_verified"] == []
    # Stopped the same way before its gate began: the same draw goes on.
    for name in ("summary.json", "manifest.json", "transfer.json", "held_out_seed.json"):
        (rd / name).unlink(missing_ok=True)
    (rd / "held_out_best.json").unlink(missing_ok=True)
    options = json.loads((rd / "run.json").read_text())
    second = dict(options["held_out_draw"], secret=None, params=None)
    (rd / "run.json").write_text(json.dumps(dict(options, held_out_draw=second)))
    summary = run(None, resume=rd, iterations=3, proposer=Scripted([fenced(variant("a"))]))
    assert summary["held_out"]["nonce"] == second["nonce"]


def test_a_planted_secret_draws_nothing_and_a_malformed_one_is_refused():
    """The red team's forgeries (helper report, issue 25): a run.json whose
    secret and commitment were both rewritten to a draw of one's choosing
    passes the hash check, but this machine derives the secret from the nonce
    and refuses the record; a non-text secret is a malformed record, not a
    TypeError; a summary whose params were changed fails verify."""
    record = held_out.begin(HEAT2D, "secret")
    chosen = "0" * 32
    planted = dataclasses.replace(
        record, secret=chosen, commitment=held_out.commitment("heat2d", record.nonce, chosen)
    )
    with pytest.raises(held_out.HeldOutUnavailable):
        held_out.held_out_sizes(HEAT2D, planted)
    for bad in (123, "xyz", None):
        data = dict(record.to_json(), secret=bad)
        if bad is None:
            assert held_out.HeldOutDraw.from_json(data).secret is None
        else:
            with pytest.raises(ValueError, match="malformed secret"):
                held_out.HeldOutDraw.from_json(data)
    revealed = held_out.reveal(HEAT2D, record)
    listed = HEAT2D.size_set("held-out")[0].params
    assert held_out.verify(HEAT2D, dataclasses.replace(revealed, params=dict(listed)))
