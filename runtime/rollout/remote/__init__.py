"""Rollout workers outside Ray, on paths that carry no pickle.

``protocol``: framed JSON (+ raw safetensors payloads learner → worker) with mutual HMAC authentication.
``server``: ``echo2 worker serve``, a rollout worker on an untrusted machine that never joins Ray.
``proxy``: the Ray actor on the learner's node that stands in for such a worker in the pool.
The JSON documents themselves (generate replies, worker settings) are ``echo2_sdk.runtime.rollout.codec``:
in-cluster Ray workers reply with the same documents.
"""
