"""Peer-assisted pipelined snapshot broadcast (ECHO-2 §4): striped chains over bandwidth-limited
links, integrity at every hop, chain repair, and a benchmark against the physical bound.

Modules, one concern each:
  base       contracts: ``SnapshotTransport`` (how a snapshot reaches the workers), peers, faults, errors
  object_store  the Ray object-store transport; delivery: per-version delivery tracking (T_bcast at q = 1/γ)
  snapshot   state dict ↔ safetensors bytes ↔ fixed-size chunks (no pickle)
  manifest   per-chunk and whole SHA-256, Ed25519 signature of the learner
  delta      delta snapshots: per-tensor XOR against a base, byte planes, zstd; bit-exact apply
  delta_plan    the learner's per-publish choice, delta against a base every worker holds or full
  delta_install the worker's bases, verified apply (target SHA-256), full-snapshot fallback fetch
  topology   how stripes, chains and chunk size follow from B0, Bw, N; live repair/join decisions
  shaping    token buckets (uplink/downlink) and per-hop latency on loopback
  wire       frame format of the worker-to-worker TCP stream
  transfer   one node's buffer / verified chunks / counters for one version
  receiver   the receiving protocol (chunks land in place in the snapshot buffer)
  serving    the sending side (forward each verified chunk to the child at once)
  node       a node: receive, verify, forward, repair, install
  control    the coordinator: parents, holders, completion records (no I/O)
  control_channel  the authenticated JSON-lines channel: ``ControlServer`` (learner), ``TcpControlClient``
  control_wire  typed, bounded control messages (a malformed one is refused and counted, never raised)
  credentials  run secret, per-node keys, single-use chunk-port tickets, line MACs, refusal counters
  host       many nodes in one process (benchmark workers)
  session    one measured broadcast; metrics: T_bcast, bounds, CPU; cli: ``echo2 bench broadcast``
  endpoints  thread-hosted learner/worker endpoints; ray_transport: ``P2PSnapshotTransport``
"""
