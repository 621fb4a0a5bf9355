"""The search loop: generations of proposals, evaluated, decided, recorded.

`run(...)` is what `python -m mlxsci.search` calls; it is also the library
entry point. A run directory holds every artefact (search/rundir.py), so a
killed run resumes with `resume=RUN_DIR` and repeats nothing it finished.

Each generation: the strategy asks for up to `population` requests
(search/strategies.py); their prompts are written and their calls planned
under the cost cap (`Search.slots`); the calls go out together and each
answer is evaluated as it arrives (search/generation.py); then, in slot
order, each outcome is recorded and may become the run's best (`decide`),
the strategy is told, and the generation's records are appended in one
write (the commit point). One proposal a generation is Metal-Sci's loop,
byte for byte.

Held-out sizes never reach a proposer: candidates are scored on the search
sizes (in-dist on a GPU, smoke on the simulator, or --sizes), and only after
the last iteration are the seed and the best evaluated at the held-out size,
giving Phi for each and the outcome.

Whether S or Phi changed is judged against the measured noise, with the same
verdicts the report uses (mlxsci.evaluation.verdicts). With accept="noise-aware" a
candidate the strict rule would take is re-timed against the incumbent in
one worker (mlxsci.evaluation.comparison.compare) and taken only when the speedup lies
beyond the noise.

A failed call never ends a run: it is a skipped iteration, recorded with its
reason (history.jsonl, NN_proposal.json) and shown on the console. A run whose
proposals gave no candidate at all ends with outcome "no_candidates". With
max_cost, each call's worst-case cost (proposer.worst_case_cost) must fit in
what is left of the cap before the call is made, the generation's other
calls and what saved answers cost counted; a call of unknown cost goes out
alone; a model without a price is refused under a cap, and warned about
without one.

A run's options (one record, SearchOptions) are built and checked in
search/options.py, its summary judged in search/summary.py, its files written
and read back by search/iteration_files.py (an IterationFiles that `Search`
holds) and its console lines worded in search/progress.py.
"""

from __future__ import annotations

import dataclasses
import math
import os
import time
from contextlib import ExitStack
from pathlib import Path

from mlxsci import held_out
from mlxsci.backends import backend_info
from mlxsci.evaluation.comparison import compare
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.evaluation.runner import spare_workers
from mlxsci.kernel.candidate import extract_from_response
from mlxsci.search import run_lock
from mlxsci.search.features import cell_of
from mlxsci.search.generation import Generation, Hooks, Slot, idle_seconds, normalised_hash
from mlxsci.search.iteration_files import IterationFiles
from mlxsci.search.options import (
    GIVEN_ANEW,
    SearchOptions,
    check_extension,
    check_priced,
    default_run_dir,
    given_options,
    held_out_record,
    make_run_dir,
    new_options,
    proposer_for,
    search_dialect,
    with_new_draw,
)
from mlxsci.search.progress import (
    S_AND_PHI,
    done_line,
    fmt,
    generation_line,
    iteration_line,
    stops_say_how_to_resume,
)
from mlxsci.search.prompts import archive_prompt, stagnating, system_prompt, user_prompt
from mlxsci.search.proposers import ModelMix, PromptContext, Proposal, choose_models
from mlxsci.search.rundir import RunDir, spent_usd
from mlxsci.search.strategies import (
    Context,
    Entry,
    Outcome,
    Request,
    State,
    make_strategy,
    noise_aware_decision,
)
from mlxsci.search.summary import entry_score, reopen_record, summarize, write_search_record
from mlxsci.storage.faults import fault_of
from mlxsci.task import Size, load_task
from mlxsci.transfer import judge_transfer


def well_formed(proposal, model: str = "") -> Proposal:
    """The proposer's answer as a run can record it: text that cannot be
    written as UTF-8 (a lone surrogate a JSON escape can carry) replaced, and
    an answer whose text is not text, or whose cost or token counts are not
    counts (NaN, negative, not numbers: they would switch the cost cap off
    or stop every resume), made a failed call saying so. Someone's answer
    never stops a run."""
    if not isinstance(proposal, Proposal):
        return Proposal(
            text=None, error=f"the proposer answered a {type(proposal).__name__}", model=model
        )

    def clean(text) -> str | None:
        if not isinstance(text, str):
            return None
        return text.encode("utf-8", "replace").decode("utf-8")

    problems = []
    counts = {}
    for name in ("input_tokens", "output_tokens"):
        value = getattr(proposal, name)
        ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        counts[name] = value if ok else 0
        if not ok:
            problems.append(f"{name} {value!r}")
    cost = proposal.cost_usd
    if isinstance(cost, bool) or not isinstance(cost, (int, float)) or math.isnan(cost) or cost < 0:
        problems.append(f"cost_usd {cost!r}")
        cost = 0.0
    if proposal.text is not None and not isinstance(proposal.text, str):
        problems.append(f"its text is a {type(proposal.text).__name__}")
    error = proposal.error if proposal.error is None else clean(str(proposal.error))
    if problems:
        error = "the proposer's answer cannot be recorded: " + "; ".join(problems)
    return Proposal(
        text=None if problems else clean(proposal.text),
        reasoning=clean(proposal.reasoning),
        input_tokens=counts["input_tokens"],
        output_tokens=counts["output_tokens"],
        cost_usd=float(cost),
        error=error,
        model=proposal.model if isinstance(proposal.model, str) else model,
        exhausted=proposal.exhausted is True,
    )


class CostCapReached(Exception):
    """The next call could cost more than what is left of max_cost: the run stops before it."""


class Search:
    """One run: options, run directory (and its iteration files), proposer,
    and the state between iterations."""

    def __init__(self, opts: SearchOptions, rd: RunDir, proposer, say):
        self.opts = opts
        self.rd = rd
        self.files = IterationFiles(rd)
        self.proposer = proposer
        self.say = say
        self.task = load_task(opts.task)
        self.backend = opts.backend
        self.dialect = search_dialect(opts)
        self.strategy = make_strategy(
            opts.strategy,
            seed=opts.seed,
            islands=opts.islands,
            migration_interval=opts.migration_interval,
            kernels=tuple(self.task.kernel_names),
        )
        # normalised text -> (iteration, result) of every candidate evaluated so far
        self.evaluated: dict[str, tuple[int, dict]] = {}
        self.cut_by_cost = False  # the last generation was cut short by max_cost
        self.draw = held_out_record(opts, self.task)
        self.held_out_sizes = held_out.held_out_sizes(self.task, self.draw)

    # -- evaluation ---------------------------------------------------------
    def evaluate(
        self, source: str, filename: str, sizes: str | list[Size], coverage: bool = False
    ) -> dict:
        """An evaluation of `source` at `sizes` (a size set's name, or the
        sizes themselves: a held-out draw); with `coverage`, on a backend that
        measures it, the branch arms it ran (a transfer check's evidence)."""
        # announce: a first run on a machine builds the simulator's compiler and
        # measures the roofline, and says so rather than stay silent for minutes.
        where = {"size_set": sizes} if isinstance(sizes, str) else {"sizes": list(sizes)}
        common = dict(
            backend=self.backend,
            **where,
            **({"coverage": True} if coverage else {}),
            filename=filename,
            timeout=self.opts.timeout,
            dialect=self.dialect,
            sim_gpu=self.opts.sim_gpu,
            announce=self.say,
            keep_implausible=self.opts.keep_implausible,
        )
        tool = self.opts.sanitize
        if tool:
            # Under the sanitizer first: a fault it names is the verdict; times
            # come only from the run without it, so scores stay comparable.
            checked = evaluate(self.task.name, source, sanitize=tool, **common)
            if not checked.correct:
                return checked.to_json()
        result = evaluate(self.task.name, source, timer=self.opts.timer, **common).to_json()
        if tool:
            result["sanitizer_check"] = tool  # passed under compute-sanitizer `tool`
        return result

    def timed_pair(self, baseline: str, candidate: str, sizes: list[Size]) -> dict:
        """Baseline and candidate timed interleaved at `sizes` (the transfer
        check's speedups); a failed comparison is an {"error"}, the machine's
        fault raised."""
        try:
            return compare(
                self.task.name, baseline, candidate, backend=self.backend, sizes=sizes,
                filenames=("seed", "best"), dialect=self.dialect, timer=self.opts.timer,
                timeout=self.opts.timeout, held_out=True, sim_gpu=self.opts.sim_gpu,
            )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - the figures' ratio stands in
            fault = fault_of(exc)
            if fault is not None:
                raise fault from exc
            return {"error": f"comparison failed: {type(exc).__name__}: {exc}"}

    def confirm(self, incumbent: Entry, entry: Entry) -> dict:
        """Noise-aware acceptance of a candidate the strict rule would take:
        re-time incumbent and candidate interleaved in one worker on the sizes
        the search scores. Returns the comparison with `accepted` and `reason`."""
        try:
            comparison = compare(
                self.task.name,
                incumbent.source,
                entry.source,
                backend=self.backend,
                size_set=self.opts.sizes,
                filenames=(f"iteration {incumbent.iteration}", f"iteration {entry.iteration}"),
                dialect=self.dialect,
                timer=self.opts.timer,
                timeout=self.opts.timeout,
                sim_gpu=self.opts.sim_gpu,
            )
        except Exception as exc:  # noqa: BLE001 - a failed re-timing rejects, never ends a run
            fault = fault_of(exc)
            if fault is not None:  # but the machine's fault ends it: no verdict either way
                raise fault from exc
            comparison = {"error": f"comparison failed: {type(exc).__name__}: {exc}"}
        return noise_aware_decision(comparison)

    # -- the seed and the held-out gate -------------------------------------------
    def seed_entry(self, history: list[dict]) -> Entry:
        """The seed (the task's, or the start file), evaluated and recorded as
        iteration 0 unless a finished iteration 0 holds it already."""
        recorded = self.files.recorded_seed(history)
        if recorded is not None:
            return recorded
        source = self.opts.start_source or self.task.seed(self.dialect)
        self.rd.write_text(self.files.seed_file, source)
        self.say("iter 0: evaluating the seed")
        t0 = time.perf_counter()
        result = self.evaluate(source, str(self.files.seed_file), self.opts.sizes)
        self.rd.write_json(self.files.seed_result_file, result)
        self.say(f"iter 0  seed     S={fmt(entry_score(result))}")
        record = {
            "iteration": 0,
            "role": "seed",
            "exhausted": False,
            "compile_ok": result["candidate"]["compile_ok"],
            "correct": result["candidate"]["correct"],
            "score": entry_score(result),
            "fail_reason": result["candidate"]["fail_reason"],
            "source_path": self.files.seed_file.name,
            "elapsed_s": time.perf_counter() - t0,
            "is_new_best": True,
            "input_tokens": 0,
            "output_tokens": 0,
            "cost_usd": 0.0,
        }
        self.rd.append_history(record)
        history.insert(0, record)  # before any later record a damaged line left behind
        return Entry(source, result, 0)

    def held_out(self, entry: Entry, name: str) -> dict:
        """Held-out evaluation of an entry at the run's held-out configuration
        (the draw's: mlxsci/held_out.py), saved in the run dir per iteration
        and draw."""
        saved = self.files.saved_held_out(entry, name, self.draw_key)
        if saved is not None:
            return saved
        self.say(f"held-out: evaluating the {name} (iteration {entry.iteration})")
        result = self.evaluate(entry.source, f"{name}.{self.rd.ext}", self.held_out_sizes)
        self.files.save_held_out(entry, name, result, self.draw_key)
        return result

    @property
    def draw_key(self) -> str:
        """What ties a saved held-out result to this run's draw."""
        return self.draw.commitment or self.draw.mode

    def transfer(self, state: State, held_seed: dict, held_best: dict) -> dict:
        """The transfer grade of the run's best against its seed
        (mlxsci.transfer.judge_transfer), saved in transfer.json once judged."""
        saved = self.files.saved_transfer(state.best, self.draw_key)
        if saved is not None:
            return saved
        if state.best is state.seed:
            judged = {
                "grade": "no-win",
                "reason": "the best is the seed: the search kept no candidate",
                "evidence": [],
                "numbers": {},
            }
        else:
            self.say("transfer: grading the best against the seed")
            judged = judge_transfer(
                self.task,
                state.best.source,
                state.seed.source,
                dialect=self.dialect,
                search_sizes=list(self.task.size_set(self.opts.sizes)),
                held_out=self.held_out_sizes,
                evaluate=self.evaluate,
                # The search's own S of its best is the best of many noisy
                # measurements, biased upward by the selection itself (on a
                # loaded machine a noise "win" of 1.6x was kept): the grade
                # measures both at the search sizes again, beside the others.
                known={"candidate_held_out": held_best, "baseline_held_out": held_seed},
                compare=self.timed_pair,
            )
        self.files.save_transfer(state.best, self.draw_key, judged)
        return judged

    # -- proposing ----------------------------------------------------------------
    def check_cost(self, ctx: PromptContext, spent: float) -> float | None:
        """The most the call for `ctx` can cost (0 uncapped, None when the
        proposer cannot say); CostCapReached when that could take the run
        past max_cost, `spent` (USD spent and planned) counted."""
        max_cost = self.opts.max_cost
        if max_cost is None:
            return 0.0
        bound_of = getattr(self.proposer, "worst_case_cost", None)
        bound = bound_of(ctx) if bound_of is not None else None
        left = max_cost - spent
        if bound is not None and bound > left:
            raise CostCapReached(
                f"max_cost: the next call could cost up to ${bound:.4f} (its prompt and "
                f"every output token it may use), more than the ${max(left, 0.0):.4f} left "
                f"of ${max_cost:.4f}"
            )
        return bound

    def ask(self, ctx: PromptContext) -> Proposal:
        """The proposer's answer. A proposer that raises gives a failed call, not the
        end of the run."""
        try:
            return well_formed(self.proposer.propose(ctx), getattr(self.proposer, "name", ""))
        except Exception as exc:  # noqa: BLE001 - LLM proposers catch their own; others may not
            message = " ".join(str(exc).split()) or repr(exc)
            return Proposal(
                text=None,
                error=f"the proposer failed: {type(exc).__name__}: {message}",
                model=getattr(self.proposer, "name", ""),
            )

    def user_prompt(self, it: int, state: State, ctx: Context) -> str:
        """The user prompt of iteration `it`: what the strategy's context shows."""
        if ctx.kind is not None:  # a parent drawn from an archive, with inspirations
            return archive_prompt(
                self.task,
                self.dialect,
                seed_result=state.seed.result,
                parent=(ctx.base.source, ctx.base.result, ctx.kind),
                inspirations=[(e.source, e.result, kind) for e, kind in ctx.inspirations],
                history=ctx.history,
                accept=self.opts.accept,
            )
        previous = (ctx.previous.source, ctx.previous.result) if ctx.previous else None
        incumbent = None
        if ctx.incumbent is not None and (
            ctx.previous is None or ctx.incumbent.source != ctx.previous.source
        ):
            incumbent = (ctx.incumbent.source, ctx.incumbent.result)
        shows_history = not ctx.first
        return user_prompt(
            self.task,
            self.dialect,
            iteration=it if shows_history else 1,
            seed_source=state.seed.source,
            seed_result=state.seed.result,
            previous=previous,
            incumbent=incumbent,
            history=ctx.history if shows_history else [],
            stagnation=shows_history and stagnating(ctx.history),
            accept=self.opts.accept,
        )

    def prompt_for(
        self, it: int, request: Request, state: State, tried: list[str], model: str | None = None
    ) -> PromptContext:
        """The prompts of iteration `it` (the system prompt saved once), for `model`."""
        system = system_prompt(self.task, self.dialect)
        if not self.rd.file("system_prompt.md").exists():
            self.rd.write_text(self.rd.file("system_prompt.md"), system)
        return PromptContext(
            task=self.task.name,
            dialect=self.dialect,
            iteration=it,
            system=system,
            user=self.user_prompt(it, state, request.context),
            incumbent_source=request.context.base.source,
            tried_sources=tried,
            slot=request.slot,
            model=model,
        )

    # -- one generation -------------------------------------------------------------
    def slots(
        self, first: int, n: int, state: State, history: list[dict], spent: float
    ) -> list[Slot]:
        """The generation's slots from iteration `first`: as many of the
        strategy's `n` requests as the cost cap allows, each with its prompt
        written unless its proposal was saved. Raises CostCapReached (before
        any call or file) when not even the first fits."""
        requests = self.strategy.ask(state, n)
        for request in requests:  # each lane as it stands before the generation
            state.lane(request.lane)
        models = self.models_for(history, len(requests))
        tried = self.files.tried_sources(state.seed, history)
        slots: list[Slot] = []
        planned = spent
        for request, model in zip(requests, models):
            it = first + request.slot
            slot = Slot(request, it, state.generation + 1, model=model)
            slot.saved = self.files.saved_proposal(it, slot.place)
            if slot.saved is not None:
                planned += slot.saved.cost_usd  # paid for before the stop
                slots.append(slot)
                continue
            # An answer saved for another place (a resume with other
            # --iterations) is not this one's: forgotten, but what it cost counts.
            slot.discarded_cost = self.files.forget(it)
            planned += slot.discarded_cost
            slot.prompt = self.prompt_for(it, request, state, tried, model)
            try:
                bound = self.check_cost(slot.prompt, planned)
            except CostCapReached:
                if not slots:
                    raise
                self.cut_by_cost = True
                break
            if bound is None and slots:
                break  # under a cap, a call of unknown cost goes out alone
            planned += bound or 0.0
            self.rd.write_text(self.rd.iter_file(it, "prompt.md"), slot.prompt.user)
            slots.append(slot)
            if bound is None:
                break  # ... and alone means nothing after it either
        return slots

    def models_for(self, history: list[dict], n: int) -> list[str | None]:
        """Which model answers each of `n` requests: the bandit's choice in a
        run of several models (search/proposers/mix.py), else None."""
        if not isinstance(self.proposer, ModelMix):
            return [None] * n
        return list(choose_models(history, self.proposer.models, n))

    def generation(self, slots: list[Slot]) -> Generation:
        """The generation's run: proposals and evaluations, as they arrive."""
        hooks = Hooks(
            call=self.ask,
            took_proposal=self.took_proposal,
            saved_result=self.saved_result,
            evaluate=lambda slot: self.evaluate(
                slot.source, str(self.rd.iter_file(slot.iteration, "candidate")), self.opts.sizes
            ),
            took_result=lambda slot: self.rd.write_json(
                self.rd.iter_file(slot.iteration, "result.json"), slot.result
            ),
        )
        return Generation(slots, hooks, self.evaluation_workers(len(slots)), dict(self.evaluated))

    def evaluation_workers(self, n: int) -> int:
        """Evaluations at once: one per core on the simulator (its clock is
        modelled, so runs side by side do not disturb each other's times);
        one on a GPU, where two candidates timed at once would share it."""
        if not backend_info(self.backend).modelled:
            return 1
        return max(1, min(n, os.cpu_count() or 1))

    def took_proposal(self, slot: Slot) -> str | None:
        """Save `slot`'s answer (unless saved already) and its candidate file:
        the candidate's text, or None when it holds none."""
        proposal = slot.proposal
        assert proposal is not None
        if slot.prompt is not None:
            self.files.save_proposal(slot.iteration, proposal, slot.place)
        source = extract_from_response(proposal.text, self.dialect) if proposal.text else None
        if source is not None:
            self.rd.write_text(self.rd.iter_file(slot.iteration, "candidate"), source)
        return source

    def saved_result(self, slot: Slot) -> dict | None:
        """The result a stopped run saved for this very candidate, else None."""
        path = self.rd.iter_file(slot.iteration, "result.json")
        # Asked anew: nothing of it can have been evaluated. A saved proposal's
        # candidate is the same text, and its result is written only once evaluated.
        if slot.prompt is not None or not path.exists():
            return None
        try:
            saved = self.rd.read_json(path)
        except (OSError, ValueError):
            return None  # damaged: evaluated again
        return saved if isinstance(saved, dict) and "candidate" in saved else None

    def run_generation(
        self, first: int, n: int, state: State, history: list[dict], spent: float
    ) -> list[dict]:
        """Generation `state.generation + 1` from iteration `first` (up to `n`
        proposals): proposed and evaluated, decided in slot order, recorded.
        Returns its history records (appended to `history`)."""
        started = time.perf_counter()
        slots = self.slots(first, n, state, history, spent)
        gen = self.generation(slots)
        gen.run()
        outcomes = [self.decide(slot, state, len(slots), gen.busy) for slot in slots]
        self.strategy.tell(state, outcomes)
        ended = time.perf_counter()
        wall, idle = ended - started, idle_seconds(started, ended, gen.busy)
        records = [o.record for o in outcomes]
        for record in records:
            record.update(
                elapsed_s=wall / len(records),
                generation_wall_s=wall,
                generation_idle_s=idle,
            )
        self.rd.append_records(records)
        history.extend(records)
        self.rd.write_json(self.rd.file("strategy_state.json"), self.strategy.state_json(state))
        for slot in slots:
            if slot.source is not None and slot.result is not None:
                self.evaluated.setdefault(
                    normalised_hash(slot.source), (slot.iteration, slot.result)
                )
        return records

    def decide(self, slot: Slot, state: State, slots: int, busy: list) -> Outcome:
        """`slot`'s history record, and whether its candidate becomes the
        run's best (the strategy's rule and the acceptance rule), in slot order."""
        proposal, request = slot.proposal, slot.request
        assert proposal is not None
        ctx = request.context
        record = {
            "iteration": slot.iteration,
            "exhausted": proposal.exhausted,
            "input_tokens": proposal.input_tokens,
            "output_tokens": proposal.output_tokens,
            "cost_usd": proposal.cost_usd,
            "is_new_best": False,
            "source_path": None,
            "score": None,
            "generation": state.generation + 1,
            "slot": request.slot,
            "slots": slots,
            "lane": request.lane,
            "parent": ctx.base.iteration,  # the first prompt's base is the seed
            "inspirations": [e.iteration for e, _ in ctx.inspirations],
            "model_wait_s": slot.model_wait_s,
            "evaluate_s": slot.evaluate_s,
        }
        if slot.discarded_cost:  # an answer of an earlier session, paid and not reused
            record["discarded_cost_usd"] = slot.discarded_cost
        if slot.model is not None:  # the bandit's choice (a run of several models)
            record["model_choice"] = slot.model
        if slot.source is None or slot.result is None:
            reason = proposal.error or "no fenced code block in the response"
            record.update(role="skipped", compile_ok=False, correct=False, fail_reason=reason)
            return Outcome(request, None, record)
        result = slot.result
        entry = Entry(
            slot.source, result, slot.iteration, record["parent"], tuple(record["inspirations"])
        )
        cand = result["candidate"]
        record.update(
            role="candidate",
            compile_ok=cand["compile_ok"],
            correct=cand["correct"],
            score=entry_score(result),
            fail_reason=cand["fail_reason"],
            source_path=self.rd.iter_file(slot.iteration, "candidate").name,
            implausible=cand.get("implausible"),
        )
        if slot.duplicate_of is not None:
            record["duplicate_of"] = slot.duplicate_of
        if cand["correct"]:  # the kind of kernel it is (search/features.py), for the map
            record["cell"] = cell_of(entry.source, result, tuple(self.task.kernel_names))
        # A duplicate had its chance as its original: never taken on its own.
        accepted = slot.duplicate_of is None and self.strategy.accept(state, entry)
        if accepted and self.opts.accept == "noise-aware":
            self.say(f"iter {slot.iteration}: S above the incumbent's; re-timing both")
            t0 = time.perf_counter()
            record["comparison"] = self.confirm(state.best, entry)
            busy.append((t0, time.perf_counter()))
            accepted = record["comparison"]["accepted"]
        if accepted:
            state.best = entry
            record["is_new_best"] = True
            self.files.write_best(entry)
        return Outcome(request, entry, record)


def run(
    task: str | None,
    model: str = "autotune",
    *,
    out: str | Path | None = None,
    resume: str | Path | None = None,
    start: str | Path | None = None,
    prices: str | dict | None = None,
    quiet: bool = True,
    echo=print,
    proposer=None,
    lock=None,
    **options,
) -> dict:
    """Run (or resume) a search and return its summary (also in summary.json).

    task, model: e.g. "heat2d", "claude-opus-4-7" / "gpt-5.5" / "autotune" /
    "replay:RUN_DIR" / any model name with base_url (OpenAI-compatible server).
    options: the other options of the record mlxsci.search.options.SearchOptions
    (each field but start_source) by name, which are the command line's
    (`python -m mlxsci.search --help`), e.g.
    iterations=8, backend="sim", accept="noise-aware", max_cost=2.0
    (TypeError for any other keyword). out: the run directory (default
    results/<task>_<model>_<timestamp>). start: a candidate file to start from
    instead of the task's seed; it must hold the task's kernels (ValueError
    otherwise), and a .cu file means the cuda dialect unless `dialect` says
    otherwise. prices: a price table, a JSON file's path, or None (built-in).
    proposer: a Proposer object to use instead of `model` (library use, tests).
    lock: the run directory's lock (mlxsci.storage.locks) when the caller holds it (a
    sweep's run); else run() takes it (LockHeld when another process has it).
    resume: a run directory to continue; it keeps the options in its run.json,
    but those of GIVEN_ANEW (iterations, max_cost, api_key_env, llm_timeout,
    llm_retries) may be given anew, and run.json is rewritten with them
    (iterations never below those done); a sim_gpu other than the run's is
    refused (ValueError: its times would not compare with the run's). Every check (task folder, start file,
    options, an existing file at `out`) comes before the run directory is made.
    Interrupted (KeyboardInterrupt), a run says how to resume it; its worker is
    killed and its job folders removed. A failed call is a skipped iteration,
    never an exception; a run in which no proposal gave a candidate has outcome
    "no_candidates".
    """
    given = given_options(task=task, model=model, **options)
    say = (lambda msg: None) if quiet else echo
    # One process per run directory (search/run_lock.py): a resume takes its lock
    # before it reads the run, a new run before it writes run.json; held to the end.
    with ExitStack() as held:
        if resume is not None:
            rd_path, anew = Path(resume), {name: given[name] for name in GIVEN_ANEW}
            anew["sim_gpu"] = given["sim_gpu"]  # checked: the run's own GPU, or refused
            try:
                opts = held.enter_context(run_lock.resuming(rd_path, anew, lock))
            except run_lock.RunDirUnwritable as exc:  # a finished run's result, else exc
                summary = run_lock.recorded_result(rd_path, exc, **anew)
                echo(f"{rd_path} cannot be written, and nothing is left to do: its result")
                return summary
        else:
            if proposer is not None:
                given["model"] = proposer.name
            opts, task_def = new_options(given, start)
        if proposer is None:  # before any directory is made: a missing API key fails cleanly
            proposer = proposer_for(opts, prices)
        check_priced(proposer, opts.max_cost, echo)
        where = resume if resume is not None else out or default_run_dir(task_def.name, opts.model)
        rd = RunDir(Path(where), search_dialect(opts))
        history = open_run_dir(rd, held, resume is not None, lock, given["iterations"], echo)
        held.enter_context(spare_workers())  # each candidate's worker started ahead
        opts = draw_again_if_revealed(opts, history, rd, say)
        # run.json says what this session runs: a resume's new iterations, cap, timeouts.
        rd.write_json(rd.file("run.json"), opts.to_json())
        say(f"run directory {rd.path}")
        say(S_AND_PHI)
        with stops_say_how_to_resume(rd.path, echo):  # Ctrl-C, SIGTERM, the machine's faults
            summary = run_search(opts, rd, proposer, say, history)
    summary["run_dir"] = str(rd.path)
    return summary


def open_run_dir(
    rd: RunDir, held: ExitStack, resumed: bool, lock, iterations: int | None, echo
) -> list[dict]:
    """Make a new run's directory, holding its lock in `held` unless the
    caller holds it (`lock`: a sweep's run), or reopen a resumed one (its
    lock taken already) for `iterations` more; its history, damaged lines
    reported."""
    if not resumed and lock is None:
        held.enter_context(run_lock.starting(rd.path))  # makes the folder
    elif not resumed:
        make_run_dir(rd.path)  # the caller (a sweep) holds its lock
    history = rd.history()
    if resumed:
        check_extension(history, iterations)
        reopen_record(rd)  # a finished run's manifest is written anew at its end
    for line in rd.skipped_report():  # damaged lines of history.jsonl, by number
        echo(line)
    return history


def draw_again_if_revealed(
    opts: SearchOptions, history: list[dict], rd: RunDir, say
) -> SearchOptions:
    """A run extended by a resume after its held-out gate began (its secret
    revealed when it finished, or held-out results at the drawn configuration
    in its folder when it was stopped during the gate): its extension gets a
    new draw, as a held-out is a test only while nothing has shown it."""
    record = opts.held_out_draw
    done = max((r["iteration"] for r in history), default=0)
    if not record or record.get("mode") != "secret" or opts.iterations <= done:
        return opts
    files = IterationFiles(rd)
    began = any(files.held_out_file(name).exists() for name in ("seed", "best"))
    if record.get("secret") is None and not began:
        return opts
    say("held-out: this run's draw was shown at its held-out gate; its extension draws anew")
    return with_new_draw(opts, load_task(opts.task))


def run_search(opts: SearchOptions, rd: RunDir, proposer, say, history: list[dict]) -> dict:
    """The generations a run has left, then the held-out gate: the summary."""
    search = Search(opts, rd, proposer, say)
    proposer.say = say  # retries and waits on the console
    if search.draw.mode == "secret":  # the digest only: the draw is told at the end
        say(f"held-out: a secret draw, committed to as {search.draw.commitment}")
    # A generation counts once all its records are in: a kill between two of
    # them leaves some, dropped here and made again (saved answers and results reused).
    history[:] = finished_generations(history)
    rd.repair_history(history)  # drop a torn last line or damaged lines, if any
    seed_entry = search.seed_entry(history)
    state, entries = search.files.rebuild(seed_entry, history, search.strategy)
    search.evaluated = {
        normalised_hash(e.source): (e.iteration, e.result) for e in reversed(entries)
    }
    # The history is the truth: a run killed between writing best.* and
    # appending its record must not keep a best from an unfinished iteration.
    search.files.write_best(state.best)
    cost, stopped = iterate_to_the_end(search, state, history)
    held_started = time.perf_counter()
    held_seed = search.held_out(state.seed, "seed")
    held_best = held_seed if state.best is state.seed else search.held_out(state.best, "best")
    transfer = search.transfer(state, held_seed, held_best)
    # The run is over: its secret is revealed (run.json and summary.json) and
    # checked against the commitment run.json made when it started.
    revealed = held_out.reveal(search.task, search.draw)
    opts = dataclasses.replace(opts, held_out_draw=revealed.to_json())
    rd.write_json(rd.file("run.json"), opts.to_json())
    summary = summarize(
        opts,
        search.task.name,
        state,
        history,
        held_seed=held_seed,
        held_best=held_best,
        cost=cost,
        stopped=stopped,
        held_started=held_started,
    )
    summary.update(
        transfer=transfer,
        held_out=revealed.to_json(),
        held_out_verified=held_out.verify(search.task, revealed),
    )
    write_search_record(rd, summary, search.strategy.state_json(state))
    say(done_line(summary))
    return summary


def finished_generations(history: list[dict]) -> list[dict]:
    """The history without the records of a generation not all of whose
    records are in (the last one, cut by a kill between two appends)."""
    last = last_generation(history) if history else []
    if not last or "generation" not in last[0] or len(last) >= last[0].get("slots", 1):
        return history
    return history[: -len(last)]


def last_generation(history: list[dict]) -> list[dict]:
    """The records of the history's last generation (the last record alone
    in a run from before generations)."""
    last = history[-1].get("generation")
    if last is None:
        return history[-1:]
    return [r for r in history if r.get("generation") == last]


def iterate_to_the_end(
    search: Search, state: State, history: list[dict]
) -> tuple[float, str | None]:
    """The generations the run has left, until its last iteration, its cost
    cap or its proposer's end: the USD spent in all (every session) and why
    it stopped early (None: it ran its iterations)."""
    opts, say = search.opts, search.say
    cost = sum(spent_usd(r) for r in history)
    stopped = None
    done = max(r["iteration"] for r in history)
    ran_dry = [r for r in last_generation(history) if r.get("exhausted")]
    if ran_dry:
        done = opts.iterations  # a resumed run whose proposer already ran dry
        stopped = f"the proposer has nothing left to propose ({ran_dry[0]['fail_reason']})"
    while done < opts.iterations:
        if opts.max_cost is not None and cost >= opts.max_cost:
            stopped = f"max_cost reached (${cost:.4f} >= ${opts.max_cost:.4f})"
            say(f"stopping: {stopped}")
            break
        n = min(opts.population, opts.iterations - done)
        try:
            records = search.run_generation(done + 1, n, state, history, spent=cost)
        except CostCapReached as exc:
            stopped = str(exc)
            say(f"stopping before iteration {done + 1}: {stopped}")
            break
        for rec in records:
            cost += spent_usd(rec)
            say(iteration_line(rec["iteration"], opts.iterations, rec, state.best.score, cost))
        if opts.population > 1:
            say(generation_line(records, state.best.score))
        done = records[-1]["iteration"]
        exhausted = [r for r in records if r["exhausted"]]
        if exhausted:
            stopped = f"the proposer has nothing left to propose ({exhausted[0]['fail_reason']})"
        elif search.cut_by_cost:
            stopped = "max_cost: the generation's other calls could cost more than what is left"
        if stopped:
            say(f"stopping: {stopped}")
            break
    return cost, stopped
