"""echo2: cost-efficient RL post-training of LLMs (ECHO-2 design)."""
