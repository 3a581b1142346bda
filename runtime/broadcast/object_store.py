"""The Ray object-store snapshot transport (``broadcast.transport: object_store``)."""

from __future__ import annotations

from typing import Any, Sequence

import ray

from echo2_sdk.runtime.broadcast.base import CONTROL, SnapshotTransport


class ObjectStoreTransport(SnapshotTransport):
    """One ``ray.put`` per snapshot; each worker pulls it from the object store."""

    def publish(self, state_dict: dict, version: int, workers: Sequence[Any],
                names: Sequence[str] | None = None) -> list[Any]:
        ref = ray.put(state_dict)
        return [w.install.options(concurrency_group=CONTROL).remote(ref, version) for w in workers]
