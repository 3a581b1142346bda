"""Hand strength, buckets, and the rule-based styles: distinct, deterministic, always legal."""

from __future__ import annotations

import itertools
import random

import pytest
from pokerkit import Card, Deck, StandardHighHand

from echo2_sdk.envs.poker.evaluation import style_stats
from echo2_sdk.envs.poker.hand import TableConfig
from echo2_sdk.envs.poker.play import play_hand
from echo2_sdk.envs.poker.players import make_player
from echo2_sdk.envs.poker.strength import BUCKETS, best_entry, chen_score, hand_bucket, hand_strength


def cards(text: str) -> tuple[Card, ...]:
    return tuple(Card.parse(text))


@pytest.mark.parametrize("hole, score", [("AhAd", 20), ("AsKs", 12), ("7c2d", -1), ("2c2d", 5), ("JsTs", 9),
                                         ("KhQd", 8), ("5h4h", 6)])
def test_chen_scores(hole, score):
    assert chen_score(cards(hole)) == score


@pytest.mark.parametrize("hole, bucket", [("AhAd", "pair-high"), ("9c9d", "pair-low"), ("KsQs", "broadway-suited"),
                                          ("AdTc", "broadway-offsuit"), ("As5s", "ace-suited"),
                                          ("9h7h", "suited-connected"), ("Kh4h", "suited-other"),
                                          ("9d8c", "offsuit-connected"), ("Kd4c", "offsuit-high"),
                                          ("7d2c", "offsuit-low"), ("5d3c", "offsuit-low")])
def test_hand_buckets(hole, bucket):
    assert hand_bucket(cards(hole)) == bucket


def test_every_holding_has_a_bucket():
    seen = {hand_bucket(hole) for hole in itertools.combinations(Deck.STANDARD, 2)}
    assert seen == set(BUCKETS)


def test_best_entry_matches_pokerkit():
    rng = random.Random(0)
    for _ in range(200):
        seven = rng.sample(Deck.STANDARD, 7)
        assert best_entry(seven) == StandardHighHand.from_game(seven[:2], seven[2:]).entry


def test_hand_strength_orders_hands_and_is_seeded():
    board = cards("AsKsQs2d3c")
    nuts = hand_strength(cards("JsTs"), board, random.Random(1))
    air = hand_strength(cards("7h4h"), board, random.Random(1))
    assert nuts == 1.0 and air < 0.3
    assert hand_strength(cards("AhAd"), board[:3], random.Random(5)) == \
        hand_strength(cards("AhAd"), board[:3], random.Random(5))
    assert hand_strength(cards("AhAd"), board[:3], random.Random(5), opponents=3) < \
        hand_strength(cards("AhAd"), board[:3], random.Random(5))


def _session(style: str, opponent: str, hands: int, seed: int = 0):
    table = TableConfig()
    me, other = make_player(style), make_player(opponent)
    records = []
    for hand in range(hands):
        seat = hand % 2
        players = [me, other] if seat == 0 else [other, me]
        for s, player in enumerate(players):
            player.begin(random.Random(f"{seed}:{hand}:{s}").getrandbits(62))
        record = play_hand(table, players, f"{seed}:{hand}", hand % 2)
        assert sum(record.payoffs) == 0 and record.invalid == (0, 0)
        records.append((record, seat))
    return records


def test_styles_differ_measurably():
    stats = {style: style_stats(_session(style, "rule:random", 160)) for style in ("rule:calling", "rule:tag", "rule:lag")}
    calling, tag, lag = stats["rule:calling"], stats["rule:tag"], stats["rule:lag"]
    assert calling["pfr"] == 0 and calling["af"] == calling["afq"] == 0
    assert 0.1 < tag["vpip"] < 0.35 < lag["vpip"] < 0.75 < calling["vpip"]
    assert tag["pfr"] < lag["pfr"]
    assert tag["afq"] > 0.3 and lag["afq"] > 0.3


def test_styles_are_deterministic_under_a_seed():
    first = [r.actions for r, _ in _session("rule:lag", "rule:tag", 30, seed=4)]
    again = [r.actions for r, _ in _session("rule:lag", "rule:tag", 30, seed=4)]
    other = [r.actions for r, _ in _session("rule:lag", "rule:tag", 30, seed=5)]
    assert first == again and first != other


def test_zero_sum_and_termination_over_mixed_tables():
    rng = random.Random(7)
    styles = ["rule:calling", "rule:tag", "rule:lag", "rule:random"]
    for hand in range(150):
        seats = rng.choice([2, 3, 6])
        table = TableConfig(seats=seats, small_blind=rng.choice([1, 5]), big_blind=10,
                            starting_stack=rng.choice([10, 35, 200, 1000]))
        players = [make_player(rng.choice(styles), table=table) for _ in range(seats)]
        for s, player in enumerate(players):
            player.begin(hand * 10 + s)
        record = play_hand(table, players, f"mixed:{hand}", rng.randrange(seats))
        assert sum(record.payoffs) == 0
        assert all(-table.starting_stack <= p <= table.starting_stack * (seats - 1) for p in record.payoffs)


@pytest.mark.slow
def test_three_thousand_rule_based_hands_conserve_chips_and_terminate():
    rng = random.Random(11)
    styles = ["rule:calling", "rule:tag", "rule:lag", "rule:random"]
    for hand in range(3_000):
        seats = rng.choice([2, 2, 3, 6])
        table = TableConfig(seats=seats, starting_stack=rng.choice([40, 1000, 5000]))
        players = [make_player(rng.choice(styles), table=table) for _ in range(seats)]
        for s, player in enumerate(players):
            player.begin(rng.getrandbits(62))
        record = play_hand(table, players, f"slow:{hand}", rng.randrange(seats))  # returns only once over
        assert sum(record.payoffs) == 0, (hand, record.payoffs)
