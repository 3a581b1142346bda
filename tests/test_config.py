import pytest

from echo2_sdk.config import ConfigError, Echo2Config, load_config, resolve_kappa, to_dict
from echo2_sdk.config_loader import build_dataclass


def test_defaults_and_overrides(tmp_path):
    f = tmp_path / "c.yaml"
    f.write_text("train:\n  steps: 7\nrollout:\n  temperature: 0.7\n")
    cfg = load_config(str(f), ["train.steps=9", "algo.tis_cap=null", "rollout.workers=[{name: a, max_tokens_per_s: 50}]"])
    assert cfg.train.steps == 9
    assert cfg.rollout.temperature == 0.7
    assert cfg.algo.tis_cap is None
    assert cfg.rollout.workers[0].name == "a" and cfg.rollout.workers[0].max_tokens_per_s == 50.0
    assert cfg.num_workers == 1
    with pytest.raises(Exception):
        cfg.train.steps = 3  # frozen


def test_unknown_key_names_closest_valid_key():
    with pytest.raises(ConfigError, match=r"unknown config key 'rollout.tempreature'.*Did you mean 'rollout.temperature'"):
        load_config(None, ["rollout.tempreature=0.5"])
    with pytest.raises(ConfigError, match=r"'trian'.*Did you mean 'train'"):
        load_config(None, ["trian.steps=3"])


def test_wrong_type_names_path_value_and_expected_type():
    with pytest.raises(ConfigError, match=r"train.steps: expected an integer, got 'abc'"):
        load_config(None, ["train.steps=abc"])
    with pytest.raises(ConfigError, match=r"runtime.mode: 'fast' is not one of \['async', 'sync'\]"):
        load_config(None, ["runtime.mode=fast"])
    with pytest.raises(ConfigError, match="expected true/false"):
        load_config(None, ["model.warm_start.enabled=3"])


def test_task_options_are_validated_against_adapter():
    with pytest.raises(ConfigError, match=r"task.options.first_opernd.*Did you mean 'task.options.first_operand'"):
        load_config(None, ["task.options.first_opernd=[0, 5]"])


def test_kappa_rules():
    assert resolve_kappa(3, None) == 2
    assert resolve_kappa(6, None) == 5
    assert resolve_kappa(2, None) == 2
    assert resolve_kappa(4, 3) == 3
    with pytest.raises(ConfigError, match="2 ≤ κ ≤ S=3"):
        resolve_kappa(3, 1)
    with pytest.raises(ConfigError, match="raise runtime.staleness"):
        resolve_kappa(1, None)
    with pytest.raises(ConfigError):
        load_config(None, ["runtime.kappa=5"])
    # sync mode ignores S
    assert load_config(None, ["runtime.mode=sync", "runtime.staleness=0"]).runtime.staleness == 0


def test_round_trip_through_yaml(tmp_path):
    import yaml

    cfg = load_config(None, ["train.steps=3", "rollout.workers=[{name: a}]"])
    f = tmp_path / "r.yaml"
    f.write_text(yaml.safe_dump(to_dict(cfg)))
    assert load_config(str(f)) == cfg


def test_bad_override_syntax():
    with pytest.raises(ConfigError, match="expected KEY=VALUE"):
        load_config(None, ["train.steps"])
    with pytest.raises(ConfigError, match="expected a mapping"):
        build_dataclass(Echo2Config, {"train": 3})
