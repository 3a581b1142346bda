"""echo2_sdk.algos: advantage estimators and policy losses share one registry behaviour."""

import pytest

from echo2_sdk import algos
from echo2_sdk.algos import (UnknownAlgorithmError, get_advantage, get_policy_loss, list_advantages,
                             list_policy_losses, register_advantage, register_policy_loss)

KINDS = [
    (register_advantage, get_advantage, list_advantages, "grpo", "advantage estimators"),
    (register_policy_loss, get_policy_loss, list_policy_losses, "grpo", "policy losses"),
]


@pytest.mark.parametrize("register, get, names, builtin, plural", KINDS)
def test_unknown_names_are_key_and_value_errors_with_a_suggestion(register, get, names, builtin, plural):
    assert builtin in names() and names() == sorted(names())
    for caught in (KeyError, ValueError, UnknownAlgorithmError):
        with pytest.raises(caught, match=rf"unknown .* 'grp'\. Did you mean 'grpo'\? Known {plural}: \["):
            get("grp")
    with pytest.raises(KeyError, match=r"@register_\w+\(name\)"):
        get("zzz-not-registered")


@pytest.mark.parametrize("register, get, names, builtin, plural", KINDS)
def test_same_rules_for_registering(register, get, names, builtin, plural):
    original = get(builtin)
    assert register(builtin)(original) is original  # the same function again (a reload): allowed
    with pytest.raises(ValueError, match=rf"{builtin!r} is already registered to .*; pick another name"):
        register(builtin)(lambda *args, **kwargs: None)
    with pytest.raises(ValueError, match="non-empty string"):
        register("")
    with pytest.raises(TypeError, match="needs a function"):
        register("not-a-function")(42)
    assert get(builtin) is original


def test_a_new_function_is_found_by_name_and_listed(monkeypatch):
    monkeypatch.setattr(algos.ADVANTAGES, "_functions", dict(algos.ADVANTAGES._functions))

    @register_advantage("zero")
    def zero(rewards, index):
        return rewards * 0

    assert get_advantage("zero") is zero and "zero" in list_advantages()
