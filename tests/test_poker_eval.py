"""Duplicate-deal evaluation tables: seeded, antisymmetric heads-up, CIs, policies, CLI."""

from __future__ import annotations

import json

import pytest

from echo2_sdk.envs.poker.evaluation import main, parse_player_list, render_table, run_eval
from echo2_sdk.envs.poker.hand import TableConfig

STYLES = ["rule:calling", "rule:tag", "rule:lag"]


def test_table_is_seeded_duplicate_and_antisymmetric():
    table = run_eval(STYLES, STYLES, hands=60, seed=3)
    again = run_eval(STYLES, STYLES, hands=60, seed=3)
    cells = table["cells"]
    assert json.dumps(cells, sort_keys=True) == json.dumps(again["cells"], sort_keys=True)
    for a in STYLES:
        # A mirror match replays each deal identically from both seats: exactly zero.
        assert cells[a][a]["chips_per_hand"] == 0 and cells[a][a]["ci95"] == [0, 0]
        for b in STYLES:
            assert cells[a][b]["chips_per_hand"] == pytest.approx(-cells[b][a]["chips_per_hand"])
            low, high = cells[a][b]["ci95"]
            assert low <= cells[a][b]["chips_per_hand"] <= high
            assert cells[a][b]["bb_per_100"] == pytest.approx(cells[a][b]["chips_per_hand"] * 10)
            assert cells[a][b]["hands"] == 60
    assert table["hands_per_cell"] == 60 and table["deals"] == 30
    json.dumps(table)  # JSON-ready
    text = render_table(table)
    assert all(s in text for s in STYLES) and "VPIP" in text and "±" in text


def test_tag_beats_the_calling_station_significantly():
    cell = run_eval(["rule:tag"], ["rule:calling"], hands=300, seed=0)["cells"]["rule:tag"]["rule:calling"]
    assert cell["ci95"][0] > 0
    assert 0.1 < cell["agent_style"]["vpip"] < 0.35


def test_policy_agents_and_six_max():
    calls = []

    def always_call(messages):
        calls.append(messages)
        return "Action: call" if len(calls) % 7 else "what?"

    table = run_eval({"caller-llm": always_call}, {"tag": "rule:tag"}, hands=12, seed=1,
                     table=TableConfig(seats=6))
    cell = table["cells"]["caller-llm"]["tag"]
    assert cell["hands"] == 12 and cell["deals"] == 2 and cell["invalid_actions"] >= 1
    assert calls and calls[0][0]["role"] == "system" and "6-handed" in calls[0][0]["content"]


def test_player_lists_and_cli(capsys):
    assert parse_player_list(" rule:tag, rule:lag ,") == ["rule:tag", "rule:lag"]
    with pytest.raises(ValueError, match="no player specs"):
        parse_player_list(" , ")
    main(["--agents", "rule:lag", "--opponents", "rule:tag", "--hands", "10", "--json"])
    out = json.loads(capsys.readouterr().out)
    assert out["cells"]["rule:lag"]["rule:tag"]["hands"] == 10
    with pytest.raises(ValueError, match="Did you mean 'rule:lag'"):
        run_eval(["rule:lga"], ["rule:tag"], hands=2)
