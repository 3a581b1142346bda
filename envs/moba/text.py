"""MOBA text: observations, the system prompt, action texts and parsing (see :mod:`echo2_sdk.envs.moba.env`).

Observations are terse on purpose (a char-level tokenizer pays one token per character); every
hero sees the lane from its own side (its base at cell 0). Action texts are at most 11 characters
(``cast 1 hero``), so a reply fits the CPU demo's 12 new tokens with the end-of-turn token.
"""

from __future__ import annotations

import difflib
import re

from echo2_sdk.envs.moba.game import (BLADE_COST, BLADE_DMG, CREEP_GOLD, HERO_GOLD, HEAL_HP, SIGHT,
                                      STRIKE_DMG, TOWER_DMG, TOWER_RANGE, Action, Game, Hero, Rules,
                                      Unit)


def action_text(game: Game, hero: Hero, action: Action) -> str:
    kind = action[0]
    if kind == "hit":
        return f"hit {game.label(hero, action[1])}"
    if kind == "cast":
        return f"cast {action[1]}" + (f" {game.label(hero, action[2])}" if action[2] is not None else "")
    if kind == "move":
        return "advance" if action[1] > 0 else "retreat"
    return kind  # buy, hold


def legal_texts(game: Game, hero: Hero) -> list[str]:
    return [action_text(game, hero, a) for a in game.legal(hero)]


def compact_legal(texts: list[str]) -> str:
    """``hit c7, hit hero, cast 2`` → ``hit c7|hero; cast 2`` (same verb merged, order kept)."""
    groups: dict[str, list[str]] = {}
    for text in texts:
        verb, _, target = text.rpartition(" ") if text.startswith(("hit ", "cast 1 ")) else (text, "", "")
        groups.setdefault(verb, []).append(target)
    return "; ".join(verb + (" " + "|".join(t) if t[0] else "") for verb, t in groups.items())


_WORDS = {"advance": ("move", 1), "forward": ("move", 1), "move forward": ("move", 1), "push": ("move", 1),
          "retreat": ("move", -1), "back": ("move", -1), "move back": ("move", -1),
          "hold": ("hold",), "wait": ("hold",), "stay": ("hold",), "buy": ("buy",), "buy blade": ("buy",)}
_VERBS = ["hit", "attack", "cast", *_WORDS]


def normalize(text: str) -> str:
    t = " ".join(text.lower().replace(",", " ").split())
    t = re.sub(r"^(action|answer)\s*:\s*", "", t).rstrip(".!")
    t = re.sub(r"^attack\b", "hit", t)
    t = re.sub(r"\bcreep\s*#?\s*(\d+)", r"c\1", t)
    return re.sub(r"\s+on\s+", " ", t)


def parse(game: Game, hero: Hero, text: str) -> tuple[Action | None, str | None, str | None]:
    """(action, None, None) when ``text`` names a legal action, else (None, reason, kind).

    ``kind``: ``unparsable`` (not an action at all) or ``illegal`` (an action, not allowed now).
    """
    t = normalize(text)
    if t in _WORDS:
        action: Action | None = _WORDS[t]
    elif m := re.fullmatch(r"hit (\S+)", t):
        target = resolve_target(game, hero, m.group(1))
        if isinstance(target, str):
            return None, target, "illegal"
        action = ("hit", target)
    elif m := re.fullmatch(r"cast ?([12])(?: (\S+))?", t):
        ability = int(m.group(1))
        if ability == 2:
            action = ("cast", 2, None)
        elif m.group(2) is None:
            return None, "cast 1 needs a target, e.g. 'cast 1 hero'", "illegal"
        else:
            target = resolve_target(game, hero, m.group(2))
            if isinstance(target, str):
                return None, target, "illegal"
            action = ("cast", 1, target)
    else:
        legal = legal_texts(game, hero)
        close = difflib.get_close_matches(t, legal, n=1, cutoff=0.6)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        return None, f"not an action; reply with one action from the Legal line.{hint}", "unparsable"
    problem = game.why_illegal(hero, action)
    return (None, problem, "illegal") if problem else (action, None, None)


def resolve_target(game: Game, hero: Hero, name: str) -> Unit | str:
    """The unit ``hero`` calls ``name`` (``c7``, ``hero``, ``h2``, ``tower``, ``base``), or a reason."""
    enemy = 1 - hero.side
    if name in ("tower", "base"):
        return game.towers[enemy] if name == "tower" else game.bases[enemy]
    if m := re.fullmatch(r"c(\d+)", name):
        uid = int(m.group(1))
        for creep in game.creeps:
            if creep.uid == uid:
                return creep if creep.side == enemy else f"c{uid} is your own creep"
        return f"there is no creep c{uid} (dead or never spawned)"
    foes = game.team(enemy)
    if name in ("hero", "foe", "enemy"):
        alive = [h for h in foes if h.alive]
        if not alive:
            return "the enemy hero is dead" if len(foes) == 1 else "the enemy heroes are dead"
        return min(alive, key=lambda h: (abs(h.pos - hero.pos), h.hp, h.index))
    if m := re.fullmatch(r"h([12])", name):
        if int(m.group(1)) <= len(foes):
            return foes[int(m.group(1)) - 1]
    return f"unknown target '{name[:12]}'; targets are creeps (c7), hero, tower and base"


def _hero_line(game: Game, viewer: Hero, hero: Hero) -> str:
    name = "you" if hero is viewer else game.hero_label(viewer, hero)
    if not hero.alive:
        return f"{name} dead({hero.respawn})"
    if hero.side != viewer.side and abs(hero.pos - viewer.pos) > SIGHT:
        return f"{name} unseen"
    line = f"{name}@{game.rel(viewer.side, hero.pos)} hp{max(hero.hp, 0)}/{hero.max_hp} L{hero.level}"
    if hero is viewer:
        line += f" mp{hero.mana} g{hero.gold} cd{hero.cooldowns[1]}/{hero.cooldowns[2]}"
    return line


def render(game: Game, viewer: Hero, max_ticks: int, notes: str = "") -> str:
    """The observation of ``viewer`` (see the env's docstring for the format)."""
    side = viewer.side
    heroes = [viewer] + [h for h in game.heroes if h is not viewer and h.side == side] + game.team(1 - side)
    lines = [notes] if notes else []
    lines.append(f"T{game.tick}/{max_ticks} " + ", ".join(_hero_line(game, viewer, h) for h in heroes))
    mine: dict[int, int] = {}
    for creep in game.creeps:
        if creep.side == side:
            cell = game.rel(side, creep.pos)
            mine[cell] = mine.get(cell, 0) + 1
    foes: dict[int, list[str]] = {}
    for creep in sorted(game.creeps, key=lambda c: c.uid):
        if creep.side != side and abs(creep.pos - viewer.pos) <= SIGHT:
            foes.setdefault(game.rel(side, creep.pos), []).append(f"c{creep.uid}:{creep.hp}")
    own = " ".join(f"@{cell}:{count}" for cell, count in sorted(mine.items())) or "none"
    seen = " ".join(f"@{cell} " + " ".join(units) for cell, units in sorted(foes.items())) or "none seen"
    lines.append(f"creeps: yours {own}; foe {seen}")
    towers, bases = game.towers, game.bases
    lines.append(f"towers {towers[side].hp}/{towers[1 - side].hp} bases {bases[side].hp}/{bases[1 - side].hp}")
    lines.append("Legal: " + compact_legal(legal_texts(game, viewer)))
    return "\n".join(lines)


def system_prompt(r: Rules, max_ticks: int) -> str:
    size = f"{r.team_size}v{r.team_size}"
    return (f"{size} one-lane MOBA. Cells 0..{r.lane_length}: your base 0, tower {r.tower_offset}; foe tower "
            f"{r.lane_length - r.tower_offset}, base {r.lane_length}. Towers hit {TOWER_DMG} within {TOWER_RANGE}; "
            f"a base is safe while its tower stands. Kill the foe base to win. Killing blow on a creep: "
            f"{CREEP_GOLD}g, on the hero: {HERO_GOLD}g. Reply with one Legal action: hit X, cast 1 hero "
            f"(strike {STRIKE_DMG}), cast 2 (heal {HEAL_HP}), advance, retreat, buy (+{BLADE_DMG} dmg, "
            f"{BLADE_COST}g, at base), hold.")
