import os

import pytest
import torch

# Two cores are shared by the learner, workers and pytest: keep each test single-threaded.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")

SHARED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from echo2_sdk.runtime.models.modeling import build_tiny_tokenizer

    return build_tiny_tokenizer()


@pytest.fixture(scope="module")
def ray_cluster():
    """A local Ray cluster shared by one test module (trainer runs start their workers on it)."""
    import ray

    ray.init(num_cpus=4, include_dashboard=False, logging_level="ERROR",
             runtime_env={"env_vars": {"OMP_NUM_THREADS": "1", "TRANSFORMERS_VERBOSITY": "error"}})
    yield
    ray.shutdown()
