"""Where candidates come from: offline proposers (autotune, replay) and LLM clients, with their keys and prices."""
