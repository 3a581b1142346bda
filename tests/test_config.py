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


def test_admission_margins_are_checked():
    cfg = load_config(None, ["runtime.admission_margin_devs=1", "runtime.admission_margin_max_devs=4"])
    assert (cfg.runtime.admission_margin_devs, cfg.runtime.admission_margin_max_devs) == (1.0, 4.0)
    assert load_config(None, []).runtime.admission_margin_max_devs == 3.0  # adaptive by default
    for bad in ("runtime.admission_margin_max_devs=-1", "runtime.admission_margin_devs=.nan"):
        with pytest.raises(ConfigError, match=r"runtime\.admission_margin_(max_)?devs=.* must be a finite number >= 0"):
            load_config(None, [bad])


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


@pytest.mark.parametrize("override, message", [
    ("rollout.samples_per_prompt=1", r"samples_per_prompt=1 .*every advantage is 0.*samples_per_prompt >= 2"),
    ("train.steps=0", r"train.steps=0 must be >= 1"),
    ("rollout.temperature=-1", r"rollout.temperature=-1.0 must be a finite number > 0"),
    ("rollout.temperature=0", r"0 would be greedy"),
    ("algo.lr=-1", r"algo.lr=-1.0 must be a finite number > 0, e.g. 1e-6"),
    ("algo.lr=.nan", r"algo.lr=nan must be"),
])
def test_configs_that_cannot_learn_or_run_are_refused_with_the_fix(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(None, [override])


def test_one_sample_per_prompt_is_fine_when_the_advantage_is_not_per_prompt():
    cfg = load_config(None, ["rollout.samples_per_prompt=1", "algo.grouping=batch"])
    assert cfg.rollout.samples_per_prompt == 1


@pytest.mark.parametrize("text, value", [("1e-6", 1e-6), ("3e-4", 3e-4), ("3E-4", 3e-4), ("1.0e-6", 1e-6),
                                         ("2e3", 2000.0), (".5e-3", 5e-4)])
def test_numbers_in_the_forms_people_write_in_files_and_set_alike(tmp_path, text, value):
    f = tmp_path / "c.yaml"
    f.write_text(f"algo:\n  lr: {text}\ntrain:\n  steps: 1_000\n")
    from_file = load_config(str(f))
    from_set = load_config(None, [f"algo.lr={text}", "train.steps=1_000"])
    assert from_file.algo.lr == from_set.algo.lr == pytest.approx(value)
    assert from_file.train.steps == from_set.train.steps == 1000
    assert load_config(None, ["task.options.first_operand=[0, 9]", "model.name=1e5-model"]).model.name == "1e5-model"


def test_an_empty_config_file_is_refused_but_an_explicit_empty_mapping_means_defaults(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("# nothing here yet\n")
    with pytest.raises(ConfigError, match=r"is empty .*all defaults.*write `\{\}`"):
        load_config(str(empty))
    empty.write_text("{}\n")
    assert load_config(str(empty)) == load_config(None)


def test_a_directory_or_a_broken_task_file_is_a_config_error(tmp_path):
    (tmp_path / "quick.yaml").write_text("{}\n")
    with pytest.raises(ConfigError, match=r"is a directory; give the YAML file, e.g. '.*quick.yaml'"):
        load_config(str(tmp_path))
    (tmp_path / "bad_task.py").write_text("def broken(:\n")
    with pytest.raises(ConfigError, match=r"bad_task.py' line 1: .*fix the Python syntax"):
        load_config(None, [f"task.name={tmp_path / 'bad_task.py'}:Task"])
    with pytest.raises(ConfigError, match="does not exist"):
        load_config(None, [f"task.name={tmp_path / 'missing.py'}:Task"])
