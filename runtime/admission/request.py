"""Group-level checks of one generate reply: against the request the pool sent, and within each group.

A reply's records are checked one by one by ``echo2_sdk.records.validate_group``; what a single record
cannot show is checked here, on the whole group and on the reply:

* each group answers an example the pool asked this worker for in this request (``unrequested``), at most
  once per time it was asked (``duplicate_group``): a resent group is never trained on twice, and the
  bookkeeping is the pool's in-flight requests only, not a set that grows with the run;
* a group holds exactly the ``samples_per_prompt`` records asked for (``group_size``): one of 1 or of
  1,000 samples would skew the advantage normalization of its prompt;
* its records agree on the prompt key, the Ω.group tag and the prompt ids (``mixed_group``): a group is
  the n samples of one prompt, and a record tagged otherwise would be normalized with another group;
* its prompt ids are the learner's own rendering of the asked example (``prompt_mismatch``), for
  single-turn tasks, whose prompt is the chat template of the example's messages.

Without a request (a caller that has none) only the checks within the reply and each group apply.
"""

from __future__ import annotations

from collections import Counter
from typing import Callable, Sequence

from echo2_sdk.adapter import BaseTaskAdapter, Example, MultiTurnTaskAdapter
from echo2_sdk.records import RolloutGroup
from echo2_sdk.runtime.admission.base import DUPLICATE_GROUP, GROUP_SIZE, MIXED_GROUP, PROMPT_MISMATCH, UNREQUESTED
from echo2_sdk.runtime.rollout.base import SentRequest

PromptIds = Callable[[Example], "Sequence[int] | None"]
"""The learner's prompt ids of an example (None: not known here, e.g. a multi-turn task's first turn)."""


class ReplyCheck:
    """The checks of one reply, with what its earlier groups used up of the request."""

    def __init__(self, request: SentRequest | None, prompt_ids: PromptIds | None = None) -> None:
        self.request, self.prompt_ids = request, prompt_ids
        self._examples = {ex.id: ex for ex in request.examples} if request is not None else {}
        self._left = Counter(ex.id for ex in request.examples) if request is not None else Counter()
        self._seen: set[str] = set()

    def shape(self, group: RolloutGroup) -> str | None:
        """The reason to refuse ``group`` before its records are validated, or None."""
        key = group.prompt_key
        if self.request is not None:
            if key not in self._examples:
                return UNREQUESTED
            if self._left[key] == 0:
                return DUPLICATE_GROUP
            self._left[key] -= 1  # used up even if the group fails a later check: it had its one chance
        elif key in self._seen:
            return DUPLICATE_GROUP
        self._seen.add(key)
        n = len(group.rollouts)
        if n == 0 or (self.request is not None and n != self.request.samples_per_prompt):
            return GROUP_SIZE
        first = group.rollouts[0]
        for r in group.rollouts:
            if r.prompt_key != key or r.omega.group != first.omega.group or r.prompt_ids != first.prompt_ids:
                return MIXED_GROUP
        return None

    def prompt(self, group: RolloutGroup) -> str | None:
        """The reason to refuse ``group`` (its records validated) for its prompt ids, or None."""
        if self.prompt_ids is None or group.prompt_key not in self._examples:
            return None
        expected = self.prompt_ids(self._examples[group.prompt_key])
        if expected is None:
            return None
        expected = tuple(expected)
        return None if all(r.prompt_ids == expected for r in group.rollouts) else PROMPT_MISMATCH


class PromptRenderer:
    """The prompt ids a worker samples from for an example of a single-turn task, as the worker builds
    them (``RolloutWorker._prompt_ids``); None for multi-turn tasks, whose first turn comes from playing
    the environment (their groups are still checked to share one prompt)."""

    def __init__(self, adapter: BaseTaskAdapter, tokenizer, *, cache_size: int = 4096) -> None:
        self.adapter, self.tokenizer, self.cache_size = adapter, tokenizer, cache_size
        self.enabled = not isinstance(adapter, MultiTurnTaskAdapter)
        self._cache: dict[str, tuple[int, ...]] = {}

    def __call__(self, example: Example) -> tuple[int, ...] | None:
        if not self.enabled:
            return None
        ids = self._cache.get(example.id)
        if ids is None:
            from echo2_sdk.chat import chat_token_ids

            # Rendering the chat template is slow next to comparing ids, and prompts repeat every epoch;
            # the cache is bounded (oldest out) so a large train split cannot grow it without end.
            ids = tuple(chat_token_ids(self.tokenizer, self.adapter.build_messages(example)))
            if len(self._cache) >= self.cache_size:
                self._cache.pop(next(iter(self._cache)))
            self._cache[example.id] = ids
        return ids
