"""Capacity planning and the cost-aware worker pool (ECHO-2 §capacity model, cost-aware activation).

* ``capacity``: eq. 1 (overlap rule), eq. 2 (μ_min), predicted bubble, staleness bounds, κ from S.
* ``poolfile`` / ``activation``: the pool file, ρ_i = c_i/μ_i, greedy and random (NoCost) activation.
* ``scheduler`` / ``heartbeat``: the closed-loop PoolScheduler (pure, time passed in) and its inputs.
* ``control``: ``PoolController``, the closed loop in a real run (starts, releases, replaces workers).
* ``cost``: Σ_g p_g · GPU-hours_g, per step, per accepted sample, per reward point.
* ``pool_state``: the cost and scheduler estimates a checkpoint carries to a resumed run.
* ``plan`` / ``cli``: ``echo2 plan`` and ``echo2 simulate``.
* ``simconfig`` / ``simparts`` / ``simulator`` / ``simstats`` / ``experiments`` / ``bcast_model``: the
  discrete-event pool simulator, which drives the runtime's ReplayBuffer and this package's scheduler.
"""
