"""A local run listens on loopback only: the Ray cluster it starts (GCS, raylet, workers, agents) and
the broadcast plane's listeners bind 127.0.0.1, never every interface."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

PROBE = textwrap.dedent("""
    import json, ray, psutil
    from echo2_sdk.config import Echo2Config
    from echo2_sdk.runtime.driver.setup import init_ray
    from echo2_sdk.runtime.broadcast.endpoints import LearnerBroadcaster

    init_ray(Echo2Config(), None)
    ray.get(ray.remote(lambda: 1).remote())
    broadcaster = LearnerBroadcaster()
    me = psutil.Process()
    pids = {me.pid} | {p.pid for p in me.children(recursive=True)}
    listening = sorted({(c.laddr.ip, c.pid) for c in psutil.net_connections("tcp")
                        if c.status == psutil.CONN_LISTEN and c.pid in pids})
    broadcaster.close()
    ray.shutdown()
    print("LISTEN " + json.dumps(listening))
""")


@pytest.mark.slow
def test_a_local_run_binds_ray_and_the_broadcast_plane_to_loopback():
    proc = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(l for l in proc.stdout.splitlines() if l.startswith("LISTEN "))
    listening = json.loads(line[len("LISTEN "):])
    assert len(listening) >= 4, listening  # GCS, raylet, a worker, the two broadcast listeners at least
    exposed = [(ip, pid) for ip, pid in listening if ip not in ("127.0.0.1", "::ffff:127.0.0.1", "::1")]
    assert not exposed, f"listening beyond loopback: {exposed}"
