"""The search loop: propose, evaluate, keep the best, record everything.

`run(...)` is what `python -m mlxsci.search` calls; it is also the library
entry point. A run directory holds every artefact (search/rundir.py), so a
killed run resumes with `resume=RUN_DIR` and repeats nothing it finished.

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
what is left of the cap before the call is made; a model without a price is
refused under a cap, and warned about without one.

A run's options (one record, SearchOptions) are built and checked in
search/options.py, its summary judged in search/summary.py, its files written
and read back by search/iteration_files.py (an IterationFiles that `Search`
holds) and its console lines worded in search/progress.py.
"""

from __future__ import annotations

import dataclasses
import time
from contextlib import ExitStack
from pathlib import Path

from mlxsci import held_out
from mlxsci.evaluation.comparison import compare
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.kernel.candidate import extract_from_response
from mlxsci.search import run_lock
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
    iteration_line,
    stops_say_how_to_resume,
)
from mlxsci.search.prompts import stagnating, system_prompt, user_prompt
from mlxsci.search.proposers import PromptContext, Proposal
from mlxsci.search.rundir import RunDir
from mlxsci.search.strategies import Context, Entry, State, make_strategy, noise_aware_decision
from mlxsci.search.summary import entry_score, reopen_record, summarize, write_record
from mlxsci.storage.faults import fault_of
from mlxsci.task import Size, load_task
from mlxsci.transfer import judge_transfer


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
        self.strategy = make_strategy(opts.strategy)
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

    # -- one iteration ----------------------------------------------------------
    def check_cost(self, ctx: PromptContext, spent: float) -> None:
        """Raise CostCapReached when the call for `ctx` could take the run past max_cost."""
        max_cost = self.opts.max_cost
        if max_cost is None:
            return
        bound_of = getattr(self.proposer, "worst_case_cost", None)
        bound = bound_of(ctx) if bound_of is not None else None
        left = max_cost - spent
        if bound is not None and bound > left:
            raise CostCapReached(
                f"max_cost: the next call could cost up to ${bound:.4f} (its prompt and "
                f"every output token it may use), more than the ${max(left, 0.0):.4f} left "
                f"of ${max_cost:.4f}"
            )

    def ask(self, ctx: PromptContext) -> Proposal:
        """The proposer's answer. A proposer that raises gives a failed call, not the
        end of the run."""
        try:
            return self.proposer.propose(ctx)
        except Exception as exc:  # noqa: BLE001 - LLM proposers catch their own; others may not
            message = " ".join(str(exc).split()) or repr(exc)
            return Proposal(
                text=None,
                error=f"the proposer failed: {type(exc).__name__}: {message}",
                model=getattr(self.proposer, "name", ""),
            )

    def user_prompt(self, it: int, state: State, ctx: Context) -> str:
        """The user prompt of iteration `it`: what the strategy's context shows."""
        previous = (ctx.previous.source, ctx.previous.result) if ctx.previous else None
        incumbent = None
        if ctx.incumbent is not None and (
            ctx.previous is None or ctx.incumbent.source != ctx.previous.source
        ):
            incumbent = (ctx.incumbent.source, ctx.incumbent.result)
        shows_history = previous is not None or state.previous_skipped
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

    def propose(self, it: int, state: State, history: list[dict], spent: float = 0.0) -> Proposal:
        """The proposal for iteration `it`: reused from disk if a killed run saved it.
        Raises CostCapReached (before any call or file) when the call could break the cap."""
        saved = self.files.saved_proposal(it)
        if saved is not None:
            return saved
        ctx = self.strategy.context(state)
        system = system_prompt(self.task, self.dialect)
        if not self.rd.file("system_prompt.md").exists():
            self.rd.write_text(self.rd.file("system_prompt.md"), system)
        user = self.user_prompt(it, state, ctx)
        prompt = PromptContext(
            task=self.task.name,
            dialect=self.dialect,
            iteration=it,
            system=system,
            user=user,
            incumbent_source=ctx.base.source,
            tried_sources=self.files.tried_sources(state.seed, history),
        )
        self.check_cost(prompt, spent)
        self.rd.write_text(self.rd.iter_file(it, "prompt.md"), user)
        proposal = self.ask(prompt)
        self.files.save_proposal(it, proposal)
        return proposal

    def iterate(self, it: int, state: State, history: list[dict], spent: float = 0.0) -> dict:
        t0 = time.perf_counter()
        proposal = self.propose(it, state, history, spent)
        record = {
            "iteration": it,
            "exhausted": proposal.exhausted,
            "input_tokens": proposal.input_tokens,
            "output_tokens": proposal.output_tokens,
            "cost_usd": proposal.cost_usd,
            "is_new_best": False,
            "source_path": None,
            "score": None,
        }
        source = extract_from_response(proposal.text, self.dialect) if proposal.text else None
        if source is None:
            reason = proposal.error or "no fenced code block in the response"
            record.update(role="skipped", compile_ok=False, correct=False, fail_reason=reason)
            state.previous_skipped = True
        else:
            self.judge_candidate(it, source, state, record)
        record["elapsed_s"] = time.perf_counter() - t0
        self.rd.append_history(record)
        history.append(record)
        return record

    def judge_candidate(self, it: int, source: str, state: State, record: dict) -> None:
        """Evaluate iteration `it`'s candidate, keep it as the best when the
        strategy and the acceptance rule take it, and fill its `record` in."""
        path = self.rd.iter_file(it, "candidate")
        self.rd.write_text(path, source)
        result = self.evaluate(source, str(path), self.opts.sizes)
        self.rd.write_json(self.rd.iter_file(it, "result.json"), result)
        entry = Entry(source, result, it)
        cand = result["candidate"]
        record.update(
            role="candidate",
            compile_ok=cand["compile_ok"],
            correct=cand["correct"],
            score=entry_score(result),
            fail_reason=cand["fail_reason"],
            source_path=path.name,
            implausible=cand.get("implausible"),
        )
        accepted = self.strategy.accept(state, entry)
        if accepted and self.opts.accept == "noise-aware":
            self.say(f"iter {it}: S above the incumbent's; re-timing both")
            record["comparison"] = self.confirm(state.best, entry)
            accepted = record["comparison"]["accepted"]
        if accepted:
            state.best = entry
            record["is_new_best"] = True
            self.files.write_best(entry)
        state.previous, state.previous_skipped = entry, False


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
    """The iterations a run has left, then the held-out gate: the summary."""
    search = Search(opts, rd, proposer, say)
    proposer.say = say  # retries and waits on the console
    if search.draw.mode == "secret":  # the digest only: the draw is told at the end
        say(f"held-out: a secret draw, committed to as {search.draw.commitment}")
    rd.repair_history(history)  # drop a torn last line or damaged lines, if any
    seed_entry = search.seed_entry(history)
    state = search.files.rebuild(seed_entry, history)
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
    write_record(rd, summary)  # summary.json, then the manifest of the run's files
    say(done_line(summary))
    return summary


def iterate_to_the_end(
    search: Search, state: State, history: list[dict]
) -> tuple[float, str | None]:
    """The iterations the run has left, until its last, its cost cap or its
    proposer's end: the USD spent in all (every session) and why it stopped
    early (None: it ran its iterations)."""
    opts, say = search.opts, search.say
    cost = sum(r.get("cost_usd", 0.0) for r in history)
    stopped = None
    done = max(r["iteration"] for r in history)
    if history[-1].get("exhausted"):
        done = opts.iterations  # a resumed run whose proposer already ran dry
        stopped = f"the proposer has nothing left to propose ({history[-1]['fail_reason']})"
    for it in range(done + 1, opts.iterations + 1):
        if opts.max_cost is not None and cost >= opts.max_cost:
            stopped = f"max_cost reached (${cost:.4f} >= ${opts.max_cost:.4f})"
            say(f"stopping: {stopped}")
            break
        try:
            rec = search.iterate(it, state, history, spent=cost)
        except CostCapReached as exc:
            stopped = str(exc)
            say(f"stopping before iteration {it}: {stopped}")
            break
        cost += rec["cost_usd"]
        if rec["exhausted"]:
            stopped = f"the proposer has nothing left to propose ({rec['fail_reason']})"
        say(iteration_line(it, opts.iterations, rec, state.best.score, cost))
        if stopped:
            say(f"stopping: {stopped}")
            break
    return cost, stopped
