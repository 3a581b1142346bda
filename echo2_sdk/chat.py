"""Chat-template tokenization shared by workers, checks and warm starts."""

from __future__ import annotations


def chat_token_ids(tokenizer, messages: list[dict], *, add_generation_prompt: bool = True) -> list[int]:
    """Token ids of chat ``messages`` rendered with the tokenizer's chat template.

    With ``add_generation_prompt`` the assistant header is appended (the prompt x of a rollout).
    """
    ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=add_generation_prompt)
    # transformers >= 5 returns a BatchEncoding here, older versions a plain list.
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)
