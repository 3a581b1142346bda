"""``echo2_sdk`` is the package's face: its main names resolve lazily, without torch or Ray."""

import subprocess
import sys

import pytest

import echo2_sdk

HEAVY = ("torch", "ray", "transformers", "vllm")


def _modules_after(code: str) -> set[str]:
    """Top-level modules loaded by a fresh interpreter running ``code``."""
    out = subprocess.run([sys.executable, "-c", code + "\nimport sys; print(' '.join(sys.modules))"],
                         capture_output=True, text=True, timeout=120, check=True).stdout
    return {name.partition(".")[0] for name in out.split()}


def test_import_echo2_sdk_loads_neither_torch_nor_ray():
    loaded = _modules_after("import echo2_sdk; echo2_sdk.__all__")
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_echo2_help_loads_neither_torch_nor_ray():
    code = ("from echo2_sdk.runtime.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass")
    loaded = _modules_after(code)
    assert not loaded & {"torch", "ray"}, sorted(loaded & {"torch", "ray"})


@pytest.mark.parametrize("name", echo2_sdk.__all__)
def test_every_public_name_resolves_to_its_module(name):
    value = getattr(echo2_sdk, name)
    assert getattr(value, "__name__", name) == name
    assert value.__module__.startswith("echo2_sdk.")


def test_the_main_names_are_public_and_unknown_ones_fail():
    main = {"TaskAdapter", "MultiTurnTaskAdapter", "EpisodicTaskAdapter", "Example", "Rollout", "RolloutGroup",
            "Omega", "register_task", "make_task", "get_task_class", "TextEnv", "ChatEpisode", "check_adapter",
            "check_env", "load_config", "Echo2Config", "register_advantage", "register_policy_loss"}
    assert main <= set(echo2_sdk.__all__) and main <= set(dir(echo2_sdk))
    with pytest.raises(AttributeError, match="has no attribute 'TaskAdaptor'"):
        echo2_sdk.TaskAdaptor  # noqa: B018
    from echo2_sdk import env  # submodules still import as before

    assert echo2_sdk.TextEnv is env.TextEnv and echo2_sdk.check_env is env.check_env
