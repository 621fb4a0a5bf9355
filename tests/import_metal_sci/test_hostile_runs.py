"""A published Metal-Sci run directory is hostile input: attacks on the
importer, the converter and the re-score, each with the side effect it had
checked absent (no traceback, no hang, no file written outside --out or
through a link, no secret read, no terminal escape printed, no kernel
converted into another than the one the run recorded a verdict for).

The converter attacks share a pattern: the run's kernel, as a compiler reads
the source (E below), leaves heat2d's edge cells unwritten, which passes
Metal-Sci's harness (its ping-pong buffers already hold the edges) and fails
mlxsci's; the converter was made to read an honest kernel (B) instead, so a
re-score "agreed" that the cheat was correct. Each source is now refused with
a reason. Tests of what a re-score must do but does not yet (rescore.py is
not this file's to fix) are strict xfails naming the fix.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from metal_sci_runs import (
    HEAT_NO_EDGES,
    HEAT_SEED,
    INCORRECT,
    Iteration,
    heat2d_run,
    metal_sci_source,
    result,
    write_run,
)

from mlxsci.import_metal_sci import importer, metal_run
from mlxsci.import_metal_sci import rescore as rescore_module
from mlxsci.import_metal_sci.__main__ import main
from mlxsci.import_metal_sci.convert import convert_source
from mlxsci.kernel.candidate import parse
from mlxsci.report.build import main as report_main
from mlxsci.search import manifest

REPO = Path(__file__).resolve().parents[2]
QUICK = ("--backend", "sim", "--held-out", "none", "--no-transfer")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x80-\x9f\u202a-\u202e\u2066-\u2069]")
SECRET = "aws_secret_access_key = SECRET-5f3a9c1e77"


@pytest.fixture
def quick_evaluations(monkeypatch):
    """Evaluations with one warm-up and one measured run; the sources given."""
    sources = []
    real = rescore_module.evaluate

    def quick(task, source, **kwargs):
        sources.append(source)
        return real(task, source, **{**kwargs, "n_warmup": 1, "n_measure": 1})

    monkeypatch.setattr(rescore_module, "evaluate", quick)
    return sources


def cli(*args):
    """The command in this process: (exit code, output); never a traceback."""
    out = CliRunner().invoke(main, [str(a) for a in args])
    assert out.exception is None or isinstance(out.exception, SystemExit), out.exception
    assert "Traceback" not in out.output
    return out.exit_code, out.output


def cli_process(*args, timeout: float = 60):
    """The command as its own process (a hang is a failure, not a stuck test)."""
    try:
        done = subprocess.run(
            [sys.executable, "-m", "mlxsci.import_metal_sci", *map(str, args)],
            capture_output=True, text=True, timeout=timeout, cwd=REPO,
        )  # fmt: skip
    except subprocess.TimeoutExpired:
        pytest.fail(f"the import hung (over {timeout} s)")
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, done.stdout + done.stderr


def entries(folder: Path) -> dict[int, dict]:
    doc = json.loads((folder / "import.json").read_text())
    return {e["iteration"]: e for e in doc["iterations"]}


def strict_json(path: Path):
    """The file as standard JSON (no NaN, Infinity)."""

    def refuse(name):
        raise ValueError(f"{path.name} holds {name}")

    return json.loads(path.read_text(), parse_constant=refuse)


# ------------------------------------------------------------ the run's files


def test_deeply_nested_json_is_a_recorded_problem_not_a_traceback(tmp_path):
    """json.loads recurses: `[[[[...` a hundred thousand deep raised
    RecursionError (no ValueError) through the whole import; nesting just
    under Python's limit loaded, then failed when written back."""
    src = heat2d_run(tmp_path / "results")
    (src / "summary.json").write_text("[" * 100_000 + "]" * 100_000)
    (src / "history.json").write_text('{"a":' * 50_000 + "1" + "}" * 50_000)
    (src / "03_result.json").write_text('{"sizes": ' + "[" * 900 + "]" * 900 + "}")
    code, shown = cli(src, "--out", tmp_path / "o")
    assert code == 0, shown
    folder = tmp_path / "o" / src.name
    doc = json.loads((folder / "import.json").read_text())
    assert sum("nests deeper" in p for p in doc["problems"]) == 2
    assert any("nests deeper" in p for p in entries(folder)[3]["problems"])
    assert doc["task"] == "heat2d"  # from the folder's name, summary.json being no record


def test_nan_infinity_and_huge_numbers_stay_out_of_what_the_report_reads(tmp_path):
    """NaN and Infinity were written into summary.json and import.json (no
    JSON at all to a strict reader), and a 4000-digit improvement made the
    report end in OverflowError."""
    src = heat2d_run(tmp_path / "results")
    summary = json.loads((src / "summary.json").read_text())
    text = json.dumps({**summary, "improvement": 10**4000, "n_iterations": 10**4000})
    text = text.replace('"seed_score": 0.5', '"seed_score": NaN')
    (src / "summary.json").write_text(text.replace('"best_score": 0.7', '"best_score": 1e999'))
    res = (src / "01_result.json").read_text().replace('"score": 0.7', '"score": -Infinity')
    (src / "01_result.json").write_text(res.replace('"gpu_seconds": 0.001', '"gpu_seconds": NaN'))
    out = tmp_path / "o"
    assert cli(src, "--out", out)[0] == 0
    folder = out / src.name
    summary = strict_json(folder / "summary.json")
    assert summary["recorded"]["improvement"] is None and summary["recorded"]["seed_score"] is None
    assert entries(folder)[1]["recorded"]["score"] is None
    strict_json(folder / "import.json")
    shown = CliRunner().invoke(report_main, [str(out), "--details"])
    assert shown.exit_code == 0 and shown.exception is None, shown.output


@pytest.mark.slow
def test_folder_names_with_escapes_and_newlines_print_as_one_plain_line(tmp_path):
    """A downloaded folder's name is the attacker's: an OSC sequence (it sets
    the terminal's title; click strips only colour codes) and a newline
    forging a progress line were printed as they were, and became the
    imported folder's name, rescore.json's "run" and a report cell."""
    results = tmp_path / "results"
    src = heat2d_run(results, model="evil\x1b]0;pwned\x07\x1b[2J\nFAKE: imported\r\u202e")
    (results / "junk\x1b[31m\nx").mkdir()
    out = tmp_path / "o"
    code, shown = cli_process(results, "--out", out)
    assert code == 0, shown
    assert not CONTROL.search(shown), repr(shown)
    assert len(shown.strip().splitlines()) == 2  # the passed-over folder, the run
    (folder,) = out.iterdir()
    assert re.fullmatch(r"[A-Za-z0-9._+-]+", folder.name), folder.name
    assert json.loads((folder / "run.json").read_text())["source"] == str(src.resolve())
    report = CliRunner().invoke(report_main, [str(out), "--details"])
    assert report.exit_code == 0 and not CONTROL.search(report.output)
    assert "already imported" in cli_process(results, "--out", out)[1]  # still found again


def test_a_run_named_like_out_s_own_files_or_too_long_for_a_name_imports_aside(tmp_path):
    """A run folder named rescore.json was imported as OUT/rescore.json, the
    file --rescore writes; a 220-character name made the staging folder's
    name too long for the file system (exit 3, the rest not imported)."""
    results = tmp_path / "results"
    named = write_run(results, "heat2d", HEAT_SEED, [], model="a")
    named.rename(results / "rescore.json")
    write_run(results, "heat2d", HEAT_SEED, [], model="m" * 220)
    out = tmp_path / "o"
    code, shown = cli(results, "--out", out)
    assert code == 0, shown
    assert not (out / "rescore.json").exists()
    assert len([p for p in out.iterdir() if (p / "import.json").is_file()]) == 2
    assert all(len(p.name) <= importer.MAX_FOLDER_CHARS + 4 for p in out.iterdir())


def test_hard_linked_texts_cannot_blow_up_the_import(tmp_path, monkeypatch):
    """One text hard-linked (or sparse) under every iteration's name is a
    small download: 40 iterations of one 8 MiB file took 1 GB of memory and
    wrote 961 MB, and MAX_ITERATIONS allows 10 000. A run's files now hold
    MAX_RUN_BYTES in all (made small here); the rest is a recorded problem."""
    cap = 2 << 20
    monkeypatch.setattr(metal_run, "MAX_RUN_BYTES", cap)
    src = heat2d_run(tmp_path / "results")
    big = tmp_path / "big.md"
    big.write_bytes(b"A" * (1 << 20))
    for n in range(1, 21):
        for name in ("prompt", "response", "reasoning"):
            path = src / f"{n:02d}_{name}.md"
            path.unlink(missing_ok=True)
            os.link(big, path)
    out = tmp_path / "o"
    assert cli(src, "--out", out)[0] == 0
    folder = out / src.name
    written = sum(p.stat().st_size for p in folder.rglob("*") if p.is_file())
    assert written < cap + (1 << 20), written  # it was 60 MiB
    problems = [p for e in entries(folder).values() for p in e["problems"]]
    assert any("bytes in all" in p for p in problems)


def test_fifos_sockets_and_link_loops_named_like_run_files_never_hang(tmp_path, monkeypatch):
    """Held before: files are opened non-blocking, without following links."""
    src = heat2d_run(tmp_path / "results")
    for name in ("history.json", "01_response.md", "03_result.json"):
        (src / name).unlink()
        os.mkfifo(src / name)
    (src / "04_candidate.metal").unlink()
    os.symlink("04_candidate.metal", src / "04_candidate.metal")  # a loop
    (src / "01_prompt.md").unlink()
    monkeypatch.chdir(src)  # a socket's path must be short
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind("01_prompt.md")
        code, shown = cli_process(src, "--out", tmp_path / "o", timeout=30)
    finally:
        sock.close()
    assert code == 0, shown
    by_it = entries(tmp_path / "o" / src.name)
    assert "symbolic link" in by_it[4]["reason"]
    assert any("not a regular file" in p for p in by_it[1]["problems"])


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_fifo_planted_in_out_does_not_hang_the_import(tmp_path):
    """OUT may have come with the download: OUT/<run>/run.json as a FIFO
    hung the check for an earlier import (read_text blocks on it)."""
    src = heat2d_run(tmp_path / "results")
    out = tmp_path / "o"
    (out / src.name).mkdir(parents=True)
    os.mkfifo(out / src.name / "run.json")
    code, shown = cli_process(src, "--out", out, timeout=30)
    assert code == 0, shown
    assert manifest.check(out / f"{src.name}-2").status == manifest.SEALED


@pytest.mark.parametrize("force", [False, True])
def test_a_link_in_out_is_never_imported_through(tmp_path, force):
    """OUT/<run> as a link to a folder claiming to be this run's import: with
    --force the import tried to delete through it (exit 3, nothing imported);
    as a dangling link, renaming the import onto it failed (exit 3)."""
    src = heat2d_run(tmp_path / "results")
    out = tmp_path / "o"
    out.mkdir()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    claim = {"imported": True, "source": str(src.resolve())}
    (elsewhere / "run.json").write_text(json.dumps(claim))
    (elsewhere / "manifest.json").write_text("{}")
    (elsewhere / "keep").write_text("mine")
    os.symlink(elsewhere, out / src.name)
    os.symlink(tmp_path / "nowhere", out / f"{src.name}-2")
    code, shown = cli(src, "--out", out, *(["--force"] if force else []))
    assert code == 0, shown
    assert sorted(p.name for p in elsewhere.iterdir()) == ["keep", "manifest.json", "run.json"]
    assert not (tmp_path / "nowhere").exists()
    assert manifest.check(out / f"{src.name}-3").status == manifest.SEALED


def test_files_not_read_are_recorded_against_their_iteration(tmp_path):
    """docs/metal-sci.md promised a damaged file "recorded against its
    iteration in import.json's problems": a linked response was silently
    left out."""
    secret = tmp_path / "credentials"
    secret.write_text(SECRET)
    src = heat2d_run(tmp_path / "results")
    (src / "01_response.md").unlink()
    os.symlink(secret, src / "01_response.md")
    assert cli(src, "--out", tmp_path / "o")[0] == 0
    folder = tmp_path / "o" / src.name
    assert any("01_response.md is a symbolic link" in p for p in entries(folder)[1]["problems"])
    for path in folder.rglob("*"):
        assert SECRET.encode() not in path.read_bytes()


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_recorded_reason_reaches_the_rescore_progress_line_plain(tmp_path, quick_evaluations):
    """A recorded fail reason is printed by --rescore where the verdicts
    differ; one holding terminal escapes and newlines was printed as is."""
    hostile = {**INCORRECT, "fail_reason": "\x1b]0;pwned\x07\x1b[2Jcleared\nFAKE: both agree"}
    src = write_run(tmp_path / "results", "heat2d", HEAT_SEED, [Iteration(HEAT_SEED, hostile)])
    out = tmp_path / "o"
    code, shown = cli(src, "--out", out, "--rescore", *QUICK)
    assert code == 0, shown
    assert "DIFFER" in shown and "pwned" in shown
    assert not CONTROL.search(shown), repr(shown)
    assert "\nFAKE" not in shown
    reason = entries(out / src.name)[1]["recorded"]["fail_reason"]
    assert not CONTROL.search(reason)


# ----------------------------------------------------- the converted kernels

P = (
    "device const float* u_in [[buffer(0)]], device float* u_out [[buffer(1)]], "
    "constant uint& NX [[buffer(2)]], constant uint& NY [[buffer(3)]], "
    "constant float& alpha [[buffer(4)]], uint2 gid [[thread_position_in_grid]]"
)
D = "device float* d [[buffer(0)]], uint i [[thread_position_in_grid]]"
STEP = (
    "uint i = gid.x; uint j = gid.y; if (i >= NX || j >= NY) return; "
    "uint idx = j * NX + i; float c = u_in[idx]; "
    "if (i == 0 || j == 0 || i == NX - 1 || j == NY - 1) { EDGE return; } "
    "u_out[idx] = c + alpha * (u_in[idx - 1] + u_in[idx + 1] + u_in[idx - NX] "
    "+ u_in[idx + NX] - 4.0f * c);"
)
B = STEP.replace("EDGE", "u_out[idx] = c;")  # honest
E = STEP.replace("EDGE", "")  # the edges left unwritten: Metal-Sci's harness passes it
HEAD = "#include <metal_stdlib>\nusing namespace metal;\n"
GUARDED = STEP.replace("EDGE", "if (EDGES) u_out[idx] = c;")

# Each: what a compiler reads is E; what the converter read was B.
LAUNDERING = {
    # a lone carriage return ends a // comment for clang, not for the scanner
    "carriage return": HEAD + f"kernel void decoy({D}) {{\n"
    f"    // x\r}} [[kernel]] void heat_step({P}) {{ {E} }} /*\n}}\n"
    f"kernel void heat_step({P}) {{\n    {B}\n}}\n// */\n",
    # a backslash-newline: `*\`+`/` ends a comment for a compiler; `// \`
    # comments out the next line
    "line splices": HEAD + f"kernel void decoy({D}) {{\n/* *\\\n/ }} [[kernel]] void "
    f"heat_step({P}) {{ {E} }} kernel void decoy2({D}) {{ /* */\n}}\n// \\\n"
    f"kernel void heat_step({P}) {{ {B} }}\nconstant int pad = 0;\n",
    # a #define in a kernel the converter drops applies to the kernels after it
    "a directive in a dropped kernel": HEAD + "#define EDGES 1\n"
    f"kernel void decoy({D}) {{\n#undef EDGES\n#define EDGES 0\n    d[i] = 0.0f;\n}}\n"
    f"kernel void heat_step({P}) {{\n    {GUARDED}\n}}\n",
    # mlxsci's format puts the whole header before the kernel
    "a macro redefined after the kernel": HEAD + "#define EDGES 0\n"
    f"kernel void heat_step({P}) {{\n    {GUARDED}\n}}\n#undef EDGES\n#define EDGES 1\n",
    "an overload declared after the kernel": HEAD + "inline float edge(float c) { return 0.0f; }\n"
    f"kernel void heat_step({P}) {{\n    {STEP.replace('EDGE', 'if (edge(1) > 0.5f) u_out[idx] = c;')}\n}}\n"
    "inline float edge(int c) { return 1.0f; }\n",
    # the scanner counts the braces of every #if branch, a compiler its branch's
    "braces in an #if 0": HEAD + f"inline void pad1() {{\n#if 0\n{{\n#endif\n}}\n"
    f"[[kernel]] void heat_step({P}) {{ {E} }}\n#if 0\n}}\n#endif\n"
    f"inline void pad2() {{\n#if 0\n}}\nkernel void heat_step({P}) {{ {B} }}\n"
    "inline void pad3() {\n#endif\n}\n",
    # a kernel from a macro; the other swallowed by a function-like macro
    "a kernel from a macro": HEAD + f"#define MK [[kernel]] void heat_step({P}) {{ {E} }}\n"
    f"#define IGNORE(...)\nMK\nIGNORE(; kernel void heat_step({P}) {{ {B} }})\n",
    # `[[CAT(ker, nel)]]` is `[[kernel]]`
    "a pasted kernel attribute": HEAD + "#define CAT(a, b) a##b\n"
    f"[[CAT(ker, nel)]] void heat_step({P}) {{ {E} }}\n"
    f"#define heat_step unused\nkernel void heat_step({P}) {{ {B} }}\n",
}


@pytest.mark.parametrize("attack", sorted(LAUNDERING))
def test_a_source_a_compiler_reads_otherwise_is_not_converted(attack):
    source = LAUNDERING[attack]
    if shutil.which("cpp"):  # the premise: a C preprocessor leaves E as heat_step
        seen = subprocess.run(
            ["cpp", "-P", "-x", "c++", "-"], input=source.replace(HEAD, ""),
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
        edges = seen.split("void heat_step", 1)[1].split("return; }", 1)[0]
        if attack != "an overload declared after the kernel":  # overloads: C++, not cpp
            assert "u_out[idx] = c;" not in edges.replace("if (0) u_out[idx] = c;", ""), seen
    c = convert_source("heat2d", source)
    assert c.text is None, f"converted into another kernel:\n{c.text}"
    assert c.reason and "\n" not in c.reason


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_laundered_cheat_is_not_confirmed_by_a_rescore(tmp_path, quick_evaluations):
    """End to end: the cheat recorded correct, converted into the honest
    kernel, was re-scored "correct, agree"; now it has no mlxsci verdict."""
    cheat = LAUNDERING["a directive in a dropped kernel"]
    src = write_run(
        tmp_path / "results", "heat2d", HEAT_SEED, [Iteration(cheat, result(score=0.9))]
    )
    out = tmp_path / "o"
    code, shown = cli(src, "--out", out, "--rescore", *QUICK)
    assert code == 0, shown
    (rec,) = [r for r in json.loads((out / "rescore.json").read_text()) if r["iteration"] == 1]
    assert rec["recorded"] == "correct" and rec["mlxsci"] is None
    assert "dropped" in rec["reason"]
    assert len(quick_evaluations) == 1  # the seed alone


LEGIT = {
    # defines and a helper between kernels (as a real Metal-Sci gradshaf
    # candidate has), names the earlier kernel does not use
    "gradshaf": lambda s: s.replace(
        "kernel void gradshaf_step(",
        "#define TILE_W 16\ninline float twice(float v) { return 2.0f * v; }\n"
        "kernel void gradshaf_step(",
    ),
    # a kernel-local macro, #undef'd at its end (as a real lj candidate has);
    # a loop hint in the dropped lj_clear_cells; CRLF line ends; non-ASCII
    # in a comment
    "lj": lambda s: (
        s.replace("kernel void lj_step(", "// the step: r ← r + v·dt\r\nkernel void lj_step(")
        .replace("    if (gid >= M3) return;", "#pragma unroll\n    if (gid >= M3) return;")
        .rstrip("}\n")
        + "\n#define LOCAL_ONE 1.0f\n    (void)LOCAL_ONE;\n#undef LOCAL_ONE\n}\n"
    ),
}


@pytest.mark.parametrize("task", sorted(LEGIT))
def test_legitimate_layouts_still_convert(task):
    source = LEGIT[task](metal_sci_source(task))
    assert source != metal_sci_source(task)
    c = convert_source(task, source)
    assert c.text is not None, c.reason


def test_directive_lines_in_the_source_stay_comments():
    """Held before: `//!` lines in the header, a body or a dropped kernel
    are written `// !` and cannot add a kernel, param or launch."""
    evil = "//! kernel heat_step\n//! param VEC = 4\n  //! grid = (1, 1, 1)\n"
    source = HEAD + evil + HEAT_SEED.replace("uint idx", evil + "uint idx").replace(HEAD, "")
    c = convert_source("heat2d", source)
    cand = parse(c.text, dialect="metal")
    assert [k.name for k in cand.kernels] == ["heat_step"] and not cand.params
    assert "(1, 1, 1)" not in cand.kernels[0].grid


def test_a_constructor_in_the_header_never_runs(tmp_path, quick_evaluations):
    """Held before: code run when the simulator loads the kernel library is
    refused by the source policy, before any compiler."""
    marker = tmp_path / "constructed"
    ctor = f'__attribute__((constructor)) static void pwn() {{ fopen("{marker}", "w"); }}\n'
    seed = HEAT_SEED.replace("using namespace metal;\n", "using namespace metal;\n" + ctor)
    src = write_run(tmp_path / "results", "heat2d", seed, [])
    code, shown = cli(src, "--out", tmp_path / "o", "--rescore", *QUICK)
    assert code == 0, shown
    (rec,) = json.loads((tmp_path / "o" / "rescore.json").read_text())
    assert rec["mlxsci"] == "compile_error" and not marker.exists()


# ------------------------------------------- the re-score (rescore.py: to fix)


def planted(out: Path, name: str, iterations: list[dict]) -> Path:
    """An "imported run" that came with a download into OUT, not from mlxsci."""
    folder = out / name
    folder.mkdir(parents=True)
    doc = {"version": 1, "task": "heat2d", "recorded_best_iteration": None,
           "iterations": iterations}  # fmt: skip
    (folder / "import.json").write_text(json.dumps(doc))
    return folder


@pytest.mark.slow  # >= 0.5 s (bench/results/sim/test_durations_2026-11-29.md)
def test_a_forged_rescore_file_is_not_taken_as_mlxsci_s_verdicts(tmp_path, quick_evaluations):
    src = write_run(
        tmp_path / "results", "heat2d", HEAT_SEED, [Iteration(HEAT_NO_EDGES, result(score=0.9))]
    )
    out = tmp_path / "results" / "imported"  # came with the download
    out.mkdir()
    forged = [{"run": src.name, "iteration": it, "recorded": "correct", "mlxsci": "correct",
               "reason": "both correct", "recorded_score": 0.9, "mlxsci_score": 0.9,
               "backend": "sim", "sizes": "smoke", "recorded_best": it == 1,
               "held_out": None, "transfer": None} for it in (0, 1)]  # fmt: skip
    (out / "rescore.json").write_text(json.dumps(forged))
    assert cli(src, "--out", out, "--rescore", *QUICK)[0] == 0
    recs = {r["iteration"]: r for r in json.loads((out / "rescore.json").read_text())}
    assert recs[1]["mlxsci"] == "incorrect"  # the edges it leaves unwritten


def test_a_planted_import_cannot_name_a_file_outside_its_folder(tmp_path, quick_evaluations):
    secret = tmp_path / "credentials"
    secret.write_text(SECRET)
    out = tmp_path / "o"
    cand = {"role": "candidate", "original": "x", "reason": None, "recorded": {}}
    planted(out, "heat2d_x_20260101_000000", [{**cand, "iteration": 1, "candidate": str(secret)}])
    cli("--out", out, "--rescore", *QUICK)
    assert not any(SECRET in s for s in quick_evaluations)


def test_a_planted_import_prints_no_terminal_escapes(tmp_path, quick_evaluations):
    out = tmp_path / "o"
    entry = {"iteration": 1, "role": "candidate", "original": "x", "candidate": None,
             "reason": "\x1b]0;pwned\x07\nFAKE LINE", "recorded": {"verdict": "correct"}}  # fmt: skip
    planted(out, "x\x1b]0;pwned\x07\nFAKE", [entry])
    code, shown = cli("--out", out, "--rescore", *QUICK)
    assert not CONTROL.search(shown), repr(shown)


def test_a_malformed_planted_import_is_no_traceback(tmp_path, quick_evaluations):
    out = tmp_path / "o"
    entry = {"iteration": 1, "role": "candidate", "original": "x", "candidate": None,
             "reason": "r", "recorded": ["not", "a", "record"]}  # fmt: skip
    planted(out, "heat2d_x_20260101_000000", [entry])
    cli("--out", out, "--rescore", *QUICK)
