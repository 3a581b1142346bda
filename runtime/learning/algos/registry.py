"""Name -> function registry for policy losses (modelled on verl's `core_algos` registries).

Every registered policy loss is a pure function with the common signature

    loss_fn(logprobs, old_logprobs, sampler_logprobs, advantages, loss_mask, *,
            ref_logprobs=None, **hyperparameters) -> tuple[Tensor, dict[str, float]]

where every tensor is float `[B, T]`, target-aligned (position j holds the log-prob of the token
the sequence has at j+1) and `loss_mask` is 0/1. It returns a scalar loss to minimise (with
grad through `logprobs` only) and a dict of float metrics. The learner calls it once per
mini-batch and knows nothing else about the algorithm.

    @register_policy_loss("my_loss")
    def my_loss(logprobs, old_logprobs, sampler_logprobs, advantages, loss_mask, *,
                ref_logprobs=None, my_coef=1.0): ...

    loss_fn = get_policy_loss("my_loss")
"""

from __future__ import annotations

import difflib
from typing import Callable

PolicyLossFn = Callable[..., tuple]

_POLICY_LOSSES: dict[str, PolicyLossFn] = {}


class UnknownPolicyLossError(KeyError, ValueError):
    """`get_policy_loss` got an unregistered name (catchable as KeyError or ValueError)."""

    def __str__(self) -> str:  # KeyError would otherwise print the message inside quotes
        return str(self.args[0]) if self.args else ""


def register_policy_loss(name: str) -> Callable[[PolicyLossFn], PolicyLossFn]:
    """Decorator registering `fn` under `name`; returns `fn` unchanged.

    Re-registering the same function (e.g. a module reload) is allowed; registering a different
    function under a taken name raises ValueError.
    """
    if not isinstance(name, str) or not name:
        raise ValueError(f"policy loss name must be a non-empty string, got {name!r}")

    def decorator(fn: PolicyLossFn) -> PolicyLossFn:
        if not callable(fn):
            raise TypeError(f"register_policy_loss({name!r}) needs a function, got {fn!r}")
        existing = _POLICY_LOSSES.get(name)
        if existing is not None and _qualname(existing) != _qualname(fn):
            raise ValueError(
                f"policy loss {name!r} is already registered to {_qualname(existing)}; "
                f"pick another name for {_qualname(fn)}"
            )
        _POLICY_LOSSES[name] = fn
        return fn

    return decorator


def get_policy_loss(name: str) -> PolicyLossFn:
    """The policy loss registered under `name`; unknown names raise UnknownPolicyLossError
    (a KeyError) that lists the known names and the closest match."""
    _load_builtins()
    try:
        return _POLICY_LOSSES[name]
    except KeyError:
        known = list_policy_losses()
        close = difflib.get_close_matches(str(name), known, n=1)
        hint = f"; did you mean {close[0]!r}?" if close else ""
        raise UnknownPolicyLossError(
            f"unknown policy loss {name!r}{hint} Known policy losses: {known}. "
            f"Register new ones with @register_policy_loss(name)."
        ) from None


def list_policy_losses() -> list[str]:
    """Sorted names of all registered policy losses."""
    _load_builtins()
    return sorted(_POLICY_LOSSES)


def _qualname(fn: PolicyLossFn) -> str:
    return f"{getattr(fn, '__module__', '?')}.{getattr(fn, '__qualname__', repr(fn))}"


def _load_builtins() -> None:
    # Importing the package registers the built-in losses even when a caller imported only this
    # module (`from echo2_sdk.runtime.learning.algos.registry import get_policy_loss`).
    import echo2_sdk.runtime.learning.algos  # noqa: F401
