"""RL algorithms: registered, pure policy-loss functions (one algorithm per module).

Importing this package registers the built-in losses; look them up by name with
`get_policy_loss("grpo")`.
"""

from echo2_sdk.runtime.learning.algos import grpo  # noqa: F401  (registers "grpo")
from echo2_sdk.runtime.learning.algos.registry import (
    get_policy_loss,
    list_policy_losses,
    register_policy_loss,
)

__all__ = ["get_policy_loss", "list_policy_losses", "register_policy_loss"]
