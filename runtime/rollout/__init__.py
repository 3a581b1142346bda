"""The rollout plane: ``RolloutWorker`` (generate under the installed version, score rewards locally),
the ``RolloutPool`` of Ray actors, multi-turn episodes, the generation backends and remote workers.

It never imports the learning plane: the two meet in the driver and the admission gate."""
