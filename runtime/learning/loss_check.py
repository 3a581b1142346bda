"""Checks a policy loss's hyperparameters before the first step, and finds how it aggregates."""

from __future__ import annotations

import difflib
import inspect
from typing import Callable

import torch


def check_loss_kwargs(loss_fn: Callable, loss_name: str, loss_kwargs: dict,
                      has_ref: bool) -> tuple[str, tuple[str, ...]]:
    """Validate ``loss_kwargs`` against ``loss_fn``'s keyword parameters; return its ``loss_agg`` and the
    names of the metrics it reports (every rank reduces the same list, even one that trains only fillers).

    A loss without a ``loss_agg`` parameter is taken to be a token mean (what micro-batch weighting
    then assumes). Raises TypeError for an unknown key (with the closest name) and ValueError for a KL
    coefficient without a reference model or a value the loss itself refuses (a one-token dry run).
    """
    params = inspect.signature(loss_fn).parameters
    accepted = sorted(name for name, p in params.items()
                      if p.kind == inspect.Parameter.KEYWORD_ONLY and name != "ref_logprobs")
    for key in loss_kwargs:
        if key not in accepted:
            close = difflib.get_close_matches(key, accepted, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            raise TypeError(f"loss_kwargs key {key!r} is not a parameter of policy loss {loss_name!r}"
                            f"{hint}; accepted keys: {accepted}")
    kl_param = params.get("kl_coef")
    kl_coef = loss_kwargs.get("kl_coef", kl_param.default if kl_param is not None else 0.0)
    if kl_coef and not has_ref:
        raise ValueError(f"loss_kwargs kl_coef={kl_coef} needs a reference model; pass ref_model=... "
                         "(a frozen copy of the initial policy) or set kl_coef=0")
    z = torch.zeros(1, 1)
    _, metrics = loss_fn(z, z, z, z, torch.ones(1, 1), ref_logprobs=z, **loss_kwargs)
    agg_param = params.get("loss_agg")
    loss_agg = str(loss_kwargs.get("loss_agg", agg_param.default if agg_param is not None else "token-mean"))
    return loss_agg, tuple(sorted(metrics))
