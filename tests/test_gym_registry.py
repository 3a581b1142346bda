"""Every echo2 text env is registered with gymnasium under ``echo2/`` and passes gymnasium's and echo2's checks."""

from __future__ import annotations

import subprocess
import sys
import warnings

import gymnasium
import pytest
from gymnasium.utils.env_checker import check_env as gymnasium_check_env

import echo2_sdk.envs
from echo2_sdk.env import TextEnv, check_env
from echo2_sdk.env_check import checker_warnings

BUILTIN_IDS = {"echo2/Poker-v0", "echo2/Moba-v0"}
# Shorter games keep the checks quick; an env registered later is checked with its defaults.
MAKE_KWARGS = {"echo2/Moba-v0": {"max_ticks": 60}}


def echo2_env_ids() -> list[str]:
    return sorted(env_id for env_id, spec in gymnasium.registry.items() if spec.namespace == "echo2")


def test_the_builtin_envs_are_registered_under_the_echo2_namespace():
    assert BUILTIN_IDS <= set(echo2_env_ids()), echo2_env_ids()
    assert set(echo2_sdk.envs.GYM_ENVS) <= set(echo2_env_ids())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # registering again must not override (gymnasium warns when it does)
        assert set(echo2_sdk.envs.register_gym_envs()) == set(echo2_sdk.envs.GYM_ENVS)


@pytest.mark.parametrize("env_id", echo2_env_ids())
def test_each_registered_env_passes_gymnasium_and_echo2_checks(env_id):
    env = gymnasium.make(env_id, **MAKE_KWARGS.get(env_id, {}))
    assert isinstance(env.unwrapped, TextEnv), f"{env_id} makes a {type(env.unwrapped).__name__}, not a TextEnv"
    with warnings.catch_warnings(record=True) as caught:  # gymnasium's checker asks for the bare env
        warnings.simplefilter("always")
        gymnasium_check_env(env.unwrapped, skip_render_check=True, skip_close_check=True)
    assert checker_warnings(caught) == []
    report = check_env(env.unwrapped)
    assert report["steps"] > 10 and report["gymnasium_warnings"] == []
    # Through gymnasium's wrappers (order enforcing, passive checker) the env plays like the bare one.
    obs, info = env.reset(seed=0)
    assert obs in env.observation_space and info["legal_actions"]
    obs, reward, terminated, truncated, info = env.step(info["legal_actions"][0])
    assert obs in env.observation_space and isinstance(reward, float) and info["invalid_reason"] is None
    env.close()


def test_make_passes_keyword_arguments_to_the_env_config():
    env = gymnasium.make("echo2/Poker-v0", seats=6, opponents=("rule:lag",))
    assert env.unwrapped.config.seats == 6 and env.unwrapped.config.opponents == ("rule:lag",)
    with pytest.raises(TypeError, match="Did you mean 'seats'"):
        gymnasium.make("echo2/Poker-v0", seat=6)
    with pytest.raises(gymnasium.error.Error, match="Poker"):
        gymnasium.make("echo2/Pokerr-v0")


def test_make_works_without_importing_echo2_first():
    code = ("import sys, gymnasium; assert 'echo2_sdk' not in sys.modules; "
            "env = gymnasium.make('echo2_sdk.envs:echo2/Moba-v0', max_ticks=30); "
            "obs, info = env.reset(seed=1); print(type(env.unwrapped).__name__, bool(info['legal_actions']))")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["MobaEnv", "True"]


def test_checker_warnings_keep_the_envs_and_drop_the_garbage_collectors():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        warnings.warn("unclosed event loop <loop>", ResourceWarning)  # what a finalizer may emit mid-check
        warnings.warn("The obs returned by the `step()` method is not within the observation space.", UserWarning)
        warnings.warn("The obs returned by the `step()` method is not within the observation space.", UserWarning)
    assert checker_warnings(caught) == ["The obs returned by the `step()` method is not within the observation space."]
