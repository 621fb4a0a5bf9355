"""No secret in a worker, a prompt or a record (issue 21, outcome 4).

Every test plants secrets in the environment (two provider keys, a service
token, a database secret) and follows them: into what a worker may print
(`worker_text`), the environment a worker starts with (`minimal_worker_env`),
the prompts (search/prompts/compose.py), a run directory (search/rundir.py), an
evaluation's JSON and table (mlxsci/evaluation/results.py) and the requests an LLM
proposer sends (the local fake server, through the real openai SDK). The
attack path of the issue is the one replayed: a size's fail_reason quoting a
worker's "last words" that carry a key, which the next prompt quotes.
"""

from __future__ import annotations

import base64
import json
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest
from fake_llm_server import SAXPY_ANSWER, ok

from mlxsci.backends import BACKEND_NAMES, backend_info
from mlxsci.evaluation import redaction
from mlxsci.evaluation.redaction import (
    CUT_MARK,
    EVERY_BACKEND,
    FIXED,
    minimal_worker_env,
    redact,
    redact_json,
    remember_secret,
    secret_values,
    worker_text,
)
from mlxsci.evaluation.results import Evaluation, SizeResult, format_evaluation
from mlxsci.search import loop, run
from mlxsci.search.prompts.compose import system_prompt, user_prompt
from mlxsci.search.proposers.registry import make_proposer
from mlxsci.search.rundir import RunDir
from mlxsci.task import load_task

SAXPY = load_task("saxpy")
PLANTED = {
    "OPENAI_API_KEY": "sk-planted-openai-5f2b9c1e7d3a",
    "ANTHROPIC_API_KEY": "sk-ant-planted-8a4d2e6f0b1c",
    "MY_SERVICE_TOKEN": 'tok-planted"service\\3c7e9a',  # a quote and a backslash: JSON escapes
    "DB_SECRET": "db-planted-secret-1b5d8f42",
}
# The key a search reads through --api-key-env from a variable whose name
# says nothing: only search/proposers/keys.py's remember_secret makes it a secret.
VALUES = tuple(PLANTED.values())
LOGIN_VAR, LOGIN = "LLM_LOGIN", "login-planted-7e3a9c2f61"


@pytest.fixture(autouse=True)
def planted(monkeypatch):
    """The secrets in the environment; the keys remembered in this process
    (mlxsci.evaluation.redaction) start empty and are dropped after the test."""
    monkeypatch.setattr(redaction, "_remembered", {})
    for name, value in PLANTED.items():
        monkeypatch.setenv(name, value)
    return PLANTED


def last_words(values=VALUES) -> str:
    """What a hostile worker prints as it dies: each value in another disguise
    (plain, JSON-escaped, split over two lines, hex, base64)."""
    a, b, c, d, *rest = list(values) + ["", "", "", ""]
    said = [
        f"mlxsci-sim: {a}",
        f"env dump: {json.dumps({'k': b})}",
        f"token: {c[:9]}\n   {c[9:]}",
        f"hex {d.encode().hex()} b64 {base64.b64encode(a.encode()).decode()}",
    ]
    said += [f"also: {v}" for v in rest if v]
    return "\n".join(said)


def leaks(text: str, values=VALUES) -> list[str]:
    """The planted values `text` still holds, in any disguise last_words uses."""
    flat = re.sub(r"\s+", "", text)
    found = []
    for v in values:
        forms = {v, json.dumps(v)[1:-1], v.encode().hex(), base64.b64encode(v.encode()).decode()}
        if any(f in text or re.sub(r"\s+", "", f) in flat for f in forms):
            found.append(v)
    return found


def leaks_in_folder(folder: Path, values=VALUES) -> dict[str, list[str]]:
    """{file: planted values in it}, over the bytes of every file under folder."""
    found = {}
    for path in sorted(folder.rglob("*")):
        if path.is_file():
            hit = leaks(path.read_bytes().decode("utf-8", errors="replace"), values)
            if hit:
                found[str(path.relative_to(folder))] = hit
    return found


def test_the_leak_detector_sees_every_disguise():
    # The checks below would pass vacuously if leaks() found nothing.
    assert leaks(last_words()) == list(PLANTED.values())


# -- which values are secrets ---------------------------------------------------------


def test_secret_values_are_the_planted_and_remembered_ones_longest_first(monkeypatch):
    monkeypatch.setenv("GIT_AUTHOR_NAME", "Ada Lovelace-Byron")  # AUTHOR is no auth
    monkeypatch.setenv("PLAIN_SETTING", "not-a-secret-value-123")  # not named like one
    remember_secret(LOGIN_VAR, LOGIN)
    values = secret_values(extra=["extra-planted-key-0000"])
    for v in [*PLANTED.values(), LOGIN, "extra-planted-key-0000"]:
        assert v in values
    assert "Ada Lovelace-Byron" not in values and "not-a-secret-value-123" not in values
    assert [len(v) for v in values] == sorted((len(v) for v in values), reverse=True)


@pytest.mark.parametrize(
    "value",
    ["short", "12345678901234", "disabled", "/tmp", "  tiny  "],
    ids=["short", "a number", "a settings word", "an existing path", "short after strip"],
)
def test_values_that_cannot_be_credentials_are_left_alone(monkeypatch, value):
    monkeypatch.setenv("SOME_TOKEN", value)
    assert value.strip() not in secret_values()
    assert redact(f"size {value} here") == f"size {value} here"


def test_redact_names_the_variable_and_catches_every_disguise():
    text = redact(last_words())
    assert not leaks(text)
    for name in ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "MY_SERVICE_TOKEN", "DB_SECRET"):
        assert f"[redacted:{name}]" in text
    assert text.startswith("mlxsci-sim: [redacted:OPENAI_API_KEY]\n")


def test_redact_replaces_the_longest_value_first(monkeypatch):
    monkeypatch.setenv("OUTER_TOKEN", "prefix-db-planted-secret-1b5d8f42-suffix")
    text = redact("x prefix-db-planted-secret-1b5d8f42-suffix y")
    assert text == "x [redacted:OUTER_TOKEN] y"


def test_a_remembered_key_is_redacted_whatever_its_variable_is_called():
    assert redact(f"key {LOGIN}") == f"key {LOGIN}"  # LLM_LOGIN: not named like a secret
    remember_secret(LOGIN_VAR, LOGIN)
    assert redact(f"key {LOGIN}") == f"key [redacted:{LOGIN_VAR}]"


def test_redact_json_keeps_the_json_valid_and_its_numbers(monkeypatch):
    monkeypatch.setenv("PIN_SECRET", "99999999x")
    obj = {"a": [PLANTED["DB_SECRET"], 99999999, ("99999999x",)], PLANTED["OPENAI_API_KEY"]: 1.5}
    out = redact_json(obj)
    text = json.dumps(out)
    assert not leaks(text) and "99999999x" not in text
    assert out["a"][1] == 99999999 and isinstance(out["a"][2], tuple)
    assert json.loads(text)["[redacted:OPENAI_API_KEY]"] == 1.5


# -- what a worker printed ---------------------------------------------------------------


def test_worker_text_drops_escapes_and_control_characters():
    raw = (
        b"\x1b[31mred\x1b[0m \x1b]0;new title\x07"  # colours, a window title
        b"\x1b]52;c;Y2xpcGJvYXJk\x1b\\"  # a clipboard write
        b"a\x00b\x07c\x08d\x7f\x1b7e\tf\r\ng\rh\n"
        b"\xff\xfe bad bytes \xe2\x80\xae rtl"  # undecodable, a right-to-left override
    )
    text = worker_text(raw, 1000)
    assert text.startswith("red abcde\tf\ng\nh\n")
    assert "\x1b" not in text and "title" not in text and "Y2xp" not in text
    assert "\u202e" not in text and "bad bytes" in text
    assert all(c in "\n\t" or c.isprintable() for c in text)


def test_worker_text_keeps_the_end_within_the_limit():
    raw = b"x" * 100_000 + b"\nmlxsci-sim: out of bounds at y_out[17]"
    text = worker_text(raw, 200)
    assert len(text) == 200 and text.startswith(CUT_MARK)
    assert text.endswith("mlxsci-sim: out of bounds at y_out[17]")
    assert worker_text(b"short", 200) == "short"
    assert worker_text(b"anything", 0) == ""


def test_worker_text_redacts_before_it_cuts():
    key = PLANTED["OPENAI_API_KEY"]
    # The cut falls inside the key: what stays must hold no piece of it.
    raw = b"a" * 500 + key.encode() + b" the end"
    text = worker_text(raw, len(" the end") + 12)
    assert key[-8:] not in text and text.endswith(" the end")
    # A key hidden between terminal escapes, and every disguise.
    split = key[:5].encode() + b"\x1b[0m" + key[5:].encode()
    assert not leaks(worker_text(split + b"\n" + last_words().encode(), 10_000))


# -- a worker's environment ------------------------------------------------------------


def allowed(backend: str) -> set[str]:
    return {
        *EVERY_BACKEND,
        *backend_info(backend).environment,
        *FIXED,
        "MLXSCI_CACHE_DIR",
        "PYTHONNOUSERSITE",
    }


def test_the_simulator_and_cuda_keep_their_own_variables():
    assert "MLXSCI_SIM_SCHEDULE" in backend_info("sim").environment
    assert "CUDA_VISIBLE_DEVICES" in backend_info("cuda").environment
    assert backend_info("metal").environment == ()


@pytest.mark.parametrize("backend", BACKEND_NAMES)
def test_minimal_worker_env_is_an_allowlist(monkeypatch, backend):
    for name, value in {
        "AWS_ACCESS_KEY_ID": "AKIAPLANTED0000000",
        "GITHUB_TOKEN": "ghp_planted000000000000",
        "MY_PROJECT_DIR": "/home/someone/project",
        "HTTPS_PROXY": "http://user:pass@proxy:3128",
        "MLX_PLANTED_TOKEN": "mlx-planted-token-0000",  # an allowed prefix, a secret's name
        "MLX_ENABLE_TF32": "0",
        LOGIN_VAR: LOGIN,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    monkeypatch.setenv("CUDA_HOME", PLANTED["DB_SECRET"])  # allowed name, secret value
    env = minimal_worker_env(backend)
    stray = {n for n in env if n not in allowed(backend) and not n.startswith("MLX_")}
    assert not stray
    assert not leaks(json.dumps(env), [*PLANTED.values(), LOGIN, "AKIAPLANTED0000000"])
    assert "MLX_PLANTED_TOKEN" not in env and env["MLX_ENABLE_TF32"] == "0"
    assert "CUDA_HOME" not in env
    assert ("CUDA_VISIBLE_DEVICES" in env) == (
        "CUDA_VISIBLE_DEVICES" in backend_info(backend).environment
    )
    assert env["LC_ALL"] == "C.UTF-8" and env["PYTHONUNBUFFERED"] == "1"


def test_a_process_started_with_it_imports_the_worker_and_sees_no_secret():
    probe = "import json, os, mlxsci.worker; print(json.dumps(dict(os.environ)))"
    proc = subprocess.run(
        [sys.executable, "-c", probe],
        env=minimal_worker_env("sim"),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    seen = json.loads(proc.stdout)
    assert not leaks(json.dumps(seen)) and not set(PLANTED) & set(seen)


# -- an evaluation's records -------------------------------------------------------------


def leaky_evaluation() -> Evaluation:
    size = SAXPY.size_set("smoke")[0]
    reason = f"runtime error at size {size.label}: {last_words()}"
    return Evaluation(
        task="saxpy",
        backend="sim",
        device="cpu",
        correct=False,
        score=0.0,
        fail_reason=reason,
        sizes=[SizeResult(size.label, dict(size.params), fail_reason=reason, flags=["crash"])],
    )


def test_evaluation_json_and_table_are_redacted():
    ev = leaky_evaluation()
    assert not leaks(json.dumps(ev.to_json()))
    table = format_evaluation(ev)
    assert not leaks(table) and "[redacted:OPENAI_API_KEY]" in table


# -- prompts ---------------------------------------------------------------------------


def leaky_result(size_set: str = "smoke") -> dict:
    """An evaluation's JSON as the search keeps it, failing with last words
    that carry every planted value (written by hand: no redaction on the way)."""
    size = SAXPY.size_set(size_set)[0]
    reason = f"runtime error at size {size.label}: crash: {last_words()}"
    return {
        "task": "saxpy",
        "backend": "sim",
        "device": "leaky",
        "dialect": "metal",
        "timer": "sim",
        "candidate": {
            "compile_ok": True,
            "correct": False,
            "score": 0.0,
            "phi": None,
            "noise": None,
            "fail_reason": reason,
        },
        "sizes": [
            {
                "label": size.label,
                "params": dict(size.params),
                "held_out": size_set == "held-out",
                "correct": False,
                "flags": ["crash"],
                "fail_reason": reason,
            }
        ],
    }


def test_a_fail_reason_with_secrets_never_reaches_a_prompt():
    seed = SAXPY.seed("metal")
    result = leaky_result()
    assert leaks(json.dumps(result))  # planted, and unredacted so far
    record = {"iteration": 1, "role": "candidate", "correct": False, "fail_reason": "x"}
    record["fail_reason"] = result["candidate"]["fail_reason"]
    first = user_prompt(
        SAXPY,
        "metal",
        iteration=1,
        seed_source=seed,
        seed_result=result,
        previous=None,
        incumbent=None,
        history=[],
        stagnation=False,
    )
    later = user_prompt(
        SAXPY,
        "metal",
        iteration=2,
        seed_source=seed,
        seed_result=result,
        previous=(seed + f"// {PLANTED['DB_SECRET']}\n", result),
        incumbent=(seed, result),
        history=[record],
        stagnation=False,
    )
    for prompt in (first, later, system_prompt(SAXPY, "metal")):
        assert not leaks(prompt)
    assert "[redacted:OPENAI_API_KEY]" in first and "[redacted:DB_SECRET]" in later


def test_a_long_fail_reason_is_redacted_before_it_is_clipped():
    # result_lines clips a failure at 3000 characters; a key across the cut
    # must not leave its first half in the prompt.
    result = leaky_result()
    key = PLANTED["OPENAI_API_KEY"]
    result["candidate"]["fail_reason"] = "compile error: " + "x" * (3000 - 15 - 12) + key
    result["candidate"]["compile_ok"] = False
    prompt = user_prompt(
        SAXPY,
        "metal",
        iteration=1,
        seed_source=SAXPY.seed("metal"),
        seed_result=result,
        previous=None,
        incumbent=None,
        history=[],
        stagnation=False,
    )
    assert "x" * 100 in prompt and key[:12] not in prompt


# -- run directories ---------------------------------------------------------------------


def test_every_run_directory_writer_redacts(tmp_path):
    rd = RunDir(tmp_path)
    words = last_words()
    rd.write_text(rd.iter_file(1, "prompt.md"), words)
    rd.write_json(rd.iter_file(1, "result.json"), leaky_result())
    rd.append_history({"iteration": 0, "role": "seed", "fail_reason": words})
    rd.skipped_lines = [(2, words)]
    rd.repair_history([{"iteration": 0, "role": "seed", "fail_reason": words}])
    assert {p.name for p in tmp_path.iterdir()} >= {"history.jsonl", "history_skipped.txt"}
    assert leaks_in_folder(tmp_path) == {}
    assert json.loads(rd.iter_file(1, "result.json").read_text())["candidate"]["fail_reason"]


def held_out_or(size_set: str | None, sizes) -> str:
    """The size set an evaluation asked for: held-out for a secret draw's
    sizes (the search's gate passes them, not a set's name), smoke for the
    transfer check's other sizes."""
    if sizes is not None:
        return "held-out" if any(s.held_out for s in sizes) else "smoke"
    return size_set or "smoke"


def leaky_evaluate(calls: list):
    """Stands in for mlxsci.evaluation.evaluator.evaluate in the search loop: every
    evaluation fails with the planted last words."""

    def evaluate(task, source, *, size_set=None, sizes=None, **kw):
        which = held_out_or(size_set, sizes)
        calls.append(which)
        result = leaky_result(which)
        return types.SimpleNamespace(to_json=lambda: result)

    return evaluate


def test_an_offline_search_writes_no_planted_secret(tmp_path, monkeypatch):
    calls: list = []
    monkeypatch.setattr(loop, "evaluate", leaky_evaluate(calls))
    out = tmp_path / "run"
    summary = run("saxpy", "autotune", iterations=2, backend="sim", out=out)
    assert "held-out" in calls and len(calls) >= 3  # the seed, candidates, held-out
    assert (out / "01_prompt.md").exists() and (out / "summary.json").exists()
    assert leaks_in_folder(out) == {}
    assert "[redacted:" in (out / "00_result.json").read_text()
    assert summary["iterations"] == 2


@pytest.mark.slow
def test_a_real_evaluation_whose_worker_leaks_writes_no_secret(tmp_path, monkeypatch):
    """The real evaluation on the simulator, with the worker's answer replaced
    by a death whose last words carry the planted values: the fail_reason, the
    prompt, every record of the run and the evaluation's JSON hold none."""
    from mlxsci.evaluation import runner

    def dying(self, job, timeout):
        return None, Path(tempfile.mkdtemp()), "worker died: " + last_words()

    monkeypatch.setattr(runner.CandidateWorker, "run", dying)
    out = tmp_path / "run"
    run("saxpy", "autotune", iterations=1, backend="sim", out=out)
    history = [json.loads(line) for line in (out / "history.jsonl").read_text().splitlines()]
    assert "[redacted:" in history[0]["fail_reason"]
    assert leaks_in_folder(out) == {}


# -- what an LLM is sent -------------------------------------------------------------------


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_requests_to_an_llm_carry_no_planted_secret(server, tmp_path, monkeypatch):
    """A search against the local fake server (real openai SDK, --base-url)
    whose every evaluation fails with last words carrying the planted values
    and the key the search itself uses (read through --api-key-env from a
    variable named like no secret): no request body holds any of them; the
    key goes only where it belongs, the Authorization header."""
    server.reset()
    monkeypatch.setenv(LOGIN_VAR, LOGIN)
    values = [*PLANTED.values(), LOGIN]

    def evaluate(task, source, *, size_set=None, sizes=None, **kw):
        result = leaky_result(held_out_or(size_set, sizes))
        reason = f"crash: {last_words(values)}"
        result["candidate"]["fail_reason"] = result["sizes"][0]["fail_reason"] = reason
        return types.SimpleNamespace(to_json=lambda: result)

    monkeypatch.setattr(loop, "evaluate", evaluate)
    server.script(ok(SAXPY_ANSWER, times=None))
    proposer = make_proposer(
        "local-coder",
        api="openai-chat",
        base_url=server.openai_url,
        api_key_env=LOGIN_VAR,
        max_retries=0,
        timeout_s=30.0,
    )
    out = tmp_path / "run"
    run("saxpy", proposer=proposer, iterations=2, backend="sim", out=out)
    bodies = [r["body"] for r in server.requests]
    assert len(bodies) == 2
    assert "fail_reason" in json.dumps(bodies[-1])  # the previous failure was quoted
    assert not leaks(json.dumps(bodies), values)
    headers = json.dumps([r["headers"] for r in server.requests])
    assert LOGIN in headers and not leaks(headers, PLANTED.values())
    assert leaks_in_folder(out, values) == {}


def test_a_leaky_proposer_error_is_redacted_before_it_is_cut(server, tmp_path, monkeypatch):
    """An error message that echoes a secret past the 300 characters an error
    keeps: no piece of the secret stays in the proposal's error."""
    from fake_llm_server import status

    from mlxsci.search.proposers.base import PromptContext

    server.reset()
    key = PLANTED["DB_SECRET"]
    server.script(status(400, "bad request: " + "y" * 270 + key, times=None))
    proposer = make_proposer(
        "local-coder", api="openai-chat", base_url=server.openai_url, max_retries=0
    )
    ctx = PromptContext("saxpy", "metal", 1, "SYSTEM", "USER " + key, SAXPY.seed("metal"))
    proposal = proposer.propose(ctx)
    assert proposal.text is None and proposal.error
    assert key[:6] not in proposal.error
    assert key not in json.dumps(server.requests[0]["body"])
