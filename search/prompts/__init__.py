"""The prompts a model is given: the task's contract, the dialect's words, results as lines.

What the search uses, from search/prompts/compose.py: `system_prompt(task,
dialect)`, the same at every call; `user_prompt(task, dialect, ...)`, one
iteration's; `stagnating(history)`, whether the iteration-k prompt asks for a
different approach. `format_result` and `format_history_line` word an
evaluation and a history record as a prompt shows them.
"""

from mlxsci.search.prompts.compose import (
    archive_prompt,
    format_history_line,
    format_result,
    stagnating,
    system_prompt,
    user_prompt,
)

__all__ = [
    "system_prompt",
    "user_prompt",
    "archive_prompt",
    "stagnating",
    "format_result",
    "format_history_line",
]
