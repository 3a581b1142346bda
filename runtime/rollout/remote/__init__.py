"""Worker-to-learner data paths that carry no pickle: JSON results, and rollout workers outside Ray.

``codec``: the JSON documents a rollout worker returns (in-cluster Ray workers use them too).
``protocol``: framed JSON (+ raw safetensors payloads learner → worker) with mutual HMAC authentication.
``server``: ``echo2 worker serve``, a rollout worker on an untrusted machine that never joins Ray.
``proxy``: the Ray actor on the learner's node that stands in for such a worker in the pool.
"""
