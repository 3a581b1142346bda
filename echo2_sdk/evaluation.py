"""Pure evaluation metrics over per-example samples of rewards.

``rewards[i][j]`` is the reward of sample j of example i. A sample is *correct* when it earns the
task's maximum reward (1.0 for 0/1 rewards).

- avg@k: mean over examples of the mean reward of their k samples (the expected reward of one
  sample; for 0/1 rewards, the expected accuracy).
- pass@j: probability that at least one of j samples drawn without replacement from the k is
  correct, averaged over examples, with the unbiased estimator 1 - C(k-c, j) / C(k, j)
  (Chen et al. 2021, "Evaluating Large Language Models Trained on Code"); pass@k is the share of
  examples with at least one correct sample.
"""

from __future__ import annotations

import math
from typing import Iterable, Sequence


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
