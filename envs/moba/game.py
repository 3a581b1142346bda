"""The MOBA rules engine: one lane, two teams of heroes, creep waves, towers and bases.

Pure game logic, no text: :class:`Game` holds the state and resolves one *tick* from one action per
living hero (:meth:`Game.tick_once`); :mod:`echo2_sdk.envs.moba.text` renders and parses text.
Everything random (the heroes' initiative order each tick, damage rolls) comes from one
``random.Random`` seeded with ``"{seed}:game"``, so a game is replayable from its seed and actions.

Geometry: cells ``0..L`` (``lane_length``). Team 0's base is at cell 0 and its tower at cell
``tower_offset``; team 1 mirrors it (base at L, tower at L - tower_offset). Heroes see the lane from
their own side (:meth:`Game.rel`): their base is always at 0, the enemy base at L.

A tick, in order: (1) heroes act in a random initiative order (an action whose target died or left
range in the meantime fizzles); (2) creeps and towers pick targets at once, then all their damage
lands; (3) deaths: gold and XP, respawn timers, structures fall; (4) creeps that did not attack
walk one cell; (5) fountain regeneration, cooldowns, respawns; (6) a wave spawns every
``wave_period`` ticks. A base falls → the other team wins.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

# ----- balance (documented in the env's docstring; change here, not in code below) ----------------
HERO_HP, HERO_MANA, HERO_DMG, HERO_RANGE = 120, 60, 10, 1
LEVEL_HP, LEVEL_MANA, LEVEL_DMG, MAX_LEVEL = 15, 10, 2, 6
XP_PER_LEVEL = 50             # level n -> n+1 needs 50 * n more XP
CREEP_HP, CREEP_DMG, CREEP_RANGE = 40, 5, 1
TOWER_HP, TOWER_DMG, TOWER_RANGE = 300, 25, 2
BASE_HP = 300
WAVE_HP, WAVE_DMG_EVERY = 3, 4   # wave k's creeps: +3k HP, +1 damage every 4 waves
SIGHT = 4                     # enemy heroes and creeps farther than this are not shown
CREEP_GOLD, CREEP_XP, XP_RADIUS = 20, 12, 3
HERO_GOLD, HERO_XP, TOWER_GOLD = 100, 40, 100
FOUNTAIN_HP, FOUNTAIN_MANA = 20, 10
BLADE_COST, BLADE_DMG = 100, 4
# Abilities: number -> (name, mana, cooldown, range); 1 = strike (damage, heroes only), 2 = heal (self).
STRIKE_DMG, STRIKE_LEVEL_DMG, HEAL_HP = 30, 5, 40
ABILITIES = {1: ("strike", 20, 4, 2), 2: ("heal", 25, 6, 0)}


@dataclass(frozen=True)
class Rules:
    """Shape of a game (balance constants are module-level, see above)."""

    team_size: int = 1
    lane_length: int = 10
    tower_offset: int = 2
    wave_period: int = 6
    creeps_per_wave: int = 3

    def __post_init__(self) -> None:
        if self.team_size not in (1, 2):
            raise ValueError(f"team_size={self.team_size}: MOBA supports 1 (1v1) or 2 (2v2)")
        if not 6 <= self.lane_length <= 30:
            raise ValueError(f"lane_length={self.lane_length} must be in 6..30")
        if not 1 <= self.tower_offset < self.lane_length // 2:
            raise ValueError(f"tower_offset={self.tower_offset} must be in 1..{self.lane_length // 2 - 1}")
        if self.wave_period < 1 or not 0 <= self.creeps_per_wave <= 6:
            raise ValueError(f"wave_period={self.wave_period} must be >= 1, creeps_per_wave in 0..6")


class Unit:
    __slots__ = ("kind", "side", "pos", "hp", "max_hp", "dmg", "reach", "uid")

    def __init__(self, kind: str, side: int, pos: int, hp: int, dmg: int, reach: int, uid: int = 0) -> None:
        self.kind, self.side, self.pos, self.hp, self.max_hp = kind, side, pos, hp, hp
        self.dmg, self.reach, self.uid = dmg, reach, uid

    @property
    def alive(self) -> bool:
        return self.hp > 0


class Hero(Unit):
    __slots__ = ("index", "mana", "max_mana", "level", "xp", "gold", "cooldowns", "respawn", "blades", "aggro",
                 "stats")

    def __init__(self, index: int, side: int, pos: int) -> None:
        super().__init__("hero", side, pos, HERO_HP, HERO_DMG, HERO_RANGE)
        self.index, self.mana, self.max_mana = index, HERO_MANA, HERO_MANA
        self.level, self.xp, self.gold, self.blades, self.respawn, self.aggro = 1, 0, 0, 0, 0, 0
        self.cooldowns = {1: 0, 2: 0}
        self.stats = {"last_hits": 0, "kills": 0, "deaths": 0, "gold_earned": 0, "hero_damage": 0,
                      "structure_damage": 0, "damage_taken": 0}

    @property
    def alive(self) -> bool:
        return self.respawn == 0


# An action: ("hit", target) | ("cast", ability, target or None) | ("move", +1 / -1) | ("buy",) | ("hold",)
Action = tuple


class Game:
    """State and tick resolution of one game. ``heroes[i]``: team ``i // team_size``."""

    def __init__(self, rules: Rules, seed: int | str) -> None:
        self.rules, self.rng, self.tick = rules, random.Random(f"{seed}:game"), 0
        n, length = rules.team_size, rules.lane_length
        self.heroes = [Hero(i, i // n, 0 if i < n else length) for i in range(2 * n)]
        self.towers = [Unit("tower", 0, rules.tower_offset, TOWER_HP, TOWER_DMG, TOWER_RANGE),
                       Unit("tower", 1, length - rules.tower_offset, TOWER_HP, TOWER_DMG, TOWER_RANGE)]
        self.bases = [Unit("base", 0, 0, BASE_HP, 0, 0), Unit("base", 1, length, BASE_HP, 0, 0)]
        self.creeps: list[Unit] = []
        self._next_uid = 1
        self.winner: int | None = None
        self.events: list[tuple[int, str]] = []
        """(hero index or -1 for everyone, text) of the last tick, for observations."""
        self._attacked: set[int] = set()
        self._spawn_wave()

    # ----- geometry -----------------------------------------------------------------------------
    def rel(self, side: int, pos: int) -> int:
        """``pos`` as seen from ``side``: own base at 0."""
        return pos if side == 0 else self.rules.lane_length - pos

    @staticmethod
    def forward(side: int) -> int:
        return 1 if side == 0 else -1

    def team(self, side: int) -> list[Hero]:
        return [h for h in self.heroes if h.side == side]

    def hero_label(self, viewer: Hero, hero: Hero) -> str:
        """How ``viewer`` names ``hero``: ``hero`` (the enemy, 1v1), ``h1``/``h2`` (enemies, 2v2), ``ally``."""
        if hero.side == viewer.side:
            return "ally"
        if self.rules.team_size == 1:
            return "hero"
        return f"h{1 + [h.index for h in self.team(hero.side)].index(hero.index)}"

    def label(self, viewer: Hero, unit: Unit) -> str:
        if isinstance(unit, Hero):
            return self.hero_label(viewer, unit)
        return f"c{unit.uid}" if unit.kind == "creep" else unit.kind

    def attackable(self, attacker: Hero, reach: int, structures: bool = True) -> list[Unit]:
        """Enemy units ``attacker`` can target within ``reach`` cells (creeps, heroes, then structures)."""
        side, pos = attacker.side, attacker.pos
        found: list[Unit] = [c for c in self.creeps if c.side != side and abs(c.pos - pos) <= reach]
        found += [h for h in self.heroes if h.side != side and h.alive and abs(h.pos - pos) <= reach]
        if structures:
            tower, base = self.towers[1 - side], self.bases[1 - side]
            if tower.alive and abs(tower.pos - pos) <= reach:
                found.append(tower)
            if base.alive and not tower.alive and abs(base.pos - pos) <= reach:
                found.append(base)  # the base is invulnerable while its tower stands
        return found

    # ----- actions ------------------------------------------------------------------------------
    def legal(self, hero: Hero) -> list[Action]:
        if self.winner is not None or not hero.alive:
            return [("hold",)] if self.winner is None else []
        actions: list[Action] = [("hit", u) for u in self.attackable(hero, hero.reach)]
        name, mana, _, reach = ABILITIES[1]
        if hero.cooldowns[1] == 0 and hero.mana >= mana:
            actions += [("cast", 1, u) for u in self.attackable(hero, reach, structures=False) if isinstance(u, Hero)]
        if hero.cooldowns[2] == 0 and hero.mana >= ABILITIES[2][1] and hero.hp < hero.max_hp:
            actions.append(("cast", 2, None))
        if self.rel(hero.side, hero.pos) < self.rules.lane_length:
            actions.append(("move", 1))
        if self.rel(hero.side, hero.pos) > 0:
            actions.append(("move", -1))
        if self.rel(hero.side, hero.pos) == 0 and hero.gold >= BLADE_COST:
            actions.append(("buy",))
        actions.append(("hold",))
        return actions

    def why_illegal(self, hero: Hero, action: Action) -> str | None:
        """``None`` if ``action`` is legal for ``hero`` now, else a short reason."""
        if not hero.alive:
            return f"you are dead (respawn in {hero.respawn})" if action[0] != "hold" else None
        kind = action[0]
        if kind == "hit" or (kind == "cast" and action[1] == 1):
            target: Unit = action[-1]
            reach = hero.reach if kind == "hit" else ABILITIES[1][3]
            if kind == "cast":
                problem = self._ability_problem(hero, 1)
                if problem:
                    return problem
                if not isinstance(target, Hero):
                    return "strike (cast 1) only targets heroes"
            if not target.alive:
                return f"{self.label(hero, target)} is dead"
            if target.kind == "base" and self.towers[target.side].alive:
                return "the base is invulnerable while its tower stands"
            if abs(target.pos - hero.pos) > reach:
                return f"{self.label(hero, target)} is out of range ({abs(target.pos - hero.pos)} > {reach})"
            return None
        if kind == "cast":
            problem = self._ability_problem(hero, 2)
            return problem or ("you are at full HP" if hero.hp >= hero.max_hp else None)
        if kind == "move":
            to = self.rel(hero.side, hero.pos) + action[1]
            return None if 0 <= to <= self.rules.lane_length else "you cannot leave the lane"
        if kind == "buy":
            if self.rel(hero.side, hero.pos) != 0:
                return "you can only buy at your base"
            return None if hero.gold >= BLADE_COST else f"a blade costs {BLADE_COST} gold, you have {hero.gold}"
        return None

    @staticmethod
    def _ability_problem(hero: Hero, ability: int) -> str | None:
        name, mana, _, _ = ABILITIES[ability]
        if hero.cooldowns[ability]:
            return f"{name} (cast {ability}) is on cooldown for {hero.cooldowns[ability]} more tick(s)"
        if hero.mana < mana:
            return f"{name} needs {mana} mana, you have {hero.mana}"
        return None

    # ----- a tick -------------------------------------------------------------------------------
    def tick_once(self, actions: dict[int, Action]) -> None:
        """Resolve one tick; ``actions[i]`` for each living hero ``i`` (missing → hold)."""
        if self.winner is not None:
            raise RuntimeError("the game is over")
        self.events = []
        order = [h for h in self.heroes if h.alive]
        self.rng.shuffle(order)
        for hero in order:
            if hero.alive and self.winner is None:
                self._hero_acts(hero, actions.get(hero.index, ("hold",)))
        self._units_fight()
        self._deaths()
        self._creeps_walk()
        self._upkeep()
        self.tick += 1
        if self.tick % self.rules.wave_period == 0:
            self._spawn_wave()

    def _hero_acts(self, hero: Hero, action: Action) -> None:
        problem = self.why_illegal(hero, action)
        if problem:
            self.events.append((hero.index, f"your action fizzled: {problem}"))
            return
        kind = action[0]
        if kind == "hit":
            self._damage(hero, action[1], hero.dmg + self.rng.randint(-2, 2))
        elif kind == "cast":
            _, mana, cooldown, _ = ABILITIES[action[1]]
            hero.mana -= mana
            hero.cooldowns[action[1]] = cooldown
            if action[1] == 1:
                self._damage(hero, action[2], STRIKE_DMG + STRIKE_LEVEL_DMG * (hero.level - 1))
            else:
                hero.hp = min(hero.max_hp, hero.hp + HEAL_HP)
        elif kind == "move":
            hero.pos += action[1] * self.forward(hero.side)
        elif kind == "buy":
            hero.gold -= BLADE_COST
            hero.blades += 1
            hero.dmg += BLADE_DMG

    def _damage(self, hero: Hero, target: Unit, amount: int) -> None:
        """A hero's hit or strike: applied at once, so the killing blow (gold) belongs to this hero."""
        amount = max(1, amount)
        target.hp -= amount
        if isinstance(target, Hero):
            hero.aggro = 2  # creeps and towers near the victim turn on the attacker
            hero.stats["hero_damage"] += amount
            target.stats["damage_taken"] += amount
        elif target.kind in ("tower", "base"):
            hero.stats["structure_damage"] += amount
        if target.hp > 0:
            return
        if target.kind == "creep":
            self._earn(hero, CREEP_GOLD)
            hero.stats["last_hits"] += 1
            self.events.append((hero.index, f"you last-hit c{target.uid} (+{CREEP_GOLD}g)"))
        elif isinstance(target, Hero):
            self._earn(hero, HERO_GOLD)
            self._gain_xp(hero, HERO_XP)
            hero.stats["kills"] += 1
            self.events.append((hero.index, f"you killed {self.hero_label(hero, target)} (+{HERO_GOLD}g)"))
        self._deaths()

    def _units_fight(self) -> None:
        """Creeps and towers choose targets on the same state, then all their damage lands."""
        hits: list[tuple[Unit, int]] = []
        for unit in [*self.creeps, *(t for t in self.towers if t.alive)]:
            target = self._unit_target(unit)
            if target is not None:
                hits.append((target, unit.dmg))
                if unit.kind == "creep":
                    self._attacked.add(id(unit))  # creeps that attacked do not walk
        for target, amount in hits:
            target.hp -= amount
            if isinstance(target, Hero):
                target.stats["damage_taken"] += amount

    def _unit_target(self, unit: Unit) -> Unit | None:
        side, reach = unit.side, unit.reach
        near = lambda u: abs(u.pos - unit.pos) <= reach and u.hp > 0  # noqa: E731
        heroes = [h for h in self.heroes if h.side != side and h.alive and near(h)]
        aggro = [h for h in heroes if h.aggro]
        if aggro:
            return min(aggro, key=lambda h: (abs(h.pos - unit.pos), h.index))
        creeps = [c for c in self.creeps if c.side != side and near(c)]
        if creeps:
            return min(creeps, key=lambda c: (abs(c.pos - unit.pos), c.hp, c.uid))
        if heroes:
            return min(heroes, key=lambda h: (abs(h.pos - unit.pos), h.index))
        for structure in (self.towers[1 - side], self.bases[1 - side]):
            if structure.alive and near(structure) and (structure.kind == "tower" or not self.towers[1 - side].alive):
                return structure if unit.kind == "creep" else None
        return None

    def _deaths(self) -> None:
        for creep in [c for c in self.creeps if c.hp <= 0]:
            self.creeps.remove(creep)
            for hero in self.heroes:  # XP to enemy heroes nearby, whoever landed the blow
                if hero.side != creep.side and hero.alive and abs(hero.pos - creep.pos) <= XP_RADIUS:
                    self._gain_xp(hero, CREEP_XP)
        for hero in self.heroes:
            if hero.alive and hero.hp <= 0:
                hero.respawn = 4 + hero.level
                hero.stats["deaths"] += 1
                hero.aggro = 0
                self.events.append((hero.index, f"you died (respawn in {hero.respawn})"))
        for side in (0, 1):
            tower = self.towers[side]
            if tower.hp <= 0 and tower.max_hp > 0 and tower.dmg:
                tower.hp, tower.dmg = 0, 0  # fallen (dmg 0 marks it as handled)
                for hero in self.team(1 - side):
                    self._earn(hero, TOWER_GOLD)
                self.events.append((-1, f"team {side}'s tower fell"))
            if self.bases[side].hp <= 0 and self.winner is None:
                self.bases[side].hp = 0
                self.winner = 1 - side

    def _creeps_walk(self) -> None:
        for creep in self.creeps:
            if id(creep) not in self._attacked:
                creep.pos = min(max(creep.pos + self.forward(creep.side), 0), self.rules.lane_length)
        self._attacked = set()

    def _upkeep(self) -> None:
        for hero in self.heroes:
            hero.aggro = max(0, hero.aggro - 1)
            hero.cooldowns = {k: max(0, v - 1) for k, v in hero.cooldowns.items()}
            if not hero.alive:
                hero.respawn -= 1
                if hero.respawn == 0:
                    hero.pos, hero.hp, hero.mana = (0 if hero.side == 0 else self.rules.lane_length,
                                                    hero.max_hp, hero.max_mana)
                continue
            hero.mana = min(hero.max_mana, hero.mana + 1)
            if self.rel(hero.side, hero.pos) == 0:
                hero.hp = min(hero.max_hp, hero.hp + FOUNTAIN_HP)
                hero.mana = min(hero.max_mana, hero.mana + FOUNTAIN_MANA)

    def _spawn_wave(self) -> None:
        wave = self.tick // self.rules.wave_period
        hp, dmg = CREEP_HP + WAVE_HP * wave, CREEP_DMG + wave // WAVE_DMG_EVERY
        for side in (0, 1):
            start = 0 if side == 0 else self.rules.lane_length
            for _ in range(self.rules.creeps_per_wave):
                self.creeps.append(Unit("creep", side, start, hp, dmg, CREEP_RANGE, self._next_uid))
                self._next_uid += 1

    # ----- progression --------------------------------------------------------------------------
    def _earn(self, hero: Hero, gold: int) -> None:
        hero.gold += gold
        hero.stats["gold_earned"] += gold

    def _gain_xp(self, hero: Hero, xp: int) -> None:
        hero.xp += xp
        while hero.level < MAX_LEVEL and hero.xp >= XP_PER_LEVEL * hero.level:
            hero.xp -= XP_PER_LEVEL * hero.level
            hero.level += 1
            hero.max_hp += LEVEL_HP
            hero.hp += LEVEL_HP
            hero.max_mana += LEVEL_MANA
            hero.dmg += LEVEL_DMG
            self.events.append((hero.index, f"you reached level {hero.level}"))
