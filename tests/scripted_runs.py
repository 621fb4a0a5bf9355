"""Searches with scripted proposers and crafted evaluations, shared by the search
and integrity tests."""

import types

from mlxsci.search import loop, run
from mlxsci.search.proposers import Proposal, Proposer
from mlxsci.task import load_task

SAXPY = load_task("saxpy")
REAL_COMPARE = loop.compare


HEAD = (
    "//! kernel saxpy\n//! grid = (ceil_div(N, 256) * 256, 1, 1)\n//! threadgroup = (256, 1, 1)\n"
)


class Scripted(Proposer):
    """Answers with the given texts in turn; records what it was shown."""

    name = "scripted"

    def __init__(self, answers, cost=0.0):
        self.answers = list(answers)
        self.cost = cost
        self.seen = []

    def propose(self, ctx):
        self.seen.append(ctx)
        text = self.answers.pop(0) if self.answers else None
        if isinstance(text, Exception):
            return Proposal(text=None, error=str(text), cost_usd=self.cost)
        return Proposal(
            text=text,
            input_tokens=100,
            output_tokens=50,
            cost_usd=self.cost,
            reasoning="thinking..." if text else None,
            model="scripted",
        )


def fenced(src):
    return f"Here is a faster kernel.\n```metal\n{src}```\n"


SMOKE_LABEL = SAXPY.size_set("smoke")[0].label


HELD_LABEL = SAXPY.size_set("held-out")[0].label


def variant(name):
    """A correct-looking candidate the crafted evaluator knows by name."""
    return SAXPY.seed() + f"// crafted: {name}\n"


class Crafted:
    """Stands in for mlxsci.evaluation.evaluator.evaluate: each candidate (by its `crafted:`
    marker; the seed otherwise) has a given S and S noise on the search sizes
    and a given Phi and Phi noise at the held-out size (Phi None: it fails there)."""

    def __init__(self, table):
        self.table = table  # name -> (S, S noise, Phi, Phi noise)
        self.calls = []

    def __call__(self, task, source, *, size_set=None, sizes=None, timer=None, **kw):
        # The held-out: the listed set by name, or a secret draw's sizes. Any
        # other sizes (a transfer check's second input distribution) score as
        # the search sizes do.
        held = size_set == "held-out" or any(SAXPY.is_held_out(s) for s in sizes or ())
        given = "held-out" if held else (size_set or "given sizes")
        self.calls.append({"size_set": given, "timer": timer})
        name = crafted_name(source)
        score, noise, phi, phi_noise = self.table[name]
        if held:
            ok = phi is not None
            sizes = [
                {
                    "label": HELD_LABEL,
                    "held_out": True,
                    "correct": ok,
                    "fraction": phi,
                    "noise": phi_noise,
                    "timer": "sim",
                    "seconds": 1e-3,
                    "fail_reason": None
                    if ok
                    else f"correctness failed at size {HELD_LABEL}: max_abs=1 (tol=0.0001)",
                }
            ]
            cand = {
                "compile_ok": True,
                "correct": ok,
                "score": None if ok else 0.0,
                "phi": phi,
                "noise": None,
                "fail_reason": sizes[0]["fail_reason"],
            }
        else:
            sizes = [
                {
                    "label": SMOKE_LABEL,
                    "held_out": False,
                    "correct": True,
                    "fraction": score,
                    "noise": noise,
                    "timer": "sim",
                    "seconds": 1e-3,
                    "kernels": {"saxpy": {"launches": 1, "seconds": 1e-3}},
                }
            ]
            cand = {
                "compile_ok": True,
                "correct": True,
                "score": score,
                "phi": None,
                "noise": noise,
                "fail_reason": None,
            }
        result = {
            "task": "saxpy",
            "backend": "sim",
            "device": "crafted",
            "dialect": "metal",
            "timer": timer or "sim",
            "candidate": cand,
            "sizes": sizes,
        }
        return types.SimpleNamespace(to_json=lambda: result)


def crafted_name(source: str) -> str:
    return source.split("// crafted: ")[1].strip() if "// crafted: " in source else "seed"


def crafted_compare(table):
    """Stands in for mlxsci.evaluation.comparison.compare in a crafted run
    (the transfer check's interleaved timings): the speedup its table gives,
    the S ratio (the Phi ratio at a held-out), 1 % noise."""

    def compare(task, baseline, candidate, *, sizes=None, **kw):
        held = any(SAXPY.is_held_out(s) for s in sizes or ())
        column = 2 if held else 0
        old, new = table[crafted_name(baseline)][column], table[crafted_name(candidate)][column]
        if not old or not new:
            return {"timer": "sim", "error": "crafted: no time"}
        return {"timer": "sim", "sizes": [], "speedup": new / old, "noise": 0.01}

    return compare


def crafted_run(tmp_path, monkeypatch, table, names, **kw):
    fake = Crafted(table)
    monkeypatch.setattr(loop, "evaluate", fake)
    if loop.compare is REAL_COMPARE:  # (a test may stand its own in)
        monkeypatch.setattr(loop, "compare", crafted_compare(table))
    proposer = Scripted([fenced(variant(n)) for n in names])
    summary = run(
        "saxpy", proposer=proposer, iterations=len(names), backend="sim", out=tmp_path / "run", **kw
    )
    return summary, fake, proposer


# name -> (S, S noise, Phi, Phi noise); the seed: S 0.30, Phi 0.50
SEED = (0.30, 0.01, 0.50, 0.02)
