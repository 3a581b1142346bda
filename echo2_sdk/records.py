"""The canonical rollout record τ = (x, y, r, v, Ω) and its validation on arrival.

A record is immutable (frozen dataclass of tuples) and tagged with the policy version v that
generated it. Records travel from rollout workers to the learner in groups: all n samples of one
prompt, generated under one version. Every record is validated when it reaches the learner side;
an invalid record is rejected with a reason and counted, never trained on (a bad rollout is data,
not a crash).

Alignment convention: every per-token field (``sampler_logprobs``, ``Omega.loss_mask``) is aligned
to ``completion_ids`` — index i describes completion token i. For multi-turn episodes the completion
holds assistant turns *and* environment/user turns; the loss mask is 1 only on assistant tokens.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Iterable, Mapping


class FrozenDict(dict):
    """A read-only dict that still pickles (``MappingProxyType`` does not), for record metadata."""

    def _readonly(self, *args, **kwargs):
        raise TypeError("record metadata is immutable")

    __setitem__ = __delitem__ = clear = pop = popitem = setdefault = update = _readonly  # type: ignore

    def __reduce__(self):
        return (FrozenDict, (dict(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(sorted(self.items(), key=repr)))


@dataclass(frozen=True)
class Omega:
    """Ω: what the learner needs besides tokens and reward.

    Built on the rollout side by the task adapter (``TaskAdapter.materialize``); the learner reads it
    without knowing which task produced it.
    """

    loss_mask: tuple[int, ...]
    """[len(completion_ids)] 1 where the completion token is trained on (assistant tokens), else 0."""
    group: str
    """Advantage group tag: samples with equal tags are normalized together (by default the prompt id)."""


@dataclass(frozen=True)
class Rollout:
    """τ = (x, y, r, v, Ω): one sampled completion, its reward, the version that produced it, and Ω."""

    prompt_ids: tuple[int, ...]
    """x: the prompt tokens (chat template applied)."""
    completion_ids: tuple[int, ...]
    """y: the generated tokens (for multi-turn: all turns after the prompt, env turns included)."""
    reward: float
    """r = R(x, y), computed on the rollout worker."""
    version: int
    """v: the policy version installed on the worker when generation started."""
    omega: Omega
    """Ω: loss mask and advantage group tag."""
    sampler_logprobs: tuple[float, ...]
    """[len(completion_ids)] log π_sampler of each completion token (0.0 where loss_mask is 0)."""
    prompt_key: str
    """Stable id of the task example (used for grouping, dedup and metrics)."""
    meta: Mapping[str, Any] = field(default_factory=dict)
    """Free-form, read-only facts (worker id, finish reason, reward error...). Never used for training."""

    def __post_init__(self) -> None:
        # Freeze containers so that a record cannot be changed after creation (τ is immutable).
        # None is kept so that validation can name the missing field instead of crashing here.
        for name in ("prompt_ids", "completion_ids", "sampler_logprobs"):
            value = getattr(self, name)
            if value is not None:
                object.__setattr__(self, name, tuple(value))
        if isinstance(self.omega, Omega) and not isinstance(self.omega.loss_mask, tuple):
            object.__setattr__(self, "omega", Omega(tuple(self.omega.loss_mask), self.omega.group))
        object.__setattr__(self, "meta", FrozenDict(self.meta))

    @property
    def num_tokens(self) -> int:
        return len(self.prompt_ids) + len(self.completion_ids)


@dataclass(frozen=True)
class RolloutGroup:
    """All n samples of one prompt, generated under one version (the replay buffer's unit)."""

    prompt_key: str
    version: int
    rollouts: tuple[Rollout, ...]
    worker_id: str = ""
    t_generated: float = 0.0
    """Wall-clock time (time.time()) at which the worker finished the group."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "rollouts", tuple(self.rollouts))

    @property
    def rewards(self) -> list[float]:
        return [r.reward for r in self.rollouts]


# Reasons are short stable identifiers so they can be counted and plotted.
REJECT_REASONS = (
    "malformed",
    "missing_field",
    "empty_completion",
    "length_mismatch",
    "non_finite",
    "unknown_version",
    "oversize",
    "bad_mask",
    "version_mismatch",
    "wrong_type",
    "empty_prompt",
    "out_of_range",
)

MAX_TOKEN_ID = 2**31 - 1
"""Token ids above this are refused even when the vocabulary size is not known (they could not index an
embedding table, and an arbitrary JSON integer would overflow the learner's int64 tensors)."""


@dataclass(frozen=True)
class RecordLimits:
    """Bounds used by :func:`validate_rollout`."""

    max_total_tokens: int = 32768
    vocab_size: int | None = None
    max_completion_tokens: int | None = None
    """Single-turn tasks: the sampler's ``max_new_tokens`` (no honest completion is longer). None for
    multi-turn tasks, whose completion also holds environment turns (``max_total_tokens`` bounds it)."""
    max_abs_reward: float = 1e9
    """|r| above this is refused: far beyond any task's scale, and far below where float32 advantages
    (squares of reward differences) overflow."""
    min_logprob: float = -1e4
    """A trained token's sampler log-prob below this is refused (a sampled token is never that unlikely,
    and float32 must hold the value: -1e308 would become -inf in the learner's batch)."""


def validate_rollout(
    rec: Any, *, newest_version: int, limits: RecordLimits = RecordLimits()
) -> str | None:
    """Return ``None`` if ``rec`` may be trained on, else a rejection reason ``"<code>: <detail>"``.

    ``newest_version`` is the newest snapshot the learner has published; a record claiming a newer
    (or negative) version was not produced by this learner.
    """
    if not isinstance(rec, Rollout):
        return f"wrong_type: expected Rollout, got {type(rec).__name__}"
    for name in ("prompt_ids", "completion_ids", "sampler_logprobs", "omega", "prompt_key"):
        if getattr(rec, name, None) is None:
            return f"missing_field: {name} is None"
    if not isinstance(rec.omega, Omega) or rec.omega.loss_mask is None:
        return "missing_field: omega.loss_mask"
    n = len(rec.completion_ids)
    if n == 0:
        return "empty_completion: completion has no tokens"
    if not rec.prompt_ids:  # the first completion token is predicted from the last prompt position
        return "empty_prompt: prompt has no tokens"
    if len(rec.sampler_logprobs) != n:
        return f"length_mismatch: {len(rec.sampler_logprobs)} logprobs for {n} completion tokens"
    if len(rec.omega.loss_mask) != n:
        return f"length_mismatch: loss_mask has {len(rec.omega.loss_mask)} entries for {n} tokens"
    if any(m not in (0, 1) for m in rec.omega.loss_mask):
        return "bad_mask: loss_mask entries must be 0 or 1"
    if not any(rec.omega.loss_mask):
        return "bad_mask: loss_mask selects no token"
    reward = _as_float(rec.reward)
    if reward is None or not math.isfinite(reward):
        return f"non_finite: reward={str(rec.reward)[:40]}"
    if abs(reward) > limits.max_abs_reward:
        return f"out_of_range: reward={reward!r} beyond ±{limits.max_abs_reward:g}"
    for raw, m in zip(rec.sampler_logprobs, rec.omega.loss_mask):
        lp = _as_float(raw)
        if lp is None:  # even a masked-out entry must fit a float: the learner builds a tensor of them all
            return f"out_of_range: sampler logprob {str(raw)[:40]} is not a float"
        if m and not (math.isfinite(lp) and lp <= 1e-4):
            return f"non_finite: sampler logprob {lp!r} on a trained token"
        if m and lp < limits.min_logprob:
            return f"out_of_range: sampler logprob {lp!r} below {limits.min_logprob:g} on a trained token"
    if not _is_int(rec.version) or rec.version < 0 or rec.version > newest_version:
        return f"unknown_version: v={str(rec.version)[:40]}, newest published is {newest_version}"
    if rec.num_tokens > limits.max_total_tokens:
        return f"oversize: {rec.num_tokens} tokens > max_total_tokens={limits.max_total_tokens}"
    if limits.max_completion_tokens is not None and n > limits.max_completion_tokens:
        return f"oversize: completion of {n} tokens > max_new_tokens={limits.max_completion_tokens}"
    upper = limits.vocab_size if limits.vocab_size is not None else MAX_TOKEN_ID + 1
    for t in rec.prompt_ids + rec.completion_ids:
        if not _is_int(t):
            return f"wrong_type: token id {str(t)[:40]} is not an integer"
        if not 0 <= t < upper:
            return f"oversize: token id {str(t)[:40]} outside vocab of {upper}"
    return None


def validate_group(
    group: Any, *, newest_version: int, limits: RecordLimits = RecordLimits()
) -> tuple[list[Rollout], Counter]:
    """Validate every record of a group; return (accepted records, Counter of rejection codes).

    A record whose version differs from the group's version is rejected (a group is generated under
    one version by definition).
    """
    rejected: Counter = Counter()
    if not isinstance(group, RolloutGroup):
        rejected["wrong_type"] += 1
        return [], rejected
    accepted = []
    for rec in group.rollouts:
        reason = validate_rollout(rec, newest_version=newest_version, limits=limits)
        if reason is None and rec.version != group.version:
            reason = f"version_mismatch: record v={rec.version} in group v={group.version}"
        if reason is None:
            accepted.append(rec)
        else:
            rejected[reason.split(":", 1)[0]] += 1
    return accepted, rejected


def count_reasons(reasons: Iterable[str | None]) -> Counter:
    """Count rejection codes (the part before ':') of non-None reasons."""
    return Counter(r.split(":", 1)[0] for r in reasons if r is not None)


# ----- wire format ------------------------------------------------------------------------------
# Groups travel from workers to the learner as plain builtins (dict / list / str / int / float):
# serializers handle those on their fast path (Ray's pickler calls back into Python for every
# custom object), and the format can move to JSON or msgpack unchanged when workers are untrusted.

def group_to_wire(group: RolloutGroup) -> dict:
    return {
        "prompt_key": group.prompt_key,
        "version": group.version,
        "worker_id": group.worker_id,
        "t_generated": group.t_generated,
        "rollouts": [
            {
                "x": list(r.prompt_ids),
                "y": list(r.completion_ids),
                "r": r.reward,
                "v": r.version,
                "mask": list(r.omega.loss_mask),
                "group": r.omega.group,
                "logprobs": list(r.sampler_logprobs),
                "key": r.prompt_key,
                "meta": dict(r.meta),
            }
            for r in group.rollouts
        ],
    }


def group_from_wire(data: Any) -> RolloutGroup:
    """Rebuild a group from :func:`group_to_wire` output; ValueError says what is malformed.

    JSON can carry any type anywhere: the fields later code compares, orders or hashes (token ids,
    log-probs, versions, prompt keys, group tags) must have the types records need, or the group is
    refused here rather than raising there. A missing optional field (None) is left to
    :func:`validate_group`, which names it."""
    try:
        rollouts = tuple(
            Rollout(
                prompt_ids=r["x"],
                completion_ids=r["y"],
                reward=r["r"],
                version=r["v"],
                omega=Omega(tuple(r["mask"]), r["group"]),
                sampler_logprobs=r["logprobs"],
                prompt_key=r["key"],
                meta=r.get("meta", {}),
            )
            for r in data["rollouts"]
        )
        group = RolloutGroup(data["prompt_key"], data["version"], rollouts,
                             worker_id=data.get("worker_id", ""), t_generated=data.get("t_generated", 0.0))
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"malformed group on the wire: {type(exc).__name__}: {exc}") from None
    wrong = _mistyped_field(group)
    if wrong is not None:
        raise ValueError(f"malformed group on the wire: {wrong} has the wrong JSON type")
    return group


def _mistyped_field(group: RolloutGroup) -> str | None:
    """The first field whose JSON type records cannot hold, or None."""
    if not isinstance(group.prompt_key, str):
        return "prompt_key"
    if not _is_int(group.version):
        return "version"
    if not _is_number(group.t_generated):
        return "t_generated"
    for r in group.rollouts:
        for name, ok in (("key", isinstance(r.prompt_key, (str, type(None)))),
                         ("group", isinstance(r.omega.group, (str, type(None)))),
                         ("x", _all_of(r.prompt_ids, _is_int)), ("y", _all_of(r.completion_ids, _is_int)),
                         ("logprobs", _all_of(r.sampler_logprobs, _is_number))):
            if not ok:
                return f"a rollout's {name!r}"
    return None


def _all_of(values: Any, check) -> bool:
    return values is None or (isinstance(values, (list, tuple)) and all(check(v) for v in values))


def _is_number(value: object) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_float(value: object) -> float | None:
    """``value`` as a float, or None when it is no number or does not fit one (JSON integers are
    unbounded: ``float(10**400)`` raises)."""
    if not _is_number(value):
        return None
    try:
        return float(value)
    except OverflowError:
        return None
