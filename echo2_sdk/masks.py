"""Turn-aware loss masks over chat token sequences: pure Python (no torch), so that a multi-turn task
module and ``echo2 eval`` stay light. :mod:`echo2_sdk.signals` re-exports these names."""

from __future__ import annotations

from typing import Sequence


def turn_index(token_ids: Sequence[int], im_start_id: int) -> list[int]:
    """c_t: how many turn-start tokens (``im_start_id``) occur at positions ≤ t. [T] ints.

    >>> turn_index([9, 1, 5, 1, 5], im_start_id=1)
    [0, 1, 1, 2, 2]
    """
    out, c = [], 0
    for t in token_ids:
        c += t == im_start_id
        out.append(c)
    return out


def assistant_mask(
    token_ids: Sequence[int],
    *,
    im_start_id: int,
    im_end_id: int,
    newline_id: int,
    first_assistant_turn: int = 3,
) -> list[int]:
    """Turn-aware mask over a chat token sequence: 1 on assistant-written tokens.

    The marker ids come from the tokenizer's chat template: :func:`echo2_sdk.chat.chat_markers` gives
    ``turn_start_id`` (``im_start_id``), ``turn_end_id`` (``im_end_id``) and ``header_end_id``
    (``newline_id``; in ChatML the newline after the role).

    A token is in an assistant turn when its turn counter c_t (see :func:`turn_index`) satisfies
    c_t ≥ ``first_assistant_turn`` and c_t has the parity of ``first_assistant_turn``. With the
    default 3 this is the rule "c_t > 1 and c_t odd" for conversations laid out
    system, user, assistant, user, assistant, ...; pass 2 for conversations without a system
    message (user, assistant, user, ...).

    Within an assistant turn the role header (the turn-start token up to and including the first
    ``newline_id``) is excluded — the model never writes it — and the closing ``im_end_id`` is
    included so the model learns to stop; whatever the template writes after it is excluded.

    Returns a [T] 0/1 list aligned to ``token_ids``. Use :func:`shift_to_targets` to align it with
    next-token targets.
    """
    mask, c, in_header, closed = [], 0, False, False
    parity = first_assistant_turn % 2
    for t in token_ids:
        if t == im_start_id:
            c += 1
            in_header, closed = True, False
            mask.append(0)
            continue
        is_assistant = c >= first_assistant_turn and c % 2 == parity
        if in_header:
            mask.append(0)
            in_header = t != newline_id
            continue
        if closed:
            mask.append(0)
            continue
        mask.append(int(is_assistant))
        closed = t == im_end_id
    return mask


def shift_to_targets(mask: Sequence[int]) -> list[int]:
    """Align a per-token mask [T] with next-token targets [T-1]: target j predicts token j+1."""
    return list(mask[1:])


def turn_spans(loss_mask: Sequence[int]) -> list[tuple[int, int]]:
    """The assistant turns of a completion: [start, end) of each run of trained (mask 1) tokens.

    >>> turn_spans([0, 1, 1, 0, 0, 1, 0, 1])
    [(1, 3), (5, 6), (7, 8)]
    """
    spans, start = [], None
    for i, m in enumerate(list(loss_mask) + [0]):
        if m and start is None:
            start = i
        elif not m and start is not None:
            spans.append((start, i))
            start = None
    return spans
