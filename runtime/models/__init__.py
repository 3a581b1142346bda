"""Model code both planes share: the offline tiny Qwen3 builder and policy loading (``modeling``), the
log-prob convention of learner and samplers (``logprobs``), and shipping a local model folder to nodes
(``files``)."""
