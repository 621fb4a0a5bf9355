"""Every task's prompts in every dialect, for a behaviour-unchanged check.

    python bench/seed_prompts.py > prompts.json

For each task and each dialect it has a seed in: the system prompt and the
first user prompt a search sends, built from the seed's own evaluation on the
simulator at the smoke sizes with a fixed input seed (so the figures in it
are the same from run to run). Run it with two versions of mlxsci and compare
the bytes.
"""

from __future__ import annotations

import json

from mlxsci.evaluation.evaluator import evaluate
from mlxsci.search.prompts.compose import system_prompt, user_prompt
from mlxsci.task import load_task, task_names

INPUT_SEED = 12345


def prompts(name: str, dialect: str) -> dict:
    task = load_task(name)
    seed = task.seed(dialect)
    ev = evaluate(name, backend="sim", dialect=dialect, size_set="smoke", input_seed=INPUT_SEED)
    first = user_prompt(
        task,
        dialect,
        iteration=1,
        seed_source=seed,
        seed_result=ev.to_json(),
        previous=None,
        incumbent=None,
        history=[],
        stagnation=False,
    )
    return {"system": system_prompt(task, dialect), "first": first}


def main() -> None:
    out = {
        f"{name}/{dialect}": prompts(name, dialect)
        for name in task_names()
        for dialect in load_task(name).seed_dialects()
    }
    print(json.dumps(out, indent=1, sort_keys=True))


if __name__ == "__main__":
    main()
