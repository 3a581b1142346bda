"""The admission gate between the rollout pool and the replay buffer: decode a worker's reply, check the
worker's identity, validate records, audit rewards, apply the staleness bound; typed counters of each."""
