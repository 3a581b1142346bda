"""The echo2 runtime (installed as ``echo2_sdk.runtime``): one sub-package per plane of the design.

=============  ==========================================================================================
``driver``     ties the planes together: ``Trainer`` (async ECHO-2 / sync loop), setup, launch, run
               directory, metrics, plots, experiment tracking
``learning``   the learning plane: ``Learner`` (GRPO, task-blind), replay buffer, batching, checkpoints,
               warm start, sampler/learner agreement
``rollout``    the rollout plane: ``RolloutWorker`` actors, the pool, multi-turn episodes, generation
               backends (HF, vLLM), remote (untrusted) workers
``admission``  the one gate between the rollout pool and the replay buffer (decode, identity, records,
               reward audit, staleness) with its typed counters
``broadcast``  snapshot delivery: the ``SnapshotTransport`` contract, object-store and P2P striped-chain
               transports, delivery timing (T_bcast)
``planning``   capacity planning, the cost-aware pool scheduler and its closed-loop controller, the simulator
``models``     model code both planes share: the tiny Qwen3 builder, loading, the log-prob convention,
               shipping model files to nodes
``cli``        the ``echo2`` command line (the composition root: each subcommand imports what it needs)
=============  ==========================================================================================

Nothing here is imported by ``echo2_sdk``'s core; the runtime finds tasks only through the registry.
"""
