"""Who plays the other heroes: rule-based styles, a random player, and an LLM seat.

Every player has ``begin(seed)`` and ``act(game, hero, feedback) -> str`` (action text, parsed like
the agent's; ``feedback`` is the reason the previous reply was refused). Rule-based styles
(``rule:NAME``), deterministic given the seed passed to ``begin``:

``rule:farmer`` — **defensive last-hitter**: stands with its front creep (at its own
    tower when it has none), attacks a foe creep only when the hit kills it, strikes the foe hero
    only when that kills it (keeping mana for a heal), clears the wave when its creeps are outnumbered or the foe hero is out of sight (4 cells),
    harasses the foe hero only below 30 % HP, hits the tower only while its creeps tank it, heals below 50 % HP and walks home below 35 %, buys a blade whenever it is at base
    with the gold. Farms gold and levels; pushes slowly.
``rule:pusher`` — **aggressive pusher**: walks forward, strikes the foe hero whenever it can,
    then hits the foe hero, the tower/base, or the weakest creep in reach, in that order; heals
    below 40 % HP, retreats only below 20 %; buys when home. Trades HP for pressure and ignores
    last-hitting and tower aggro.
``rule:grinder`` — **creep grinder**: the farmer, but it hits the weakest foe creep in reach whenever
    it has one and is healthy (above 50 % HP, off its base), wounding creeps for its own next hit instead
    of waiting for a sure kill. Earns gold where a farmer waits; a demonstrator of creep play.
``rule:setter`` — **kill setter**: the grinder, but it spreads its hits: without a creep its lowest roll
    kills in reach it hits the *second*-weakest foe creep, so that two creeps come into kill range together
    (the grinder's focus on the weakest yields one kill where two were in reach).
``rule:random`` — uniform over the legal actions (a fuzzer, not a style).

``llm:NAME`` seats an :class:`echo2_sdk.envs.seats.ChatSeat` that sees the same observations
as the agent (rendered for its own hero) and answers with ``policy(messages) -> str``.
"""

from __future__ import annotations

import difflib
import random
from typing import Any, Callable, Mapping

from echo2_sdk.env import Policy
from echo2_sdk.envs.moba.game import ABILITIES, BLADE_COST, SIGHT, STRIKE_DMG, STRIKE_LEVEL_DMG, TOWER_RANGE, Game, Hero
from echo2_sdk.envs.moba.text import action_text, render
from echo2_sdk.envs.seats import ChatSeat, llm_policy, rule_style


class RuleBot:
    name = "rule"

    def __init__(self) -> None:
        self.rng = random.Random(0)

    def begin(self, seed: int) -> None:
        self.rng = random.Random(seed)

    def act(self, game: Game, hero: Hero, feedback: str | None) -> str:
        raise NotImplementedError

    # ----- helpers ----------------------------------------------------------------------------
    @staticmethod
    def can_cast(hero: Hero, ability: int) -> bool:
        return hero.cooldowns[ability] == 0 and hero.mana >= ABILITIES[ability][1]

    @staticmethod
    def foe_heroes(game: Game, hero: Hero, reach: int) -> list[Hero]:
        return [h for h in game.team(1 - hero.side) if h.alive and abs(h.pos - hero.pos) <= reach]

    @staticmethod
    def sure_kill(creep, hero: Hero) -> bool:
        """The hero's lowest damage roll kills the creep (heroes act before creeps within a tick)."""
        return creep.hp <= hero.dmg - 2

    @staticmethod
    def foe_creeps(game: Game, hero: Hero, reach: int):
        return sorted((c for c in game.creeps if c.side != hero.side and abs(c.pos - hero.pos) <= reach),
                      key=lambda c: (c.hp, c.uid))

    @staticmethod
    def front_creep(game: Game, hero: Hero) -> int | None:
        cells = [game.rel(hero.side, c.pos) for c in game.creeps if c.side == hero.side]
        return max(cells) if cells else None

    def at_base_routine(self, game: Game, hero: Hero, stay_below: float) -> str | None:
        if game.rel(hero.side, hero.pos) != 0:
            return None
        if ("buy",) in game.legal(hero):
            return "buy"
        return "hold" if hero.hp < stay_below * hero.max_hp else None

    def structure_in_reach(self, game: Game, hero: Hero) -> str | None:
        tower, base = game.towers[1 - hero.side], game.bases[1 - hero.side]
        if tower.alive and abs(tower.pos - hero.pos) <= hero.reach:
            return "hit tower"
        if not tower.alive and base.alive and abs(base.pos - hero.pos) <= hero.reach:
            return "hit base"
        return None


class Farmer(RuleBot):
    name = "rule:farmer"

    def act(self, game: Game, hero: Hero, feedback: str | None) -> str:
        home = self.at_base_routine(game, hero, stay_below=0.9)
        if home:
            return home
        if hero.gold >= 2 * BLADE_COST and not self.foe_creeps(game, hero, SIGHT):
            return "retreat"  # a quiet lane: walk home to shop
        if hero.hp < 0.5 * hero.max_hp and self.can_cast(hero, 2):
            return "cast 2"
        if hero.hp < 0.35 * hero.max_hp:
            return "retreat"
        if self.can_cast(hero, 1) and hero.mana >= ABILITIES[1][1] + ABILITIES[2][1]:
            for foe in self.foe_heroes(game, hero, ABILITIES[1][3]):
                if foe.hp <= STRIKE_DMG + STRIKE_LEVEL_DMG * (hero.level - 1):
                    return f"cast 1 {game.hero_label(hero, foe)}"  # a kill
        for foe in self.foe_heroes(game, hero, hero.reach):
            if foe.hp < 0.3 * foe.max_hp:
                return f"hit {game.hero_label(hero, foe)}"
        in_reach = self.foe_creeps(game, hero, hero.reach)  # weakest first
        if in_reach and self.sure_kill(in_reach[0], hero):
            return f"hit c{in_reach[0].uid}"
        mine = sum(1 for c in game.creeps if c.side == hero.side and abs(c.pos - hero.pos) <= SIGHT)
        theirs = len(self.foe_creeps(game, hero, SIGHT))
        if theirs > mine or not self.foe_heroes(game, hero, SIGHT):  # outnumbered, or the foe is away: clear
            if in_reach:
                return f"hit c{in_reach[0].uid}"
        tower = game.towers[1 - hero.side]
        tanked = any(c.side == hero.side and abs(c.pos - tower.pos) <= TOWER_RANGE for c in game.creeps)
        if tanked or not tower.alive:
            target = self.structure_in_reach(game, hero)
            if target:
                return target
        here = game.rel(hero.side, hero.pos)
        front = self.front_creep(game, hero)
        spot = game.rules.tower_offset if front is None else front
        if not tanked and tower.alive:  # never walk into the foe tower's range alone
            spot = min(spot, game.rel(hero.side, tower.pos) - TOWER_RANGE - 1)
        if here < spot:
            return "advance"
        if here > spot:
            return "retreat"
        return "hold"


class Pusher(RuleBot):
    name = "rule:pusher"

    def act(self, game: Game, hero: Hero, feedback: str | None) -> str:
        home = self.at_base_routine(game, hero, stay_below=0.6)
        if home:
            return home
        if hero.hp < 0.4 * hero.max_hp and self.can_cast(hero, 2):
            return "cast 2"
        if hero.hp < 0.2 * hero.max_hp:
            return "retreat"
        if self.can_cast(hero, 1):
            for foe in self.foe_heroes(game, hero, ABILITIES[1][3]):
                return f"cast 1 {game.hero_label(hero, foe)}"
        for foe in self.foe_heroes(game, hero, hero.reach):
            return f"hit {game.hero_label(hero, foe)}"
        target = self.structure_in_reach(game, hero)
        if target:
            return target
        creeps = self.foe_creeps(game, hero, hero.reach)
        if creeps:
            return f"hit c{creeps[0].uid}"
        return "advance" if game.rel(hero.side, hero.pos) < game.rules.lane_length else "hold"


class Grinder(Farmer):
    """The farmer, except that while healthy (≥ 50 % HP) and off its base it hits the weakest foe creep in
    reach whenever there is one: it wounds creeps so that its next hit kills them (the set-up the farmer never
    plays, waiting for a sure kill)."""

    name = "rule:grinder"

    def act(self, game: Game, hero: Hero, feedback: str | None) -> str:
        safe = game.rel(hero.side, hero.pos) != 0 and hero.hp >= 0.5 * hero.max_hp
        in_reach = self.foe_creeps(game, hero, hero.reach)  # weakest first
        if safe and in_reach:
            return f"hit c{self.target(in_reach, hero).uid}"
        return super().act(game, hero, feedback)

    def target(self, in_reach: list, hero: Hero):
        """Which of the foe creeps in reach (weakest first) to hit: the weakest."""
        return in_reach[0]


class Setter(Grinder):
    """The grinder, except that without a sure kill in reach it hits the second-weakest foe creep: it spreads its
    hits so that two creeps come into kill range together."""

    name = "rule:setter"

    def target(self, in_reach: list, hero: Hero):
        return in_reach[0] if self.sure_kill(in_reach[0], hero) or len(in_reach) == 1 else in_reach[1]


class RandomBot(RuleBot):
    name = "rule:random"

    def act(self, game: Game, hero: Hero, feedback: str | None) -> str:
        return action_text(game, hero, self.rng.choice(game.legal(hero)))


class LLMHero:
    """A hero played by a chat policy: observations rendered for its own hero, one conversation per game."""

    def __init__(self, policy: Policy, *, name: str = "llm", system: str | None = None, max_ticks: int = 300) -> None:
        self.seat, self.name, self.max_ticks = ChatSeat(policy, system=system), name, max_ticks

    def begin(self, seed: int) -> None:
        self.seat.begin()

    def act(self, game: Game, hero: Hero, feedback: str | None) -> str:
        notes = [text for who, text in game.events if who in (hero.index, -1)]
        if feedback:
            notes.append(f"Invalid action: {feedback}")
        return self.seat.reply(render(game, hero, self.max_ticks, "; ".join(notes)))


RULE_STYLES: dict[str, type[RuleBot]] = {"farmer": Farmer, "pusher": Pusher, "grinder": Grinder, "setter": Setter,
                                    "random": RandomBot}
_ALIASES = {"defensive": "farmer", "farm": "farmer", "aggressive": "pusher", "push": "pusher"}


def make_player(spec: Any, *, system: str | None = None, max_ticks: int = 300,
                llm_policies: Mapping[str, Policy] | None = None,
                llm_policy_factory: Callable[[str], Policy] | None = None):
    """A hero player from ``rule:farmer|pusher|grinder|setter|random``, ``llm:NAME``, a player object or a policy
    callable."""
    if hasattr(spec, "act") and hasattr(spec, "begin"):
        return spec
    if callable(spec):
        return LLMHero(spec, name=getattr(spec, "__name__", "llm"), system=system, max_ticks=max_ticks)
    if not isinstance(spec, str):
        raise TypeError(f"player spec {spec!r} must be 'rule:NAME', 'llm:NAME', a player or a policy callable")
    kind, _, arg = spec.partition(":")
    if kind == "rule":
        return rule_style(spec, RULE_STYLES, _ALIASES, "MOBA bot")()
    if kind == "llm" and arg:
        return LLMHero(llm_policy(spec, llm_policies, llm_policy_factory), name=spec, system=system,
                       max_ticks=max_ticks)
    close = difflib.get_close_matches(kind, ["rule", "llm"], n=1)
    hint = f" Did you mean '{close[0]}:{arg}'?" if close and arg else ""
    if not arg and _ALIASES.get(kind, kind) in RULE_STYLES:
        hint = f" Did you mean 'rule:{_ALIASES.get(kind, kind)}'?"
    raise ValueError(f"player spec {spec!r} must look like 'rule:farmer' or 'llm:PATH'.{hint}")
