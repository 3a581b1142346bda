"""Pure evaluation metrics over per-example samples of rewards.

``rewards[i][j]`` is the reward of sample j of example i. A sample is *correct* when it earns the
task's maximum reward (1.0 for 0/1 rewards).

- avg@k: mean over examples of the mean reward of their k samples (the expected reward of one
  sample; for 0/1 rewards, the expected accuracy).
- pass@j: probability that at least one of j samples drawn without replacement from the k is
  correct, averaged over examples, with the unbiased estimator 1 - C(k-c, j) / C(k, j)
  (Chen et al. 2021, "Evaluating Large Language Models Trained on Code"); pass@k is the share of
  examples with at least one correct sample.

And the contract of a task's head-to-head evaluation (:class:`HeadToHead`, what ``echo2 eval --task
NAME`` runs: agents against opponents over many games).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Mapping, Sequence

PolicyFactory = Callable[[str], Callable[[list[dict[str, str]]], str]]
"""``NAME`` of an ``llm:NAME`` player spec → its chat policy ``policy(messages) -> reply text``."""


def pass_at_k_unbiased(num_samples: int, num_correct: int, k: int) -> float:
    """Unbiased pass@k for one example with ``num_correct`` of ``num_samples`` correct samples."""
    if not 0 <= num_correct <= num_samples:
        raise ValueError(f"num_correct={num_correct} must be in [0, num_samples={num_samples}]")
    if not 1 <= k <= num_samples:
        raise ValueError(f"pass@k needs 1 <= k <= num_samples={num_samples}, got k={k}")
    if num_samples - num_correct < k:
        return 1.0  # every draw of k samples contains a correct one
    # 1 - C(n-c, k) / C(n, k) as a product, which stays exact-ish for large n (no huge binomials).
    return 1.0 - math.prod(1.0 - k / i for i in range(num_samples - num_correct + 1, num_samples + 1))


def avg_at_k(
    rewards: Sequence[Sequence[float]],
    *,
    max_reward: float = 1.0,
    pass_ks: Iterable[int] = (),
) -> dict:
    """avg@k, pass@k and accuracy of k samples per example (every example must have the same k).

    Returns ``{"k", "num_examples", "avg_at_k", "pass_at_k", "accuracy", "pass_at": {j: pass@j}}``
    where ``accuracy`` is the share of all samples that are correct and ``pass_at`` holds pass@j for
    the extra ``pass_ks`` (each 1 <= j <= k).
    """
    rows = [list(map(float, row)) for row in rewards]
    if not rows:
        raise ValueError("avg_at_k needs at least one example; got an empty list of rewards")
    k = len(rows[0])
    uneven = [i for i, row in enumerate(rows) if len(row) != k]
    if k == 0 or uneven:
        raise ValueError(
            f"avg_at_k needs the same k >= 1 samples for every example; example 0 has {k}, "
            f"example(s) {uneven[:5]} differ"
        )
    bad = [(i, r) for i, row in enumerate(rows) for r in row if not math.isfinite(r)]
    if bad:
        raise ValueError(f"reward {bad[0][1]!r} of example {bad[0][0]} is not finite")
    correct = [sum(r >= max_reward - 1e-9 for r in row) for row in rows]
    num_examples = len(rows)
    extra = sorted(set(pass_ks))
    return {
        "k": k,
        "num_examples": num_examples,
        "avg_at_k": sum(sum(row) / k for row in rows) / num_examples,
        "pass_at_k": sum(c > 0 for c in correct) / num_examples,
        "accuracy": sum(correct) / (num_examples * k),
        "pass_at": {
            j: sum(pass_at_k_unbiased(k, c, j) for c in correct) / num_examples for j in extra
        },
    }


@dataclass(frozen=True)
class HeadToHead:
    """A task's head-to-head evaluation: every agent plays every opponent, one table cell each.

    A task offers one through its adapter's ``head_to_head()`` classmethod. ``echo2 eval --task NAME``
    builds its arguments with :func:`add_head_to_head_arguments`, turns model paths into ``llm:PATH``
    specs, loads models through the ``llm_policy_factory`` it passes to :attr:`run`, and prints what
    ``run`` returns; a task's own ``python -m`` entry can use the same two pieces without models.
    """

    run: Callable[[argparse.Namespace, PolicyFactory | None], str]
    """Play the table that ``args`` describes and return it as printable text (JSON when ``args.json``).
    ``args`` holds ``agents`` and ``opponents`` (comma-separated player specs), the games count
    (``args.<games_arg>``), ``seed``, ``json`` and the task's own arguments. Bad player specs raise
    ``ValueError`` (shown as a one-line error); ``llm:NAME`` specs need the factory (``None``: no models)."""
    default_agents: str
    """Comma-separated agent specs used without ``--agents``, e.g. ``"rule:tag"``."""
    default_opponents: str
    """Comma-separated opponent specs used without ``--opponents``."""
    games_arg: str
    """Name of the games-count argument: ``"hands"`` gives ``--hands``, read as ``args.hands``."""
    default_games: int
    games_help: str = "games per agent/opponent cell"
    add_arguments: Callable[[argparse.ArgumentParser], object] | None = None
    """Adds the task's own arguments to the parser (poker: ``--seats``, ``--blinds``, ``--stack``)."""
    description: str = ""
    """What a cell reports and which player specs exist (part of ``echo2 eval --help``)."""
    task_defaults: Callable[[Any], Mapping[str, Any]] | None = None
    """The argument defaults that play a given task's own table: its ``Options`` object → ``{dest: value}``
    (poker: ``{"seats": 3, "blinds": "25/50", "opponents": "rule:tag+rule:lag", ...}``). ``echo2 eval
    --config FILE`` (and a task named by ``path/to/file.py:Class``) applies them, so a task derived from a
    built-in is evaluated at the table it trains at; explicit arguments still win."""

    def __post_init__(self) -> None:
        if not callable(self.run):
            raise TypeError(f"HeadToHead.run must be callable(args, llm_policy_factory) -> str, got {self.run!r}")
        if not self.games_arg.isidentifier():
            raise ValueError(f"HeadToHead.games_arg={self.games_arg!r} must be an argument name such as 'hands'")
        if self.default_games < 1:
            raise ValueError(f"HeadToHead.default_games={self.default_games} must be >= 1")

    @property
    def games_flag(self) -> str:
        """The games-count option as typed on the command line, e.g. ``--hands``."""
        return "--" + self.games_arg.replace("_", "-")

    def games(self, args: argparse.Namespace) -> int:
        """The games count ``args`` asks for."""
        return getattr(args, self.games_arg)

    def main(self, argv: Sequence[str] | None = None, *, prog: str | None = None) -> None:
        """Rule players only, without the CLI: ``python -m <the task's evaluation module>``."""
        parser = add_head_to_head_arguments(argparse.ArgumentParser(prog=prog, description=self.description), self)
        print(self.run(parser.parse_args(argv), None))


def add_head_to_head_arguments(parser: argparse.ArgumentParser, head_to_head: HeadToHead) -> argparse.ArgumentParser:
    """Arguments every head-to-head evaluation takes, plus the task's own; returns ``parser``."""
    parser.add_argument("--agent", "--agents", dest="agents", default=head_to_head.default_agents,
                        help=f"comma-separated agent specs (default {head_to_head.default_agents})")
    parser.add_argument("--opponents", default=head_to_head.default_opponents,
                        help=f"comma-separated opponent specs (default {head_to_head.default_opponents})")
    parser.add_argument(head_to_head.games_flag, dest=head_to_head.games_arg, type=int,
                        default=head_to_head.default_games,
                        help=f"{head_to_head.games_help} (default {head_to_head.default_games})")
    parser.add_argument("--seed", type=int, default=0, help="seed of the games (same seed, same table)")
    parser.add_argument("--json", action="store_true", help="print the whole result as JSON")
    if head_to_head.add_arguments is not None:
        head_to_head.add_arguments(parser)
    return parser
