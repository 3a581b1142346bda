"""MOBA env: gymnasium + echo2 contract, seeding, actions, bots, adapter, eval CLI, the one-line config swap."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from echo2_sdk.runtime.cli import main as cli_main
from echo2_sdk.env import check_env
from echo2_sdk.envs.moba import MobaConfig, MobaEnv
from echo2_sdk.envs.moba.game import Hero
from echo2_sdk.envs.moba.evaluation import play_game
from echo2_sdk.envs.moba.players import make_player
from echo2_sdk.registry import make_task

ROOT = Path(__file__).resolve().parent.parent


def _play(env: MobaEnv, seed: int, bot: str = "rule:farmer"):
    player = make_player(bot)
    obs, info = env.reset(seed=seed)
    player.begin(seed)
    trail, done = [obs], False
    while not done:
        obs, reward, terminated, truncated, info = env.step(player.act(env.game, env.game.heroes[0],
                                                                       info["invalid_reason"]))
        trail.append((obs, reward, terminated, truncated))
        done = terminated or truncated
    return trail, info


def test_both_check_envs_pass_1v1_and_2v2():
    assert check_env(MobaEnv(max_ticks=60))["steps"] > 100
    report = check_env(MobaEnv(team_size=2, max_ticks=40, opponents=("rule:random",)), seeds=(3,))
    assert report["episodes"] == 2


def test_same_seed_same_game_other_seed_other_game():
    first, info = _play(MobaEnv(), 7)
    again, _ = _play(MobaEnv(), 7)
    other, _ = _play(MobaEnv(), 8)
    assert first == again and first != other
    assert info["outcome"] in ("win", "loss") and first[-1][2] is True  # a base fell: terminated
    assert abs(first[-1][1]) >= 10 - 3  # the terminal ±win_reward dominates the last step


def test_truncation_at_the_tick_limit_is_not_termination():
    env = MobaEnv(max_ticks=12)
    env.reset(seed=0)
    done, steps = False, 0
    while not done:
        _, _, terminated, truncated, info = env.step("hold")
        done, steps = terminated or truncated, steps + 1
    assert truncated and not terminated and info["outcome"] == "timeout" and info["tick"] == 12


def test_observation_lists_legal_actions_and_stays_short():
    env = MobaEnv(warmup_ticks=24)
    obs, info = env.reset(seed=1)
    legal = info["legal_actions"]
    assert "hold" in legal and all(len(a) <= 11 for a in legal)
    assert obs.splitlines()[-1].startswith("Legal: ") and len(obs) < 400
    for action in legal:  # every listed action is accepted
        env.reset(seed=1)
        assert env.step(action)[4]["invalid_reason"] is None
    assert obs.splitlines()[0].startswith("T24/300 you@")


def test_illegal_and_unparsable_actions_get_reasons_then_a_forced_hold():
    env = MobaEnv(max_invalid_actions=2)
    obs, info = env.reset(seed=0)
    assert info["legal_actions"] == ["advance", "hold"]  # at the base, nothing in range
    obs, reward, *_ , info = env.step("hit tower")
    assert "out of range" in info["invalid_reason"] and "Invalid action 'hit tower'" in obs and reward == 0.0
    obs, _, _, _, info = env.step("advnce")
    assert "Did you mean 'advance'" in info["invalid_reason"] and info["invalid_by_kind"] == {"unparsable": 1, "illegal": 1}
    assert info["tick"] == 0
    obs, _, _, _, info = env.step("\x00garbage")
    assert info["forced_actions"] == 1 and info["tick"] == 1 and "Out of attempts: you hold" in obs
    _, _, _, _, info = env.step("attack creep 999")
    assert "no creep c999" in info["invalid_reason"]
    _, _, _, _, info = env.step("move forward")
    assert info["invalid_reason"] is None and info["applied_action"] == "advance"


def test_unknown_options_and_players_fail_with_did_you_mean():
    with pytest.raises(TypeError, match="Did you mean 'max_ticks'"):
        MobaConfig.build(max_tick=10)
    with pytest.raises(ValueError, match="Did you mean 'rule:farmer'"):
        make_player("rule:famer")
    with pytest.raises(ValueError, match="needs a policy"):
        MobaEnv(opponents=("llm:some/model",))


def test_llm_opponent_seat_sees_text_and_its_refusals_are_counted():
    seen = []

    def policy(messages):
        seen.append(messages[-1]["content"])
        return "nonsense" if len(seen) % 2 else "advance"

    env = MobaEnv(opponents=("llm:bob",), llm_policies={"bob": policy}, max_ticks=5)
    env.reset(seed=0)
    for _ in range(3):
        _, _, _, _, info = env.step("hold")
    assert seen and seen[0].startswith("T0/5 you@0") and "Legal:" in seen[0]
    assert any("Invalid action" in s for s in seen) and info["opponent_invalid_actions"] >= 1


def test_a_model_seat_is_autopiloted_through_the_warm_up_like_the_agent():
    seen = []

    def policy(messages):
        seen.append(messages[-1]["content"])
        return "hold"

    env = MobaEnv(opponents=("llm:bob",), llm_policies={"bob": policy}, max_ticks=8, warmup_ticks=5)
    env.reset(seed=0)
    assert seen == []  # the warm-up asked its own pilot, not the model
    env.step("hold")
    assert len(seen) == 1 and seen[0].startswith("T5/8")  # it takes over when the agent does
    rules_only = MobaEnv(opponents=("rule:pusher",), max_ticks=8, warmup_ticks=5)
    assert rules_only.warmup_pilots == {}  # rule seats play their own style all game


def test_bots_have_distinct_results_and_games_end():
    config = MobaConfig()
    results = [play_game(config, [make_player("rule:pusher"), make_player("rule:farmer")], f"t:{k}") for k in range(20)]
    assert all(r["winner"] is not None or r["ticks"] == 300 for r in results)
    pusher_wins = sum(r["winner"] == 0 for r in results)
    assert pusher_wins >= 14  # the pusher beats the farmer (~92 % over 1,000 games)
    farmer_vs_random = [play_game(config, [make_player("rule:farmer"), make_player("rule:random")], f"t:{k}")
                        for k in range(10)]
    assert sum(r["winner"] == 0 for r in farmer_vs_random) >= 6


def _drive_against_a_farmer(style: str, seed: int, check) -> tuple[Hero, int]:
    """Play ``style`` as hero 0 for up to 60 ticks against a farmer; ``check(game, hero, action)`` before each
    step says whether the decision counted. Returns the hero and how many decisions counted."""
    env = MobaEnv(opponents=("rule:farmer",), max_ticks=60)
    env.reset(seed=seed)
    player, counted = make_player(style), 0
    player.begin(seed)
    while env.game.winner is None and env.game.tick < 60:
        game, hero = env.game, env.game.heroes[0]
        action = player.act(game, hero, None)
        counted += bool(check(game, hero, action))
        _, _, terminated, truncated, _ = env.step(action)
        if terminated or truncated:
            break
    return env.game.heroes[0], counted


def _foe_creeps_in_reach(game, hero) -> list:
    return sorted((c for c in game.creeps if c.side != hero.side and abs(c.pos - hero.pos) <= hero.reach),
                  key=lambda c: (c.hp, c.uid))


def _expects_hit(choose, min_in_reach: int = 1):
    """A check for ``_drive_against_a_farmer``: healthy, off its base and with ``min_in_reach`` foe creeps in reach
    (weakest first), the style must hit ``choose(reach, hero)``."""

    def check(game, hero, action) -> bool:
        reach = _foe_creeps_in_reach(game, hero)
        if len(reach) >= min_in_reach and hero.hp >= 0.5 * hero.max_hp and game.rel(hero.side, hero.pos) != 0:
            assert action == f"hit c{choose(reach, hero).uid}", action
            return True
        return False

    return check


def _window_returns_against_a_farmer(*styles: str) -> list[list[float]]:
    """Each style's returns as the agent in the default training window, on 8 held-out episodes against a farmer."""
    import dataclasses

    adapter = make_task("moba", {"num_eval": 8})
    episodes = [dataclasses.replace(e, meta={**e.meta, "opponent": "rule:farmer"}) for e in adapter.examples("eval")]
    return [[adapter.play_episode(e, style).reward for e in episodes] for style in styles]


def test_the_farmer_takes_every_sure_last_hit_and_earns_gold_against_a_farmer():
    def sure_hit_taken(game, hero, action) -> bool:
        sure = [c for c in _foe_creeps_in_reach(game, hero) if c.hp <= hero.dmg - 2]
        if sure and hero.hp >= 0.5 * hero.max_hp:  # healthy, with a creep the lowest roll kills in reach
            assert action.startswith("hit c") and int(action[5:]) in {c.uid for c in sure}, action
            return True
        return False

    hero, taken = _drive_against_a_farmer("rule:farmer", 3, sure_hit_taken)
    assert taken >= 1 and hero.stats["last_hits"] >= taken  # heroes act before creeps: each lands
    assert hero.stats["gold_earned"] >= 20 * taken


def test_the_grinder_hits_the_weakest_creep_in_reach_and_earns_where_the_farmer_waits():
    """The default demonstrator's third style: it wounds creeps for its own next hit. In the default training
    window against a farmer the farmer earns nothing (it waits for sure kills), the grinder does."""

    _, hits = _drive_against_a_farmer("rule:grinder", 5, _expects_hit(lambda reach, hero: reach[0]))
    assert hits >= 3
    farmer, grinder_returns = _window_returns_against_a_farmer("rule:farmer", "rule:grinder")
    assert max(farmer) == 0.0 and sum(grinder_returns) > 0.0, (farmer, grinder_returns)
    assert "rule:grinder" in make_task("moba", {}).options.demonstrator


def test_the_setter_spreads_its_hits_and_sets_up_more_kills_than_the_grinder_against_a_farmer():
    """Without a sure kill in reach the setter hits the second-weakest foe creep (the grinder the weakest), so two
    creeps come into kill range together: in the default training window against a farmer it out-earns the grinder."""

    def spread(reach, hero):
        return reach[0] if reach[0].hp <= hero.dmg - 2 else reach[1]

    _, hits = _drive_against_a_farmer("rule:setter", 5, _expects_hit(spread, min_in_reach=2))
    assert hits >= 3
    grinder, setter = _window_returns_against_a_farmer("rule:grinder", "rule:setter")
    assert sum(setter) > sum(grinder), (setter, grinder)


def test_adapter_examples_sft_and_text_episodes(tiny_tokenizer):
    adapter = make_task("moba", {"num_train": 3, "num_eval": 2, "num_sft": 3})
    train = adapter.examples("train")
    assert len(train) == 3 and adapter.examples("train") == train
    assert make_task("moba", {"num_train": 3}).examples("train") == train  # seeded
    messages = adapter.build_messages(train[0])
    assert messages[0]["role"] == "system" and messages[1]["content"].startswith("T24/28 ")
    for demo in adapter.examples("sft"):
        assert demo.answer and demo.meta["messages"][-1]["role"] == "user"
    episode = adapter.play_episode(train[0], "rule:farmer")
    replies = [m for m in episode.messages if m["role"] == "assistant"]
    assert len(replies) == 4 and episode.info["outcome"] == "timeout"  # ticks 24..27
    assert episode.reward == pytest.approx(sum(episode.rewards)) and episode.group in (
        f"{lane}|vs {train[0].meta['opponent']}" for lane in ("ahead", "even", "behind"))  # the default pools two foes
    tokens = adapter.episode_to_tokens(episode, tiny_tokenizer)
    assert len(tokens.loss_mask) == len(tokens.completion_ids) and 0 < sum(tokens.loss_mask) < len(tokens.loss_mask)


def test_echo2_eval_moba_with_bots(capsys):
    assert cli_main(["eval", "--task", "moba", "--agent", "rule:pusher", "--opponents", "rule:farmer,rule:random",
                     "--episodes", "6", "--json"]) == 0
    table = json.loads(capsys.readouterr().out)
    cell = table["cells"]["rule:pusher"]["rule:farmer"]
    assert cell["games"] == 6 and 0 <= cell["win_rate"] <= 1 and len(cell["reward_ci95"]) == 2
    assert set(table["opponents"]) == {"rule:farmer", "rule:random"}
    assert cli_main(["eval", "--task", "moba", "--episodes", "2"]) == 0
    assert "| rule:farmer |" in capsys.readouterr().out
    assert cli_main(["eval", "--task", "moba", "--agent", "rule:pushr", "--episodes", "2"]) == 2
    assert "Did you mean 'rule:pusher'" in capsys.readouterr().err


def test_moba_and_poker_configs_differ_in_exactly_the_task_name():
    poker = (ROOT / "examples" / "poker.yaml").read_text().splitlines()
    moba = (ROOT / "examples" / "moba.yaml").read_text().splitlines()
    assert len(poker) == len(moba)
    diff = [(a, b) for a, b in zip(poker, moba) if a != b]
    assert diff == [("  name: poker", "  name: moba")]


@pytest.mark.slow
def test_two_trainer_steps_on_the_moba_example_config(tmp_path, ray_cluster):
    """examples/moba.yaml, two steps (poker's example: test_poker_train.py, which checks the same and more)."""
    from echo2_sdk.config import load_config
    from echo2_sdk.runtime.driver.trainer import Trainer

    task = "moba"
    cfg = load_config(f"examples/{task}.yaml", [
        "model.warm_start.enabled=false", "train.steps=2", "train.prompts_per_step=2", "rollout.samples_per_prompt=2",
        "rollout.num_workers=1", "train.eval_max_examples=2", "train.plots=false", "rollout.max_new_tokens=6",
        "train.checkpoint_every=0",
        # two decisions per MOBA episode keep the char-level contexts (and the CPU learner) short
        "task.options={num_train: 8, num_eval: 2, max_ticks: 26}",
    ])
    assert cfg.task.name == task
    summary = Trainer(cfg, str(tmp_path / task), log=lambda m: None).fit()
    assert summary["steps"] == 2 and summary["samples_accepted"] >= 8 and summary["samples_rejected"] == 0
    assert summary["eval"]["after"]["episodes"] == 2
