"""``check_env``: a text environment against gymnasium's checker and echo2's text-env contract.

The contract is :class:`echo2_sdk.text_env.TextEnv`'s (seeded determinism and replay, malformed
actions answered never raised, separate terminated/truncated bools, finite rewards, legal actions
accepted, bounded episodes); each failure raises :class:`EnvCheckError` naming the action and the fix.
"""

from __future__ import annotations

import math
import random
import time
import warnings
from typing import Any, Sequence

from echo2_sdk.text_env import TextEnv


class EnvCheckError(AssertionError):
    """A text env broke the contract; the message says what and how to fix it."""


MALFORMED_ACTIONS: tuple[Any, ...] = (
    "", "   ", "\n\n", "asdf qwerty", "Action:", "raise", "raise -5", "raise 1e309", "raise 12.5",
    "raise 99999999999999999999999999", "bet NaN", "fold fold fold", "x" * 100_000,
    "é¡⛔ 🂡 ῥαίσε", "\x00\x1b[31m", None, 7, 3.5, b"call", b"\xff\xfe", ["call"], {"a": 1},
)


def _fail(env: TextEnv, what: str, fix: str) -> EnvCheckError:
    return EnvCheckError(f"check_env({type(env).__name__}): {what}. Fix: {fix}")


def _check_step_output(env: TextEnv, out: Any, action: Any) -> tuple[str, float, bool, bool, dict]:
    if not (isinstance(out, tuple) and len(out) == 5):
        raise _fail(env, f"step({action!r:.40}) returned {type(out).__name__}", "return (obs, reward, terminated, truncated, info)")
    obs, reward, terminated, truncated, info = out
    if not isinstance(obs, str) or obs not in env.observation_space:
        raise _fail(env, f"step({action!r:.40}) returned an observation outside observation_space: {obs!r:.80}",
                    "observations must be str within TEXT_CHARSET and max_observation_chars; sanitize echoed text")
    if not isinstance(reward, float) or not math.isfinite(reward):
        raise _fail(env, f"step returned reward {reward!r}", "return a finite float")
    if type(terminated) is not bool or type(truncated) is not bool:
        raise _fail(env, f"terminated={terminated!r}, truncated={truncated!r}", "return two separate bools")
    if terminated and truncated:
        raise _fail(env, "terminated and truncated are both True",
                    "terminated = the task ended; truncated = cut short by a limit; never both")
    if not isinstance(info, dict) or "invalid_reason" not in info:
        raise _fail(env, "info lacks 'invalid_reason'", "use TextEnv.step, which fills it")
    return obs, reward, terminated, truncated, info


def _play(env: TextEnv, seed: int, *, max_steps: int, malformed_every: int) -> list[tuple]:
    """One episode with seeded random legal actions, malformed ones mixed in; the trail of outputs."""
    chooser = random.Random(seed)
    obs, info = env.reset(seed=seed)
    trail: list[tuple] = [(obs,)]
    for step in range(max_steps):
        legal = env.legal_actions()
        if not legal or not all(isinstance(a, str) for a in legal):
            raise _fail(env, f"legal_actions() returned {legal!r} before the episode ended",
                        "return a non-empty list of action texts while the episode runs")
        malformed = malformed_every and step % malformed_every == malformed_every - 1
        action = MALFORMED_ACTIONS[chooser.randrange(len(MALFORMED_ACTIONS))] if malformed else chooser.choice(legal)
        try:
            out = env.step(action)
        except Exception as exc:
            raise _fail(env, f"step({action!r:.60}) raised {type(exc).__name__}: {exc}",
                        "answer unusable actions with a reason in the observation, never an exception") from exc
        obs, reward, terminated, truncated, info = _check_step_output(env, out, action)
        if not malformed and info["invalid_reason"] is not None:
            raise _fail(env, f"legal action {action!r} was refused: {info['invalid_reason']}",
                        "legal_actions() must only list actions that step() accepts")
        trail.append((obs, reward, terminated, truncated, info["invalid_reason"]))
        if terminated or truncated:
            return trail
    raise _fail(env, f"the episode did not end within {max_steps} steps", "bound episodes (truncate after a step limit)")


def checker_warnings(caught: Sequence[warnings.WarningMessage]) -> list[str]:
    """The distinct messages of ``caught``, less ResourceWarnings.

    The garbage collector may finalize anything the process left open (an event loop, a socket) while a
    checker runs; its ResourceWarning says nothing about the env under check.
    """
    return sorted({str(w.message) for w in caught if not issubclass(w.category, ResourceWarning)})


def check_env(env: TextEnv, *, seeds: Sequence[int] = (0, 1, 2), max_steps: int = 2000,
              gymnasium_checks: bool = True) -> dict[str, Any]:
    """Check ``env`` against gymnasium's API and echo2's text-env contract; raise :class:`EnvCheckError`.

    echo2's checks: determinism (same seed and actions → same observations, rewards and flags, also
    through :meth:`TextEnv.replay`); malformed actions (garbage, empty, huge, unicode, non-text)
    never raise and keep observations inside the observation space; terminated and truncated are
    separate bools; rewards are finite; legal actions are accepted; episodes end.
    Returns ``{"episodes", "steps", "gymnasium_warnings", "seconds"}``.
    """
    started = time.perf_counter()
    if not isinstance(env, TextEnv):
        raise EnvCheckError(f"check_env expects a TextEnv, got {type(env).__name__}")
    # echo2's checks first: their messages name the offending action and the fix.
    steps = sum(_check_seed(env, seed, max_steps) for seed in seeds)
    gym_warnings: list[str] = []
    if gymnasium_checks:
        from gymnasium.utils.env_checker import check_env as gymnasium_check_env

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                gymnasium_check_env(env, skip_render_check=True, skip_close_check=True)
            except Exception as exc:  # its asserts, or whatever the env raised under its calls
                raise _fail(env, f"gymnasium's check_env failed: {type(exc).__name__}: {exc}",
                            "see gymnasium.utils.env_checker") from exc
        gym_warnings = checker_warnings(caught)
    return {"episodes": 2 * len(seeds), "steps": steps, "gymnasium_warnings": gym_warnings,
            "seconds": round(time.perf_counter() - started, 3)}


def _check_seed(env: TextEnv, seed: int, max_steps: int) -> int:
    """Determinism, replay and malformed actions for one seed; returns the steps taken."""
    first = _play(env, seed, max_steps=max_steps, malformed_every=3)
    assert env.log is not None
    log = env.log
    second = _play(env, seed, max_steps=max_steps, malformed_every=3)
    if first != second:
        where = next((i for i, (a, b) in enumerate(zip(first, second)) if a != b), "the end")
        raise _fail(env, f"two episodes with seed={seed} and the same actions differ (at step {where})",
                    "derive all randomness from the episode seed passed to _reset_episode")
    replayed = env.replay(log)
    if [(t.observation, t.reward) for t in replayed.turns] != [(t.observation, t.reward) for t in log.turns]:
        raise _fail(env, f"replaying the log of seed={seed} gives different observations or rewards",
                    "keep no state across episodes other than np_random")
    if len(log.turns) != len(first) - 1:
        raise _fail(env, f"the episode log holds {len(log.turns)} turns for {len(first) - 1} steps",
                    "let TextEnv.step record turns (do not override step)")
    steps = len(first) - 1
    # Every malformed action at the first decision point: answered, never raised.
    env.reset(seed=seed)
    for bad in MALFORMED_ACTIONS:
        if env.done:
            env.reset(seed=seed)
        try:
            out = env.step(bad)
        except Exception as exc:
            raise _fail(env, f"step({bad!r:.60}) raised {type(exc).__name__}: {exc}",
                        "answer unusable actions with a reason in the observation, never an exception") from exc
        _check_step_output(env, out, bad)
        steps += 1
    return steps
