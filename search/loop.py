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
one worker (mlxsci.evaluation.compare.compare) and taken only when the speedup lies
beyond the noise.

A failed call never ends a run: it is a skipped iteration, recorded with its
reason (history.jsonl, NN_proposal.json) and shown on the console. A run whose
proposals gave no candidate at all ends with outcome "no_candidates". With
max_cost, each call's worst-case cost (proposer.worst_case_cost) must fit in
what is left of the cap before the call is made; a model without a price is
refused under a cap, and warned about without one.

A run's options are built and checked in search/options.py, its summary
judged in search/summary.py, its files written and read back by
search/iteration_files.py (a base of `Search`) and its console lines worded
in search/progress.py.
"""

from __future__ import annotations

import time
from contextlib import ExitStack
from pathlib import Path

from mlxsci.evaluation.compare import compare
from mlxsci.evaluation.evaluator import evaluate
from mlxsci.kernel.candidate import extract_from_response
from mlxsci.search import run_lock
from mlxsci.search.iteration_files import IterationFiles
from mlxsci.search.options import (
    check_extension,
    check_priced,
    default_run_dir,
    make_run_dir,
    new_options,
    proposer_for,
    search_dialect,
)
from mlxsci.search.progress import S_AND_PHI, done_line, iteration_line, stops_say_how_to_resume
from mlxsci.search.prompts.compose import stagnating, system_prompt, user_prompt
from mlxsci.search.proposers.base import PromptContext, Proposal
from mlxsci.search.rundir import RunDir
from mlxsci.search.strategies import Entry, State, make_strategy, noise_aware_decision
from mlxsci.search.summary import entry_score, reopen_record, summarize, write_record
from mlxsci.storage.faults import fault_of
from mlxsci.task import load_task


class CostCapReached(Exception):
    """The next call could cost more than what is left of max_cost: the run stops before it."""


class Search(IterationFiles):
    """One run: options, run directory, proposer, and the state between iterations."""

    def __init__(self, opts: dict, rd: RunDir, proposer, say):
        self.opts = opts
        self.max_cost = opts.get("max_cost")
        self.rd = rd
        self.proposer = proposer
        self.say = say
        self.task = load_task(opts["task"])
        self.backend = opts["backend"]
        self.dialect = search_dialect(opts)
        self.strategy = make_strategy(opts["strategy"])

    # -- evaluation ---------------------------------------------------------
    def evaluate(self, source: str, filename: str, size_set: str) -> dict:
        # announce: a first run on a machine builds the simulator's compiler and
        # measures the roofline, and says so rather than stay silent for minutes.
        common = dict(
            backend=self.backend,
            size_set=size_set,
            filename=filename,
            timeout=self.opts.get("timeout"),
            dialect=self.dialect,
            announce=self.say,
            keep_implausible=self.opts.get("keep_implausible", False),
        )
        tool = self.opts.get("sanitize")
        if tool:
            # Under the sanitizer first: a fault it names is the verdict; times
            # come only from the run without it, so scores stay comparable.
            checked = evaluate(self.task.name, source, sanitize=tool, **common)
            if not checked.correct:
                return checked.to_json()
        result = evaluate(self.task.name, source, timer=self.opts.get("timer"), **common).to_json()
        if tool:
            result["sanitizer_check"] = tool  # passed under compute-sanitizer `tool`
        return result

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
                size_set=self.opts["sizes"],
                filenames=(f"iteration {incumbent.iteration}", f"iteration {entry.iteration}"),
                dialect=self.dialect,
                timer=self.opts.get("timer"),
                timeout=self.opts.get("timeout"),
            )
        except Exception as exc:  # noqa: BLE001 - a failed re-timing rejects, never ends a run
            fault = fault_of(exc)
            if fault is not None:  # but the machine's fault ends it: no verdict either way
                raise fault from exc
            comparison = {"error": f"comparison failed: {type(exc).__name__}: {exc}"}
        return noise_aware_decision(comparison)

    # -- one iteration ----------------------------------------------------------
    def check_cost(self, ctx: PromptContext, spent: float) -> None:
        """Raise CostCapReached when the call for `ctx` could take the run past max_cost."""
        if self.max_cost is None:
            return
        bound_of = getattr(self.proposer, "worst_case_cost", None)
        bound = bound_of(ctx) if bound_of is not None else None
        left = self.max_cost - spent
        if bound is not None and bound > left:
            raise CostCapReached(
                f"max_cost: the next call could cost up to ${bound:.4f} (its prompt and "
                f"every output token it may use), more than the ${max(left, 0.0):.4f} left "
                f"of ${self.max_cost:.4f}"
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

    def propose(self, it: int, state: State, history: list[dict], spent: float = 0.0) -> Proposal:
        """The proposal for iteration `it`: reused from disk if a killed run saved it.
        Raises CostCapReached (before any call or file) when the call could break the cap."""
        saved = self.saved_proposal(it)
        if saved is not None:
            return saved
        ctx = self.strategy.context(state)
        previous = (ctx.previous.source, ctx.previous.result) if ctx.previous else None
        incumbent = None
        if ctx.incumbent is not None and (
            ctx.previous is None or ctx.incumbent.source != ctx.previous.source
        ):
            incumbent = (ctx.incumbent.source, ctx.incumbent.result)
        shows_history = previous is not None or state.previous_skipped
        system = system_prompt(self.task, self.dialect)
        if not self.rd.file("system_prompt.md").exists():
            self.rd.write_text(self.rd.file("system_prompt.md"), system)
        user = user_prompt(
            self.task,
            self.dialect,
            iteration=it if shows_history else 1,
            seed_source=state.seed.source,
            seed_result=state.seed.result,
            previous=previous,
            incumbent=incumbent,
            history=ctx.history if shows_history else [],
            stagnation=shows_history and stagnating(ctx.history),
            accept=self.opts.get("accept", "strict"),
        )
        tried = [state.seed.source] + [
            self.artefact(self.rd.iter_file(r["iteration"], "candidate"), r["iteration"])
            for r in history[1:]
            if r["role"] == "candidate"
        ]
        prompt = PromptContext(
            task=self.task.name,
            dialect=self.dialect,
            iteration=it,
            system=system,
            user=user,
            incumbent_source=ctx.base.source,
            tried_sources=tried,
        )
        self.check_cost(prompt, spent)
        self.rd.write_text(self.rd.iter_file(it, "prompt.md"), user)
        proposal = self.ask(prompt)
        self.save_proposal(it, proposal)
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
            path = self.rd.iter_file(it, "candidate")
            self.rd.write_text(path, source)
            result = self.evaluate(source, str(path), self.opts["sizes"])
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
            if accepted and self.opts.get("accept", "strict") == "noise-aware":
                self.say(f"iter {it}: S above the incumbent's; re-timing both")
                record["comparison"] = self.confirm(state.best, entry)
                accepted = record["comparison"]["accepted"]
            if accepted:
                state.best = entry
                record["is_new_best"] = True
                self.write_best(entry)
            state.previous, state.previous_skipped = entry, False
        record["elapsed_s"] = time.perf_counter() - t0
        self.rd.append_history(record)
        history.append(record)
        return record


def run(
    task: str,
    model: str = "autotune",
    *,
    iterations: int | None = None,
    strategy: str = "one-plus-one",
    backend: str = "auto",
    sizes: str | None = None,
    out: str | Path | None = None,
    resume: str | Path | None = None,
    seed: int = 0,
    max_cost: float | None = None,
    base_url: str | None = None,
    api: str = "auto",
    dialect: str | None = None,
    accept: str = "strict",
    timer: str | None = None,
    sanitize: str | None = None,
    keep_implausible: bool = False,
    prices: str | dict | None = None,
    start: str | Path | None = None,
    timeout: float | None = None,
    api_key_env: str | None = None,
    llm_timeout: float | None = None,
    llm_retries: int | None = None,
    quiet: bool = True,
    echo=print,
    proposer=None,
    lock=None,
) -> dict:
    """Run (or resume) a search and return its summary (also in summary.json).

    task, model: e.g. "heat2d", "claude-opus-4-7" / "gpt-5.5" / "autotune" /
    "replay:RUN_DIR" / any model name with base_url (OpenAI-compatible server).
    iterations: proposals after the seed (default 10). strategy: "one-plus-one"
    or "best-of-n". sizes: size set the search scores on (default in-dist on a
    GPU, smoke on the simulator). dialect: "metal" or "cuda" (the simulator runs
    either; GPUs their own). start: a candidate file to start from instead
    of the task's seed. max_cost: a cap in USD; a call is made only when its
    worst-case cost fits in what is left (a model without a price is refused:
    give it one in `prices`, a JSON file path or a dict).
    base_url: an OpenAI-compatible server; it gets the key held by the
    environment variable named `api_key_env`, else none (a provider's own key
    goes only to its own endpoint). llm_timeout: seconds one attempt may wait
    for its answer (default 300); llm_retries: attempts after the first (4).
    accept: "strict" (Metal-Sci's (1+1): any strictly higher S replaces the
    incumbent) or "noise-aware" (such a candidate is re-timed against the
    incumbent and kept only when the speedup lies beyond the noise).
    timer: "cupti", "sim" or "wall" (mlxsci.timing.timers; default: the backend's own).
    sanitize: "memcheck" or "racecheck" (cuda only): every candidate first runs
    under NVIDIA's compute-sanitizer, and one with a reported fault fails.
    keep_implausible: a candidate timed below what the machine allows
    (verdict implausible) keeps its S and may become the best, for study;
    by default its S is 0 and it is never kept.
    proposer: a Proposer object to use instead of `model` (library use, tests).
    lock: the run directory's lock (mlxsci.storage.locks) when the caller holds it (a
    sweep's run); else run() takes it (LockHeld when another process has it).
    A resumed run keeps the options in its run.json (accept, timer included;
    iterations, max_cost, api_key_env, llm_timeout and llm_retries may be given
    anew, and run.json is rewritten with them; iterations never below those done).
    start: its file must hold the task's kernels (ValueError otherwise); a .cu
    file means the cuda dialect unless `dialect` says otherwise. Every check
    (task folder, start file, options, an existing file at `out`) comes before
    the run directory is made. Interrupted (KeyboardInterrupt), a run says how
    to resume it; its worker is killed and its job folders removed.
    A failed call is a skipped iteration, never an exception; a run in which no
    proposal gave a candidate has outcome "no_candidates".
    """
    say = (lambda msg: None) if quiet else echo
    # One process per run directory (search/run_lock.py): a resume takes its lock
    # before it reads the run, a new run before it writes run.json; held to the end.
    with ExitStack() as held:
        if resume is not None:
            rd_path = Path(resume)
            given = dict(
                iterations=iterations,
                max_cost=max_cost,
                api_key_env=api_key_env,
                llm_timeout=llm_timeout,
                llm_retries=llm_retries,
            )
            try:
                opts = held.enter_context(run_lock.resuming(rd_path, given, lock))
            except run_lock.RunDirUnwritable as exc:  # a finished run's result, else exc
                summary = run_lock.recorded_result(rd_path, exc, **given)
                echo(f"{rd_path} cannot be written, and nothing is left to do: its result")
                return summary
        else:
            opts, task_def = new_options(
                task,
                model if proposer is None else proposer.name,
                iterations=iterations,
                strategy=strategy,
                backend=backend,
                sizes=sizes,
                seed=seed,
                max_cost=max_cost,
                base_url=base_url,
                api=api,
                timeout=timeout,
                dialect=dialect,
                api_key_env=api_key_env,
                llm_timeout=llm_timeout,
                llm_retries=llm_retries,
                accept=accept,
                timer=timer,
                sanitize=sanitize,
                start=start,
                keep_implausible=keep_implausible,
            )
        if proposer is None:  # before any directory is made: a missing API key fails cleanly
            proposer = proposer_for(opts, prices)
        check_priced(proposer, opts["max_cost"], echo)
        where = (
            resume if resume is not None else out or default_run_dir(task_def.name, opts["model"])
        )
        rd = RunDir(Path(where), search_dialect(opts))
        if resume is None and lock is None:
            held.enter_context(run_lock.starting(rd.path))  # makes the folder
        elif resume is None:
            make_run_dir(rd.path)  # the caller (a sweep) holds its lock
        history = rd.history()
        if resume is not None:
            check_extension(history, iterations)
            reopen_record(rd)  # a finished run's manifest is written anew at its end
        for line in rd.skipped_report():  # damaged lines of history.jsonl, by number
            echo(line)
        # run.json says what this session runs: a resume's new iterations, cap, timeouts.
        rd.write_json(rd.file("run.json"), opts)
        say(f"run directory {rd.path}")
        say(S_AND_PHI)
        with stops_say_how_to_resume(rd.path, echo):  # Ctrl-C, SIGTERM, the machine's faults
            summary = run_search(opts, rd, proposer, say, history)
    summary["run_dir"] = str(rd.path)
    return summary


def run_search(opts: dict, rd: RunDir, proposer, say, history: list[dict]) -> dict:
    """The iterations a run has left, then the held-out gate: the summary."""
    search = Search(opts, rd, proposer, say)
    proposer.say = say  # retries and waits on the console
    rd.repair_history(history)  # drop a torn last line or damaged lines, if any
    seed_entry = search.seed_entry(history)
    state = search.rebuild(seed_entry, history)
    # The history is the truth: a run killed between writing best.* and
    # appending its record must not keep a best from an unfinished iteration.
    search.write_best(state.best)

    cost = sum(r.get("cost_usd", 0.0) for r in history)
    stopped = None
    done = max(r["iteration"] for r in history)
    if history[-1].get("exhausted"):
        done = opts["iterations"]  # a resumed run whose proposer already ran dry
        stopped = f"the proposer has nothing left to propose ({history[-1]['fail_reason']})"
    for it in range(done + 1, opts["iterations"] + 1):
        if opts["max_cost"] is not None and cost >= opts["max_cost"]:
            stopped = f"max_cost reached (${cost:.4f} >= ${opts['max_cost']:.4f})"
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
        say(iteration_line(it, opts["iterations"], rec, state.best.score, cost))
        if stopped:
            say(f"stopping: {stopped}")
            break

    held_started = time.perf_counter()
    held_seed = search.held_out(state.seed, "seed")
    held_best = held_seed if state.best is state.seed else search.held_out(state.best, "best")
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
    write_record(rd, summary)  # summary.json, then the manifest of the run's files
    say(done_line(summary))
    return summary
