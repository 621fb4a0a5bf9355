"""The prompts a model is given: the task's contract, the dialect's words, results as lines."""
