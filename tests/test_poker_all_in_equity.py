"""All-in equity: a hand all-in before the river is rewarded at its expected chips over the unseen cards.

The checks: the pot-share enumeration against hand-counted boards and a known preflop equity; the
runout's pot arithmetic reproduces pokerkit's payoff when the dealt board is the "expectation" (share 0,
½ or 1), for heads-up and multi-way hands; the env's rewards use it only when asked, deterministically
per deal, while ``info["chips"]`` stays the dealt result.
"""

from __future__ import annotations

import doctest
import random

import pytest
from pokerkit import Card

from echo2_sdk.envs.poker import PokerEnv
from echo2_sdk.envs.poker import equity
from echo2_sdk.envs.poker.equity import pot_share
from echo2_sdk.envs.poker.hand import Hand, TableConfig
from echo2_sdk.envs.poker.play import take_turn
from echo2_sdk.envs.poker.players import make_player
from echo2_sdk.envs.poker.strength import DECK, best_entry


def cards(text: str) -> tuple[Card, ...]:
    return tuple(Card.parse(text))


def test_doctests():
    assert doctest.testmod(equity).failed == 0


def test_pot_share_counts_every_turn_and_river():
    # 7h6h on Ah 8h 2c: 15 outs for the flush or straight draw... counted by hand over all 990 runouts
    # is tedious, so check the exact count two ways: the function against a brute force of the same rule.
    hero, villain, board = cards("7h6h"), cards("AsAd"), cards("Ah8h2c")
    exact = pot_share(hero, villain, board, random.Random(0))
    live = [c for c in DECK if c not in set(hero + villain + board)]
    wins = ties = 0
    for i, turn in enumerate(live):
        for river in live[i + 1:]:
            full = board + (turn, river)
            mine, theirs = best_entry(hero + full), best_entry(villain + full)
            wins += mine > theirs
            ties += mine == theirs
    assert exact == pytest.approx((wins + ties / 2) / 990)
    assert 0.2 < exact < 0.5  # a big draw against a set: neither hopeless nor favoured


def test_pot_share_preflop_samples_near_the_known_equity():
    # AsAh against KsKh all-in preflop: about 82% for the aces (published equity calculators: 81.9%).
    share = pot_share(cards("AsAh"), cards("KsKh"), (), random.Random(1), samples=4000)
    assert share == pytest.approx(0.819, abs=0.02)
    assert pot_share(cards("AsAh"), cards("KsKh"), (), random.Random(1), samples=50) == \
        pot_share(cards("AsAh"), cards("KsKh"), (), random.Random(1), samples=50)


def test_pot_share_refuses_bad_holdings():
    with pytest.raises(ValueError, match="two holdings of two cards"):
        pot_share(cards("AsAhKd"), cards("KsKh"), (), random.Random(0))


@pytest.mark.parametrize("seats, styles", [(2, ("rule:random", "rule:calling")), (2, ("rule:random", "rule:lag")),
                                           (3, ("rule:random", "rule:calling", "rule:random"))])
def test_the_runout_pot_reproduces_pokerkits_payoff_on_the_dealt_board(seats, styles):
    table = TableConfig(seats=seats)
    players = [make_player(s, table=table) for s in styles]
    for p, player in enumerate(players):
        player.begin(p)
    runouts = 0
    for deal in range(300):
        hand = Hand(table, f"deal:{deal}", deal % seats)
        while (seat := hand.actor_seat) is not None:
            take_turn(hand, players[seat], 0)
        if hand.runout is None:
            continue
        runouts += 1
        assert len(hand.runout.board) < 5 and len(hand.board) == 5
        for player in hand.runout.players:
            other = next(p for p in hand.runout.players if p != player)
            dealt = pot_share(hand.holes[player], hand.holes[other], hand.board, random.Random(0))
            value = hand.runout.value(player, dealt)
            if value is not None:
                odd_chip = 1 if dealt == 0.5 else 0  # pokerkit gives a split pot's odd chip to one player
                assert value == pytest.approx(hand.state.payoffs[player], abs=odd_chip), deal
    assert runouts >= 10  # the random player shoves often enough that this checks something


def test_env_rewards_all_in_hands_at_their_equity_only_when_asked():
    plain = PokerEnv(opponents=("rule:lag",))
    equity = PokerEnv(opponents=("rule:lag",), all_in_equity=True)
    adjusted = 0
    for seed in range(60):
        episodes = []
        for env in (plain, equity):
            env.reset(seed=seed)
            total, done = 0.0, False
            while not done:
                _, reward, terminated, truncated, info = env.step("all-in")
                total, done = total + reward, terminated or truncated
            episodes.append((total, info))
        (plain_total, plain_info), (equity_total, equity_info) = episodes
        assert plain_info["chips"] == equity_info["chips"] == plain_total  # the dealt result is kept
        assert plain_info["all_in_hands"] == equity_info["all_in_hands"]
        # off, the all-in hands' value is what they dealt (here the episode's one hand, or nothing)
        assert plain_info["all_in_value"] == (sum(plain_info["hand_results"]) if plain_info["all_in_hands"] else 0)
        if equity_info["all_in_hands"]:
            adjusted += 1
            walks = equity_info["chips"] - sum(equity_info["hand_results"])  # chips of hands the agent never acted in
            assert equity_total == pytest.approx(equity_info["all_in_value"] + walks)
            assert -1000 <= equity_total <= 1000
        else:
            assert equity_total == plain_total
    assert adjusted >= 5 and plain.config.all_in_equity is False


def test_equity_rewards_are_the_same_for_every_episode_of_a_deal():
    values = set()
    for _ in range(3):
        env = PokerEnv(opponents=("rule:calling",), all_in_equity=True)
        env.reset(seed=7)
        _, reward, terminated, *_ = env.step("all-in")
        assert terminated
        values.add(reward)
    assert len(values) == 1 and values.pop() not in (-1000.0, 0.0, 1000.0)


def test_eval_reports_an_all_in_adjusted_column_on_request():
    from echo2_sdk.envs.poker.evaluation import render_table, run_eval

    table = run_eval(["rule:random"], ["rule:calling", "rule:random"], hands=300, seed=2, all_in_adjusted=True)
    shover = table["cells"]["rule:random"]["rule:calling"]  # the random player shoves; the station calls it
    assert shover["all_in_hands"] >= 20
    low, high = shover["bb_per_100_ci95"]
    assert low < shover["all_in_adjusted_bb_per_100"] < high  # the same expectation
    assert shover["all_in_adjusted_bb_per_100"] != shover["bb_per_100"]
    # duplicate deals stay antisymmetric in the adjusted column: a mirror match is exactly zero
    assert table["cells"]["rule:random"]["rule:random"]["all_in_adjusted_bb_per_100"] == pytest.approx(0.0, abs=1e-9)
    assert "all_in_adjusted_bb_per_100" in render_table(table, "all_in_adjusted_bb_per_100")
    plain = run_eval(["rule:random"], ["rule:calling"], hands=300, seed=2)["cells"]["rule:random"]["rule:calling"]
    assert "all_in_hands" not in plain and plain["bb_per_100"] == shover["bb_per_100"]


def test_the_cli_prints_the_adjusted_table_after_the_plain_one(capsys):
    from echo2_sdk.envs.poker.evaluation import main

    main(["--agents", "rule:random", "--opponents", "rule:calling", "--hands", "40", "--all-in-adjusted"])
    out = capsys.readouterr().out
    plain, _, adjusted = out.partition("All-in adjusted")
    assert "(bb_per_100)" in plain and "(all_in_adjusted_bb_per_100)" in adjusted
    assert "all-in hands per agent: rule:random " in adjusted
    main(["--agents", "rule:random", "--opponents", "rule:calling", "--hands", "40"])
    assert "All-in adjusted" not in capsys.readouterr().out
