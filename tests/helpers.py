"""Helpers tests share (they import them by name: pytest puts tests/ on
sys.path, as for tests/fake_llm_server.py)."""

import json
import subprocess
import sys
from pathlib import Path

from click.testing import CliRunner

from mlxsci.evaluation.evaluator import evaluate
from mlxsci.evaluation.results import Evaluation
from mlxsci.kernel.candidate import parse
from mlxsci.kernel.plan import plan_candidate
from mlxsci.protocol.jobs import SizeJob
from mlxsci.task import load_task

# The held-out gate at the task's listed held-out size, for the searches and
# sweeps of tests whose subject is something else: a secret draw may cost up
# to twice as much (mlxsci.held_out.COST_CAP), ~10 s at the end of a saxpy
# run on the simulator. The tests of the draw itself keep the secret mode.
LISTED_HELD_OUT = "metal-sci"


def smoke_eval(task: str, source: str | None = None, dialect: str | None = None) -> Evaluation:
    """`source` (None: the task's seed) evaluated on the simulator at the task's
    smoke sizes with one warm-up and one measured run: the quickest full
    evaluation that still reaches a correctness verdict, which is all a
    wrong-candidate test looks at. dialect None: evaluate's default (metal)."""
    return evaluate(
        task, source, backend="sim", dialect=dialect, size_set="smoke", n_warmup=1, n_measure=1
    )


def size_job(
    task: str = "saxpy",
    source: str | None = None,
    dialect: str = "metal",
    filename: str = "seed.metal",
    params: dict | None = None,
    **fields,
) -> SizeJob:
    """A size job of `source` (None: the task's seed in `dialect`) as the
    parent hands it over, on the simulator with one warm-up and one timed run;
    `fields` set any other of SizeJob's fields."""
    t = load_task(task)
    text = source if source is not None else t.seed(dialect)
    plan = plan_candidate(parse(text, dialect=dialect, filename=filename), t.kernels, filename)
    settings = {
        "task": t.ref,
        "backend": "sim",
        "backend_options": {"dialect": dialect},
        "plan": plan,
        "params": params or {},
        "n_warmup": 1,
        "n_measure": 1,
    }
    return SizeJob(**{**settings, **fields})


def replace_once(source: str, old: str, new: str) -> str:
    """`source` with its one `old` replaced by `new`; fails the test when `old`
    is not there exactly once, so an edited seed cannot silently turn a
    wrong-candidate test into a test of the seed."""
    assert source.count(old) == 1, f"{old!r} occurs {source.count(old)} times"
    return source.replace(old, new)


def usage_error(command, args, *needles) -> str:
    """Run a click command; it must exit 2 with a one-line "Error: " message
    holding every needle and no traceback. Returns its output."""
    out = CliRunner().invoke(command, [str(a) for a in args])
    assert out.exit_code == 2, (out.exit_code, out.output, out.exception)
    assert isinstance(out.exception, SystemExit), out.exception
    assert "Traceback" not in out.output
    assert out.output.rstrip().splitlines()[-1].startswith("Error: "), out.output
    for needle in needles:
        assert needle in out.output, out.output
    return out.output


def _no_check(*args, **kwargs) -> None:
    return None


def kernel_rules_off(monkeypatch) -> None:
    """Switch off, in this process (where kernels are checked and built), what
    refuses hostile text before it runs: the source policy, the dialects'
    language rules and the kernel's symbol check. For tests of what stands
    behind them (the sandbox, the symbol check alone, a worker's death)."""
    from mlxsci.backends.sim import kernel_symbols, language_rules
    from mlxsci.kernel.source import policy as source_policy

    monkeypatch.setattr(source_policy, "check_candidate", _no_check)
    monkeypatch.setattr(language_rules, "check", _no_check)
    monkeypatch.setattr(kernel_symbols, "object_violation", _no_check)


def kernel_object(tmp_path, text: str):
    """`text` (C++) compiled with the simulator's flags into tmp_path/t.o,
    an object for the kernel symbol check (mlxsci/backends/sim/kernel_symbols.py)."""
    from mlxsci.backends.sim import toolchain

    cpp = tmp_path / "t.cpp"
    cpp.write_text(text)
    obj = tmp_path / "t.o"
    res = toolchain.run_compiler(
        ["c++", *toolchain.CXX_FLAGS, "-x", "c++", "-c", str(cpp), "-o", str(obj)]
    )
    assert res.returncode == 0, res.stderr
    return obj


MLX_VERBOSE_SOURCE = Path(__file__).resolve().parent / "mlx_verbose_source.py"


def mlx_verbose_output(case: dict) -> str:
    """What the installed MLX prints with verbose=True for the Metal kernel
    call `case` describes (tests/mlx_verbose_source.py: its fields), run in a
    subprocess because MLX prints from C++ to fd 1."""
    proc = subprocess.run(
        [sys.executable, str(MLX_VERBOSE_SOURCE)],
        input=json.dumps(case),
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout
