import os

import pytest
import torch

# Two cores are shared by the learner, workers and pytest: keep each test single-threaded.
torch.set_num_threads(1)
os.environ.setdefault("OMP_NUM_THREADS", "1")

SHARED_DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")


@pytest.fixture(scope="session")
def tiny_tokenizer():
    from echo2_sdk.runtime.modeling import build_tiny_tokenizer

    return build_tiny_tokenizer()
