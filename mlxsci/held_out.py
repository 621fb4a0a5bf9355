"""The held-out gate's configurations: the task's listed one, or one drawn in secret.

Metal-Sci's held-out sizes are printed in its README (and in ours), so a
model trained on the web may know them: a gain that holds there may be recall
of a disclosed configuration rather than a kernel that generalises. A held-out
stays a test only on axes the search cannot enumerate. So each built-in task
declares how to draw one (Task.draw_held_out): sizes off the power-of-two grid
and away from every listed size, and an input distribution other than the one
the search scores on. `draw_problems` is what every draw must satisfy, whatever
the task's own function returns; a draw that fails it is drawn again.

Two modes, `--held-out secret|metal-sci`: metal-sci evaluates the task's listed
held-out size (comparable with the paper); secret (the default) draws one per
run from a secret no proposer sees. The run records a commitment to the secret
when it starts (run.json: a public nonce and the digest of nonce and secret)
and reveals the secret and the drawn configuration when it ends; `verify`
checks the one against the other. Between the two the secret is in no file:
it is derived from the nonce with this machine's key (`machine_key`, a file in
the mlxsci cache that no worker's sandbox may read), so a run killed midway
draws the same configuration when it resumes on the same machine.
"""

from __future__ import annotations

import hashlib
import hmac
import math
import os
import secrets
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

from mlxsci.storage.cache import cache_dir
from mlxsci.storage.faults import faults_raised
from mlxsci.task import SIZE_SETS, Size, Task

MODES = ("secret", "metal-sci")
DEFAULT_MODE = "secret"
SECRET_LABEL = "secret held-out"
DRAW_ATTEMPTS = 2000
# A draw may cost at most this many times the listed held-out size (in bytes
# moved, FLOPs and working set), so it runs wherever the listed one does.
COST_CAP = 2.0
# What a commitment hashes: this tag, the task, the nonce and the secret.
COMMITMENT_TAG = "mlxsci held-out draw v1"
COMMITMENT_MISMATCH = "the revealed secret does not match the commitment made at the start"


class HeldOutUnavailable(Exception):
    """The run's secret cannot be derived here (another machine's key, or a
    key that changed): its commitment does not match."""


# ---------------------------------------------------------------- the rules
def listed_sizes(task: Task) -> list[Size]:
    """Every size the task lists (smoke, in-dist, held-out): all published."""
    return [s for which in SIZE_SETS for s in task.sizes.get(which, ())]


def published_values(task: Task) -> dict[str, set]:
    """Each size parameter's values over the listed sizes (and the defaults)."""
    values: dict[str, set] = {name: {value} for name, value in task.defaults.items()}
    for size in listed_sizes(task):
        for name, value in size.params.items():
            values.setdefault(name, set()).add(value)
    return values


def is_power_of_two(value) -> bool:
    return isinstance(value, int) and value >= 2 and value & (value - 1) == 0


def cost(task: Task, params: dict) -> tuple[float, float, float]:
    """(bytes moved, FLOPs, working set) of a size: what COST_CAP bounds."""
    return (
        float(task.bytes_moved(params)),
        float(task.flops(params)),
        float(task.working_set(params)),
    )


def draw_problems(task: Task, params: dict) -> list[str]:
    """What makes `params` no valid held-out of `task` (empty: valid): a
    size parameter missing; the task's validate_size refuses it; an input
    distribution it lacks; a configuration equal to a listed size; a varied
    parameter on a listed value or, outside task.power_of_two_params, on the
    power-of-two grid; a cost beyond COST_CAP times the listed held-out's."""
    missing = [name for name in task.defaults if name not in params]
    if missing:
        return [f"no value for {', '.join(missing)}"]
    try:
        task.validate_size(params)
    except (ValueError, KeyError, TypeError) as exc:
        return [f"the task refuses it: {exc}"]
    plain = [k for k, v in params.items() if type(v) not in (int, float, str)]
    if plain:  # a run.json records them, and a reveal must compare equal
        return [f"{', '.join(plain)} must be a Python int, float or str"]
    problems = []
    distribution = params.get("distribution")
    if distribution is not None and distribution not in task.distributions:
        problems.append(f"no input distribution {distribution!r}")
    if any(size.params == params for size in listed_sizes(task)):
        problems.append("it is a listed size")
    # The parameters whose value differs between listed sizes are the axes a
    # held-out must move off (those held constant, such as hmc's T, may stay).
    for name, listed_values in published_values(task).items():
        if len(listed_values) < 2 or name in task.power_of_two_params:
            continue
        value = params.get(name)
        if value in listed_values:
            problems.append(f"{name}={value} is a listed value")
        elif is_power_of_two(value):
            problems.append(f"{name}={value} is a power of two")
    listed = task.sizes["held-out"][0].params
    costs = zip(("bytes", "FLOPs", "working set"), cost(task, params), cost(task, listed))
    for what, mine, theirs in costs:
        if not math.isfinite(mine) or mine > COST_CAP * theirs:
            problems.append(f"its {what} exceed {COST_CAP:g}x the listed held-out's")
    return problems


def draw(task: Task, secret: int) -> Size:
    """The held-out configuration `secret` draws for `task`: task.draw_held_out
    with a Generator seeded by the secret, drawn again until draw_problems
    has nothing to say. ValueError when the task declares no draw or none of
    DRAW_ATTEMPTS draws is valid (a broken declaration)."""
    if task.draw_held_out is None:
        raise ValueError(f"{task.name} declares no secret held-out (Task.draw_held_out)")
    rng = np.random.default_rng(secret)
    last: list[str] = []
    for _ in range(DRAW_ATTEMPTS):
        params = task.draw_held_out(rng)
        last = draw_problems(task, params)
        if not last:
            return Size(SECRET_LABEL, params, held_out=True)
    raise ValueError(
        f"{task.name}'s draw_held_out gave no valid held-out in {DRAW_ATTEMPTS} draws "
        f"(the last: {'; '.join(last)})"
    )


def describe(params: dict | None) -> str:
    """A configuration as the last lines of a run or command show it once
    revealed: `NX=934, NY=840, n_steps=65, distribution=smooth`."""
    return ", ".join(f"{k}={v}" for k, v in (params or {}).items())


def second_distribution(task: Task, held_out: Size | None = None) -> str | None:
    """The input distribution a transfer check runs at the search's sizes:
    the drawn held-out's when it names one, else the task's first; None for
    a task without any."""
    if held_out is not None and held_out.params.get("distribution"):
        return held_out.params["distribution"]
    return next(iter(task.distributions), None)


# ---------------------------------------------------------- the commitment
@faults_raised  # a read-only or full cache is the machine's fault (exit 3), not a bug
def machine_key() -> bytes:
    """This machine's key for deriving runs' secrets: 32 random bytes made
    once, in the mlxsci cache outside what a worker's sandbox may read
    (mode 0600; made whole or not at all)."""
    path = cache_dir("held-out") / "machine.key"
    try:
        key = path.read_bytes()
        if len(key) == 32:
            return key
    except FileNotFoundError:
        pass
    tmp = path.with_name(f".machine.key.{os.getpid()}.{secrets.token_hex(4)}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as out:
        out.write(secrets.token_bytes(32))
    try:
        os.link(tmp, path)  # the first process to link wins; others read its key
    except FileExistsError:
        if len(path.read_bytes()) != 32:  # a damaged key from before: replaced
            os.replace(tmp, path)
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path.read_bytes()


def commitment(task_name: str, nonce: str, secret_hex: str) -> str:
    text = f"{COMMITMENT_TAG}|{task_name}|{nonce}|{secret_hex}"
    return hashlib.sha256(text.encode()).hexdigest()


def _derive(task_name: str, nonce: str) -> str:
    message = f"{task_name}|{nonce}".encode()
    return hmac.new(machine_key(), message, hashlib.sha256).hexdigest()[:32]


@dataclass(frozen=True)
class HeldOutDraw:
    """A run's held-out, as run.json records it. mode metal-sci: the task's
    listed size, nothing secret. mode secret: `nonce` and `commitment` from
    the start; `secret` (hex) and `params` (the drawn configuration) only
    once revealed."""

    mode: str
    task: str
    nonce: str = ""
    commitment: str = ""
    secret: str | None = None
    params: dict | None = None

    @property
    def revealed(self) -> bool:
        return self.secret is not None

    def to_json(self) -> dict:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict) -> HeldOutDraw:
        """The record a run.json or summary.json holds; ValueError for one
        that is not shaped as one (a hand-edited or damaged file)."""
        if not isinstance(data, dict) or data.get("mode") not in MODES:
            raise ValueError(f"not a held-out draw record: {str(data)[:200]}")
        texts = [k for k in ("task", "nonce", "commitment") if not isinstance(data.get(k, ""), str)]
        secret, params = data.get("secret"), data.get("params")
        if texts or not (secret is None or is_secret_text(secret)):
            raise ValueError(f"a held-out draw record with a malformed {(texts or ['secret'])[0]}")
        if not (params is None or isinstance(params, dict)):
            raise ValueError("a held-out draw record whose params are not an object")
        fields = ("mode", "task", "nonce", "commitment", "secret", "params")
        return cls(**{k: data[k] for k in fields if k in data})


def is_secret_text(value) -> bool:
    """A secret as records hold it: 32 hex digits (_derive's)."""
    return (
        isinstance(value, str) and len(value) == 32 and all(c in "0123456789abcdef" for c in value)
    )


def begin(task: Task, mode: str = DEFAULT_MODE) -> HeldOutDraw:
    """A new run's held-out: for secret, a fresh nonce and the commitment to
    the secret this machine derives from it (nothing of the draw itself)."""
    if mode not in MODES:
        raise ValueError(f"held-out mode must be one of {', '.join(MODES)}, not {mode!r}")
    if mode == "metal-sci":
        return HeldOutDraw(mode, task.name)
    nonce = secrets.token_hex(16)
    secret = _derive(task.name, nonce)
    return HeldOutDraw(mode, task.name, nonce, commitment(task.name, nonce, secret))


def secret_of(record: HeldOutDraw) -> str:
    """The secret (hex) of a secret-mode record, derived anew from its nonce
    with this machine's key: never read from the record, so a secret planted
    in a run.json (with a commitment to match) draws nothing.
    HeldOutUnavailable when what this machine derives does not match the
    commitment (another machine's run, or a key that changed)."""
    secret = _derive(record.task, record.nonce)
    if commitment(record.task, record.nonce, secret) != record.commitment:
        raise HeldOutUnavailable(
            "this run's secret held-out was drawn with another machine's key (or this "
            f"machine's key, {cache_dir('held-out') / 'machine.key'}, changed, or its "
            "run.json was edited): resume it on the machine that started it"
        )
    return secret


def held_out_sizes(task: Task, record: HeldOutDraw) -> list[Size]:
    """The sizes the held-out gate evaluates for `record`."""
    if record.mode == "metal-sci":
        return list(task.size_set("held-out"))
    return [draw(task, int(secret_of(record), 16))]


def reveal(task: Task, record: HeldOutDraw) -> HeldOutDraw:
    """The record with its secret and drawn configuration written out (a run's end)."""
    if record.mode == "metal-sci" or record.revealed:
        return record
    secret = secret_of(record)
    return replace(record, secret=secret, params=draw(task, int(secret, 16)).params)


def verify(task: Task, record: HeldOutDraw) -> list[str]:
    """What does not hold in a revealed record (empty: it holds): the secret
    matches the commitment made at the start, and it draws the params recorded."""
    if record.mode == "metal-sci":
        return []
    if record.secret is None:
        return ["the secret is not revealed (the run has not finished)"]
    problems = []
    if commitment(record.task, record.nonce, record.secret) != record.commitment:
        problems.append(COMMITMENT_MISMATCH)
    try:
        drawn = draw(task, int(record.secret, 16)).params
    except ValueError as exc:
        return problems + [str(exc)]
    if drawn != record.params:
        problems.append("the recorded configuration is not what the secret draws")
    return problems


def effective_mode(task: Task, mode: str) -> str:
    """`mode`, or metal-sci for a task that declares no secret draw (a task
    folder of your own without draw_held_out)."""
    return mode if task.draw_held_out is not None else "metal-sci"
