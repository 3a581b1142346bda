"""The learning plane: the task-blind GRPO ``Learner``, the bounded-staleness ``ReplayBuffer``, batching of
records into training tensors, checkpoints, the supervised warm start and sampler/learner agreement.

It never imports the rollout plane: the two meet in the driver and the admission gate."""
