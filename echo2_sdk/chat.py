"""Chat-template tokenization shared by workers, checks, episodes and warm starts.

Nothing here knows a template's markers by heart: where a turn starts and ends is read off the
tokenizer's own chat template (:func:`chat_markers`, :func:`turn_suffix`), by rendering stand-in
conversations around plain-ASCII anchors, so ChatML (Qwen), Llama-3 or Gemma layouts all work.
"""

from __future__ import annotations

from dataclasses import dataclass

# Plain ASCII that every tokenizer and template passes through verbatim.
_ANCHOR = "ECHO2-TURN-ANCHOR"
_USER_ANCHOR = "ECHO2-USER-ANCHOR"


def chat_token_ids(tokenizer, messages: list[dict], *, add_generation_prompt: bool = True) -> list[int]:
    """Token ids of chat ``messages`` rendered with the tokenizer's chat template.

    With ``add_generation_prompt`` the assistant header is appended (the prompt x of a rollout).
    """
    ids = tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=add_generation_prompt)
    # transformers >= 5 returns a BatchEncoding here, older versions a plain list.
    return list(ids["input_ids"] if hasattr(ids, "keys") else ids)


def render_chat(tokenizer, messages: list[dict[str, str]], generation_prompt: bool) -> str:
    """The chat template's text of ``messages`` (with the assistant header when ``generation_prompt``)."""
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def encode_text(tokenizer, text: str) -> list[int]:
    """Token ids of ``text`` as it stands (no BOS/EOS added); template markers in it become their ids."""
    return list(tokenizer.encode(text, add_special_tokens=False))


def turn_suffix(tokenizer, user: str | None, generation_prompt: bool) -> tuple[str, str]:
    """The template's text after an assistant turn's content: (closing, opening).

    ``closing`` ends the assistant turn (ChatML: ``<|im_end|>\\n``); ``opening`` is the next user
    turn and, with ``generation_prompt``, the next assistant header. Rendered around an anchor
    assistant message in a stand-in conversation, so templates that treat the *last* assistant
    turn specially (Qwen3's empty think block) or add a default system prompt give the same
    suffix they give inside the real conversation, where the turn is history.
    """
    base = [{"role": "user", "content": "?"}, {"role": "assistant", "content": _ANCHOR}]
    alone = render_chat(tokenizer, base, False)
    closing = alone[alone.rindex(_ANCHOR) + len(_ANCHOR):]
    if user is None:
        return closing, ""
    full = render_chat(tokenizer, base + [{"role": "user", "content": user}], generation_prompt)
    after = full[full.rindex(_ANCHOR) + len(_ANCHOR):]
    if not after.startswith(closing):
        raise ValueError(f"the chat template closes an assistant turn with {closing!r} when it is last but "
                         f"not when it is history ({after[:len(closing)]!r}); ChatEpisode cannot align turns")
    return closing, after[len(closing):]


@dataclass(frozen=True)
class ChatMarkers:
    """The token ids that delimit turns in a tokenizer's chat template (what
    :func:`echo2_sdk.signals.assistant_mask` counts)."""

    turn_start_id: int
    """First token of every turn's header (ChatML: ``<|im_start|>``)."""
    header_end_id: int
    """Last token of a turn's header, right before its content (ChatML: the newline after the role)."""
    turn_end_id: int
    """First token after a turn's content, the one that closes it (ChatML: ``<|im_end|>``); a sampled
    reply ends with it, so it is the assistant's stop token."""


def chat_markers(tokenizer) -> ChatMarkers:
    """Read the turn markers off ``tokenizer``'s chat template; ValueError when it has no turn layout.

    The assistant header is what the template puts between a user turn's closing and the
    assistant's content; the closing is what follows an assistant turn's content.
    """
    try:
        closing, opening = turn_suffix(tokenizer, _USER_ANCHOR, generation_prompt=True)
    except (ValueError, AttributeError, TypeError) as exc:
        raise ValueError(f"cannot read the turn markers of {type(tokenizer).__name__}'s chat template ({exc}); "
                         "give the tokenizer a chat template (tokenizer.chat_template)") from exc
    after_user = opening[opening.rindex(_USER_ANCHOR) + len(_USER_ANCHOR):]
    if not after_user.startswith(closing):
        raise ValueError(f"the chat template closes a user turn with {after_user[:len(closing)]!r} but an "
                         f"assistant turn with {closing!r}; echo2 needs one closing for every turn")
    header = after_user[len(closing):]
    header_ids, closing_ids = encode_text(tokenizer, header), encode_text(tokenizer, closing)
    if len(header_ids) < 2 or not closing_ids:
        raise ValueError(f"the chat template's assistant header {header!r} or turn closing {closing!r} is too "
                         "short to mark turns (need a start token, a role and a closing token); use a template "
                         "that wraps every turn in marker tokens")
    # Turns are counted by these ids, so they must never come out of tokenizing ordinary text.
    markers = tokenizer.added_tokens_decoder if hasattr(tokenizer, "added_tokens_decoder") else None
    for what, text, token_id in (("opens", header, header_ids[0]), ("closes", closing, closing_ids[0])):
        if markers is not None and token_id not in markers:
            raise ValueError(f"the chat template {what} a turn with {text!r}, which starts with ordinary text "
                             f"(token {tokenizer.convert_ids_to_tokens(token_id)!r}), not a marker token; use a "
                             "template whose turns start and end with added tokens (ChatML, Llama 3, ...)")
    return ChatMarkers(turn_start_id=header_ids[0], header_end_id=header_ids[-1], turn_end_id=closing_ids[0])
