"""``MobaEnv``: a one-lane MOBA as a text environment (rules in :mod:`echo2_sdk.envs.moba.game`).

The agent plays hero 0 of team 0 through ``step(action_text)``; the other heroes (the foe in 1v1,
an ally and two foes in 2v2) are players from :mod:`echo2_sdk.envs.moba.players` (``rule:farmer``,
``rule:pusher``, ``rule:random`` or ``llm:NAME``). One ``step`` = one game tick: every living hero
decides on the same state, then the tick resolves (random initiative among heroes). While the
agent's hero is dead the env plays the ticks itself (the agent is not asked to ``hold``).

Game: cells 0..10, bases (500 HP) at 0 and 10, towers (400 HP, 25 damage, range 2) at 2 and 8; a base
is invulnerable while its tower stands. Every 6 ticks each base sends 3 creeps (40 HP, 5 damage).
Heroes: 120 HP, 60 mana, 10 ± 2 damage, range 1; level ups (XP from nearby creep deaths and kills)
add HP, mana and damage; at their own base they regenerate fast and can buy blades (+4 damage).
Abilities: ``cast 1 hero`` strike (heroes only: 30 + 5/level damage, 20 mana, cooldown 4, range 2), ``cast 2`` heal
(+40 HP, 25 mana, cooldown 6). Creeps and towers attack a hero who just hit their allied hero first.

Observation (the agent's side: its base is cell 0; about 150-250 characters)

| line | example | meaning |
|---|---|---|
| notes (optional) | ``you last-hit c7 (+20g); took 12 dmg`` | what happened to you since the last observation, refusals |
| heroes | ``T12/300 you@4 hp84/130 L2 mp30 g140 cd0/3, hero@6 hp60/120 L1`` | tick/limit; each hero's cell, HP, level; your mana, gold, cooldowns of cast 1/2; foes farther than 4 cells are ``unseen``, dead ones ``dead(respawn)`` |
| creeps | ``creeps: yours @4:2 @5:1; foe @5 c7:12 @6 c8:40 c9:40`` | your creeps per cell; foe creeps in sight per cell, id:HP |
| structures | ``towers 400/210 bases 500/500`` | yours/foe's |
| legal | ``Legal: hit c7|hero; cast 1 hero; cast 2; advance; retreat; hold`` | every legal action (``hit c7|hero`` = ``hit c7`` or ``hit hero``) |

Actions (11 characters at most; also accepted: ``attack creep 7``, ``cast 1 on hero``, ``forward``, ``back``, ``wait``)

| action | effect |
|---|---|
| ``hit cN`` / ``hit hero`` / ``hit h1`` / ``hit tower`` / ``hit base`` | attack a unit in range 1; the killing blow on a creep earns 20 gold |
| ``cast 1 hero`` (``cast 1 h2``) | strike a foe hero, range 2 |
| ``cast 2`` | heal yourself |
| ``advance`` / ``retreat`` | move one cell toward the foe's / your base |
| ``buy`` | a blade, at your base, 100 gold |
| ``hold`` | do nothing (the default action) |

An unparsable or illegal action is answered with the same tick and the reason (``info["invalid_reason"]``);
after ``max_invalid_actions`` refusals in a row the agent holds for that tick. ``info`` counts both.

Reward of a step (config fields in brackets; the episode return is their sum)

| term | value |
|---|---|
| gold earned by the agent (last hits 20, hero kills 100, foe tower 100) | +0.01 per gold [``gold_reward``] |
| damage the agent deals to foe towers/bases | +0.005 per HP [``structure_reward``] |
| the agent dies | -1 [``death_penalty``] |
| the foe base falls / the agent's base falls (terminated) | +10 / -10 [``win_reward``] |
| the tick limit is reached (truncated) | 0 |

Hooks a derived env overrides (what ``echo2 new-task moba`` writes out to edit): ``make_hero_player``
(who plays the other heroes), ``rules_text`` (the system message), ``observation_text`` (what the
agent reads) and ``step_reward`` (r_t from the agent's gains in a tick).

Determinism: the game from ``"{seed}:game"``, hero i's player from ``"{seed}:seat:{i}"``, the warm-up
autopilot from ``"{seed}:autopilot"``. ``warmup_ticks`` lets the autopilot play the agent's hero first,
so short training episodes start in a live lane; a model-played hero (``llm:NAME``) is autopiloted
through the warm-up too (its own pilot, from ``"{seed}:seat-autopilot:{i}"``), so a model seat — the
training policy itself under ``llm:self`` — takes over when the agent does, in the kind of state the
agent learns in, and a warm-up costs it no generation.
"""

from __future__ import annotations

import dataclasses
import random
from dataclasses import dataclass
from typing import Any, Callable

from echo2_sdk.env import Policy, TextEnv, sanitize_text
from echo2_sdk.envs.moba.game import Game, Rules
from echo2_sdk.envs.moba.players import LLMHero, make_player
from echo2_sdk.envs.moba.text import action_text, legal_texts, parse, render, system_prompt
from echo2_sdk.envs.seats import build_config

_GAINS = ("gold_earned", "structure_damage", "deaths")
"""The agent's hero stats whose change during a step ``step_reward`` is given."""


@dataclass(frozen=True)
class MobaConfig:
    team_size: int = 1
    """1 (1v1) or 2 (2v2: the agent, one ``allies`` bot, two ``opponents``)."""
    lane_length: int = 10
    wave_period: int = 6
    creeps_per_wave: int = 3
    max_ticks: int = 300
    """Truncate when the game clock reaches this tick."""
    warmup_ticks: int = 0
    """Ticks the ``autopilot`` plays the agent's hero (and every model-played hero) before the first observation."""
    autopilot: str = "rule:farmer"
    opponents: tuple[str, ...] = ("rule:pusher",)
    """One spec for every foe hero, or one per foe (``rule:farmer|pusher|grinder|setter|random``, ``llm:NAME``)."""
    allies: tuple[str, ...] = ("rule:farmer",)
    """The agent's teammate in 2v2."""
    max_invalid_actions: int = 2
    gold_reward: float = 0.01
    structure_reward: float = 0.005
    death_penalty: float = 1.0
    win_reward: float = 10.0

    def __post_init__(self) -> None:
        self.rules  # validates the geometry
        for name in ("opponents", "allies"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, tuple(s.strip() for s in value.split(",")))
            if len(getattr(self, name)) not in (1, self.team_size if name == "opponents" else 1):
                raise ValueError(f"{name}={list(getattr(self, name))}: give one spec, or one per hero")
        if not 0 <= self.warmup_ticks < self.max_ticks:
            raise ValueError(f"warmup_ticks={self.warmup_ticks} must be in 0..max_ticks-1 ({self.max_ticks - 1})")
        if self.max_invalid_actions < 0:
            raise ValueError(f"max_invalid_actions={self.max_invalid_actions} must be >= 0")

    @property
    def rules(self) -> Rules:
        return Rules(self.team_size, self.lane_length, 2, self.wave_period, self.creeps_per_wave)

    @classmethod
    def build(cls, **overrides: Any) -> "MobaConfig":
        """``MobaConfig(**overrides)`` with a "did you mean" for misspelled fields."""
        return build_config(cls, overrides, tuple_fields=("opponents", "allies"))


class MobaEnv(TextEnv):
    """See the module docstring. ``MobaEnv(opponents=("rule:farmer",))`` or ``MobaEnv(config)``."""

    max_observation_chars = 2048

    def __init__(self, config: MobaConfig | None = None, *, llm_policies: dict[str, Policy] | None = None,
                 llm_policy_factory: Callable[[str], Policy] | None = None, render_mode: str | None = None,
                 **overrides: Any) -> None:
        super().__init__(render_mode=render_mode)
        if config is None:
            config = MobaConfig.build(**overrides)
        elif overrides:
            config = MobaConfig.build(**{**dataclasses.asdict(config), **overrides})
        self.config, self.rules = config, config.rules
        self.llm_policies, self.llm_policy_factory = llm_policies, llm_policy_factory
        self.system_prompt = self.rules_text()
        n = config.team_size
        specs = {i: config.allies[0] for i in range(1, n)}
        foes = config.opponents * n if len(config.opponents) == 1 else config.opponents
        specs.update({n + k: spec for k, spec in enumerate(foes)})
        self.players = {i: self.make_hero_player(i, spec) for i, spec in specs.items()}
        self.autopilot = make_player(config.autopilot, system=self.system_prompt, max_ticks=config.max_ticks,
                                     llm_policies=llm_policies, llm_policy_factory=llm_policy_factory)
        self.warmup_pilots = {i: make_player(config.autopilot, system=self.system_prompt, max_ticks=config.max_ticks,
                                             llm_policies=llm_policies, llm_policy_factory=llm_policy_factory)
                              for i, player in self.players.items() if isinstance(player, LLMHero)}
        self.game: Game | None = None

    # ----- hooks: what a task derived from moba (``echo2 new-task moba``) overrides ----------------
    def make_hero_player(self, index: int, spec: str):
        """The player of hero ``index`` (1..team_size-1: allies, then the foes) for its spec."""
        return make_player(spec, system=self.system_prompt, max_ticks=self.config.max_ticks,
                           llm_policies=self.llm_policies, llm_policy_factory=self.llm_policy_factory)

    def rules_text(self) -> str:
        """The system message: the rules, once per conversation."""
        return system_prompt(self.rules, self.config.max_ticks)

    def observation_text(self, game: Game, notes: list[str]) -> str:
        """What the agent (hero 0) reads each tick, after ``notes`` (events, refusal reasons)."""
        return render(game, game.heroes[0], self.config.max_ticks, "; ".join(notes))

    def step_reward(self, gains: dict[str, int], info: dict[str, Any]) -> float:
        """r_t of one step (see the reward table above): ``gains`` holds the agent's ``gold_earned``,
        ``structure_damage`` and ``deaths`` during the tick (all 0 for a refused action, whose
        ``info["invalid_reason"]`` says why); ``info["outcome"]`` is ``win``/``loss`` when a base fell."""
        cfg = self.config
        reward = (cfg.gold_reward * gains["gold_earned"] + cfg.structure_reward * gains["structure_damage"]
                  - cfg.death_penalty * gains["deaths"])
        if info["outcome"] in ("win", "loss"):
            reward += cfg.win_reward if info["outcome"] == "win" else -cfg.win_reward
        return reward

    # ----- TextEnv ----------------------------------------------------------------------------
    def _reset_episode(self, episode_seed: int, options: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        unknown = set(options) - {"warmup_ticks"}
        if unknown:
            raise ValueError(f"unknown reset options {sorted(unknown)}; MobaEnv accepts 'warmup_ticks'")
        warmup = int(options.get("warmup_ticks", self.config.warmup_ticks))
        if not 0 <= warmup < self.config.max_ticks:
            raise ValueError(f"warmup_ticks={warmup} must be in 0..{self.config.max_ticks - 1}")
        self.game = game = Game(self.rules, episode_seed)
        for index, player in self.players.items():
            player.begin(random.Random(f"{episode_seed}:seat:{index}").getrandbits(62))
        self.autopilot.begin(random.Random(f"{episode_seed}:autopilot").getrandbits(62))
        for index, pilot in self.warmup_pilots.items():
            pilot.begin(random.Random(f"{episode_seed}:seat-autopilot:{index}").getrandbits(62))
        self._steps = self._attempts = self._invalid = self._forced = self._opponent_invalid = 0
        self._invalid_by_kind = {"unparsable": 0, "illegal": 0}
        self._notes: list[str] = []
        while game.tick < warmup and game.winner is None:
            self._tick(self._ask(self.autopilot, 0)[0], warming_up=True)
        self._skip_dead()
        self._notes = []  # what happened during the warm-up is not news
        self._taken = game.heroes[0].stats["damage_taken"]
        self._bucket = _lane_bucket(game)
        self._last = self._score()
        return self._render_obs(), self._info(None, None)

    def _step_text(self, action: str):
        game = self.game
        assert game is not None and game.winner is None
        hero = game.heroes[0]
        self._steps += 1
        parsed, reason, kind = parse(game, hero, action)
        if parsed is None:
            self._invalid += 1
            self._invalid_by_kind[kind or "illegal"] += 1
            self._attempts += 1
            note = f"Invalid action '{sanitize_text(action)}': {reason}"
            if self._attempts <= self.config.max_invalid_actions:
                info = self._info(reason, None)
                return self._render_obs(note), self.step_reward(dict.fromkeys(_GAINS, 0), info), False, False, info
            self._forced += 1
            self._notes.append(note + ". Out of attempts: you hold")
            parsed = ("hold",)
        self._attempts = 0
        applied = action_text(game, hero, parsed)
        self._tick(parsed)
        self._skip_dead()
        score = self._score()
        gains = {key: now - before for key, now, before in zip(_GAINS, score, self._last)}
        self._last = score
        terminated = game.winner is not None
        truncated = not terminated and game.tick >= self.config.max_ticks
        if terminated or truncated:
            outcome = self.outcome
            obs = "\n".join(self._notes + [f"Game over at tick {game.tick}: {outcome}. Gold {hero.stats['gold_earned']}, "
                                           f"last hits {hero.stats['last_hits']}, kills {hero.stats['kills']}, "
                                           f"deaths {hero.stats['deaths']}."])
        else:
            obs = self._render_obs()
        info = self._info(reason, applied)
        return obs, float(self.step_reward(gains, info)), terminated, truncated, info

    def legal_actions(self) -> list[str]:
        game = self.game
        if game is None or game.winner is not None or game.tick >= self.config.max_ticks:
            return []
        return legal_texts(game, game.heroes[0])

    # ----- internals --------------------------------------------------------------------------
    def _ask(self, player, index: int) -> tuple[tuple, int]:
        """``player``'s action for hero ``index``: refusals fed back, then hold; (action, refusals)."""
        game = self.game
        assert game is not None
        hero, feedback = game.heroes[index], None
        for attempt in range(self.config.max_invalid_actions + 1):
            parsed, feedback, _ = parse(game, hero, player.act(game, hero, feedback))
            if parsed is not None:
                return parsed, attempt
        return ("hold",), self.config.max_invalid_actions + 1

    def _tick(self, agent_action: tuple, warming_up: bool = False) -> None:
        game = self.game
        assert game is not None
        actions = {0: agent_action}
        for index, player in self.players.items():
            if warming_up:
                player = self.warmup_pilots.get(index, player)
            if game.heroes[index].alive:
                actions[index], refused = self._ask(player, index)
                self._opponent_invalid += refused
        game.tick_once(actions)
        self._notes += [text for who, text in game.events if who in (0, -1)]

    def _skip_dead(self) -> None:
        game = self.game
        assert game is not None
        while not game.heroes[0].alive and game.winner is None and game.tick < self.config.max_ticks:
            self._tick(("hold",))

    def _score(self) -> tuple[int, ...]:
        assert self.game is not None
        stats = self.game.heroes[0].stats
        return tuple(stats[key] for key in _GAINS)

    def _render_obs(self, extra: str | None = None) -> str:
        assert self.game is not None
        taken = self.game.heroes[0].stats["damage_taken"] - self._taken
        self._taken += taken
        notes = self._notes[-4:] + ([f"took {taken} dmg"] if taken else []) + ([extra] if extra else [])
        self._notes = []
        return self.observation_text(self.game, notes)

    @property
    def outcome(self) -> str | None:
        """``win`` / ``loss`` (a base fell), ``timeout`` (tick limit), ``None`` while the game runs."""
        game = self.game
        if game is None:
            return None
        if game.winner is not None:
            return "win" if game.winner == 0 else "loss"
        return "timeout" if game.tick >= self.config.max_ticks else None

    @property
    def lane_bucket(self) -> str | None:
        """Lane state when the agent takes over (``ahead``/``even``/``behind`` in gold; the advantage group)."""
        return getattr(self, "_bucket", None)

    def _info(self, invalid_reason: str | None, applied: str | None) -> dict[str, Any]:
        game = self.game
        assert game is not None
        hero = game.heroes[0]
        return {
            "invalid_reason": invalid_reason, "applied_action": applied, "tick": game.tick, "outcome": self.outcome,
            "level": hero.level, "gold": hero.gold, **dict(hero.stats),
            "towers": [game.towers[0].hp, game.towers[1].hp], "bases": [game.bases[0].hp, game.bases[1].hp],
            "invalid_actions": self._invalid, "invalid_by_kind": dict(self._invalid_by_kind),
            "forced_actions": self._forced, "opponent_invalid_actions": self._opponent_invalid,
        }


def _lane_bucket(game: Game) -> str:
    mine = sum(h.stats["gold_earned"] for h in game.team(0))
    theirs = sum(h.stats["gold_earned"] for h in game.team(1))
    return "ahead" if mine - theirs >= 40 else "behind" if theirs - mine >= 40 else "even"
