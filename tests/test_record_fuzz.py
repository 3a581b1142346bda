"""Hostile records from an authenticated worker: every attack of issue 17's "Records" list is refused and
counted under its reason, seeded random mutations never raise in the learner (reply decoding, the gate,
then ``collate`` on whatever the gate admitted), and the pool checks each reply against the request it
sent. Loopback only, bounded in count and time."""

import copy
import json
import math
import random
import time
from types import SimpleNamespace

import pytest

from echo2_sdk.adapter import Example
from echo2_sdk.records import Omega, RecordLimits, Rollout, RolloutGroup, group_to_wire
from echo2_sdk.runtime.admission.gate import AdmissionGate
from echo2_sdk.runtime.learning.batching import collate
from echo2_sdk.runtime.rollout.base import SentRequest
from echo2_sdk.runtime.rollout.codec import MalformedReply, result_from_json

VOCAB, N, MAX_NEW = 100, 2, 6
PROMPT = (1, 2)
EXAMPLES = tuple(Example(id=f"e{i}", prompt=f"q{i}", answer="a") for i in range(3))
REQUEST = SentRequest(EXAMPLES, N)


def prompt_ids(example):
    """The learner's rendering of an asked example's prompt (here the same for every example)."""
    return PROMPT


def gate():
    return AdmissionGate(staleness=2, limits=RecordLimits(vocab_size=VOCAB, max_completion_tokens=MAX_NEW),
                         audit=SimpleNamespace(check=lambda group: True), prompt_ids=prompt_ids)


def rollout(key, completion=(3, 4)):
    return Rollout(prompt_ids=PROMPT, completion_ids=completion, reward=1.0, version=0,
                   omega=Omega((1,) * len(completion), key), sampler_logprobs=(-0.5,) * len(completion),
                   prompt_key=key, meta={"worker": "a"})


def wire(key="e0", n=N, **kw):
    return group_to_wire(RolloutGroup(key, 0, tuple(rollout(key, **kw) for _ in range(n)), worker_id="a"))


def reply(*groups) -> str:
    """A generate reply as a worker sends it: JSON text (NaN and Infinity are valid Python JSON)."""
    return json.dumps({"worker": "a", "groups": list(groups), "version": 0, "num_tokens": 4,
                       "t_generate_s": 0.1, "t_reward_s": 0.0, "t_throttle_s": 0.0})


def admit(g, text, request=REQUEST):
    return g.admit("a", result_from_json(text), newest_version=0, learner_version=0, request=request)


def train_batches(g):
    """``collate`` over everything the gate admitted: the learner's next step must be able to use it."""
    records = [r for _, _, grp in g.buffer._heap for r in grp.rollouts]
    for start in range(0, len(records), 64):
        collate(records[start:start + 64], pad_id=0)
    return len(records)


def edit(doc, index=0, **fields):
    """``doc`` with fields of its record ``index`` replaced (wire names: x, y, r, logprobs, mask, group, key)."""
    doc["rollouts"][index].update(fields)
    return doc


ATTACKS = {
    # name: (groups of one reply, reason, samples refused)
    "string token id": ([edit(wire(), y=["4", 4])], "malformed", N),
    "string log-prob": ([edit(wire(), logprobs=["-0.5", -0.5])], "malformed", N),
    "empty prompt": ([edit(edit(wire(), 0, x=[]), 1, x=[])], "empty_prompt", N),
    "reward 1e308": ([edit(wire(), r=1e308)], "out_of_range", 1),
    "reward 10**400 (an integer no float holds)": ([edit(wire(), r=10**400)], "non_finite", 1),
    "reward NaN": ([edit(wire(), r=math.nan)], "non_finite", 1),
    "log-prob -1e308": ([edit(wire(), logprobs=[-1e308, -0.5])], "out_of_range", 1),
    "masked-out log-prob -10**400": ([edit(wire(), mask=[1, 0], logprobs=[-0.5, -10**400])], "out_of_range", 1),
    "float token id": ([edit(wire(), y=[4.0, 4])], "malformed", N),
    "token id outside the vocabulary": ([edit(wire(), y=[VOCAB, 4])], "oversize", 1),
    "negative token id": ([edit(edit(wire(), 0, x=[-1, 2]), 1, x=[-1, 2])], "oversize", N),
    "token id of 2**70": ([edit(wire(), y=[2**70, 4])], "oversize", 1),
    "duplicate group": ([wire(), wire()], "duplicate_group", N),
    "group of 1": ([wire(n=1)], "group_size", 1),
    "group of 1,000": ([wire(n=1000)], "group_size", 1000),
    "group of none": ([wire(n=0)], "group_size", 1),
    "mixed group tags": ([edit(wire(), 1, group="e1")], "mixed_group", N),
    "a record of another prompt": ([edit(wire(), 1, key="e1")], "mixed_group", N),
    "5,000-token completion vs max_new_tokens 6": ([wire(completion=(5,) * 5000)], "oversize", N),
    "prompt ids differ from the request": ([edit(edit(wire(), 0, x=[9, 9]), 1, x=[9, 9])], "prompt_mismatch", N),
    "a group for an example not asked": ([wire("e9")], "unrequested", N),
    "t_generated a string": ([{**wire(), "t_generated": "soon"}], "malformed", N),
}


@pytest.mark.parametrize("name", list(ATTACKS))
def test_each_record_attack_is_refused_and_counted_under_its_reason(name):
    groups, reason, samples = ATTACKS[name]
    g = gate()
    out = admit(g, reply(*groups, wire("e2")))  # an honest group rides along and still gets in
    assert g.counters.reject_reasons == {reason: samples}, name
    assert out.rejected == samples
    kept = {grp.prompt_key: len(grp.rollouts) for _, _, grp in g.buffer._heap}
    assert kept["e2"] == N  # the honest group, whole
    assert train_batches(g) == out.accepted >= N


def test_a_group_resent_in_a_later_reply_is_refused_unless_that_request_asked_again():
    g = gate()
    admit(g, reply(wire("e0")), request=SentRequest(EXAMPLES[:1], N))
    admit(g, reply(wire("e0")), request=SentRequest(EXAMPLES[1:2], N))  # replayed: this request asked e1
    assert g.counters.reject_reasons == {"unrequested": N} and len(g.buffer) == 1
    # A prompt the stream hands out again (a new epoch) is asked again, and answered again.
    admit(g, reply(wire("e0")), request=SentRequest(EXAMPLES[:1], N))
    assert len(g.buffer) == 2
    # Asked twice in one request (the stream wrapped): two groups are fine, a third is a duplicate.
    admit(g, reply(wire("e1"), wire("e1"), wire("e1")), request=SentRequest((EXAMPLES[1],) * 2, N))
    assert g.counters.reject_reasons == {"unrequested": N, "duplicate_group": N} and len(g.buffer) == 4


# ---- seeded random mutations -------------------------------------------------------------------------
HOSTILE = [None, True, False, 0, -1, 1, 2**31, 2**63, 10**400, -10**400, 0.5, -0.0, 1e308, -1e308, math.nan,
           math.inf, -math.inf, "", "4", "x" * 300, [], [1], [[1]], {}, {"a": 1}, [None], ["4", 4], [1.5]]


def mutate(rng: random.Random, doc):
    """``doc`` with one random change deep inside: a value replaced by a hostile one, a key dropped, a
    list emptied, grown or shuffled."""
    path, node = [], doc
    while isinstance(node, (dict, list)) and node and (not path or rng.random() < 0.7):
        key = rng.choice(list(node)) if isinstance(node, dict) else rng.randrange(len(node))
        path.append((node, key))
        node = node[key]
    if not path:
        return copy.deepcopy(rng.choice(HOSTILE))
    parent, key = path[-1]
    roll = rng.random()
    if roll < 0.55:
        parent[key] = copy.deepcopy(rng.choice(HOSTILE))
    elif roll < 0.65 and isinstance(parent, dict):
        del parent[key]
    elif isinstance(node, list) and roll < 0.8:
        parent[key] = node * rng.choice([0, 2, 50])
    elif isinstance(node, list):
        parent[key] = rng.sample(node, len(node))
    else:
        parent[key] = copy.deepcopy(rng.choice(HOSTILE))
    return doc


FUZZ_INPUTS, FUZZ_SECONDS = 3000, 20.0


@pytest.mark.parametrize("level", ["groups", "reply"])
def test_seeded_random_records_never_raise_in_the_learner_and_every_refusal_is_counted(level):
    """``groups``: mutated wire groups inside a well-formed reply (the gate and collate see them);
    ``reply``: mutated whole replies (the codec sees them first; a refused reply is a worker error)."""
    rng = random.Random(17 if level == "groups" else 18)
    g = gate()
    tried = refused_replies = 0
    deadline = time.monotonic() + FUZZ_SECONDS
    while tried < FUZZ_INPUTS and time.monotonic() < deadline:
        tried += 1
        groups = [wire(ex.id) for ex in EXAMPLES]
        doc = json.loads(reply(*groups))
        for _ in range(rng.randint(1, 3)):
            if level == "groups":
                i = rng.randrange(len(groups))
                groups[i] = mutate(rng, groups[i])
                doc["groups"] = groups
            else:
                doc = mutate(rng, doc)
        try:
            text = json.dumps(doc)
        except (ValueError, TypeError, RecursionError):
            continue
        try:
            result = result_from_json(text)
        except MalformedReply:
            refused_replies += 1
            continue
        before = len(g.buffer)
        out = g.admit("a", result, newest_version=0, learner_version=0, request=REQUEST)  # must not raise
        # Nothing a worker sends grows the learner's state beyond what was asked ...
        assert len(g.buffer) - before <= len(EXAMPLES)
        # ... and every group it did not admit was counted under some reason.
        assert out.rejected >= len(result.groups) - len(out.arrived_versions)
    trained = train_batches(g)  # every admitted record goes through collate
    c = g.counters
    print(f"\nrecord fuzz [{level}]: {tried} inputs, {refused_replies} replies refused, "
          f"{c.rejected} samples refused by the gate {dict(c.reject_reasons)}, {c.accepted} samples admitted, "
          f"{trained} collated, crashes 0")
    assert tried >= 500 and "check_failed" not in c.reject_reasons  # a check that raised is a crash
    assert c.rejected > 0 and c.accepted > 0  # the mutations hit the checks, and honest groups still pass
    assert c.accepted == trained


def test_seeded_random_bytes_are_refused_by_the_reply_codec_and_nothing_else():
    """Byte-level damage (flips, cuts, splices) to a valid reply: the codec refuses it as malformed or
    decodes it (then the gate checks it); no other exception ever leaves it."""
    rng = random.Random(19)
    good = reply(*(wire(ex.id) for ex in EXAMPLES)).encode()
    g = gate()
    tried = refused = 0
    deadline = time.monotonic() + FUZZ_SECONDS
    while tried < FUZZ_INPUTS and time.monotonic() < deadline:
        tried += 1
        data = bytearray(good)
        for _ in range(rng.randint(1, 4)):
            at = rng.randrange(len(data))
            kind = rng.random()
            if kind < 0.5:
                data[at] = rng.randrange(256)
            elif kind < 0.75:
                del data[at:at + rng.randint(1, 40)]
            else:
                data[at:at] = rng.choice([b"9" * 400, b"[" * 50, b"NaN", b"-Infinity", b"\x00", b'"', b"1e999"])
        try:
            result = result_from_json(bytes(data))
        except MalformedReply:
            refused += 1
            continue
        g.admit("a", result, newest_version=0, learner_version=0, request=REQUEST)
    train_batches(g)
    print(f"\nreply bytes fuzz: {tried} inputs, {refused} refused by the codec, {g.counters.rejected} samples "
          f"refused by the gate, {g.counters.accepted} admitted, crashes 0")
    assert tried >= 500 and refused > 0 and "check_failed" not in g.counters.reject_reasons


def test_reply_documents_with_hostile_sizes_are_refused_not_kept():
    base = json.loads(reply(wire()))
    for doc, what in [({**base, "installed": {str(i): 1.0 for i in range(5000)}}, "installed"),
                      ({**base, "installed": {"1": "nan"}}, "installed"),
                      ({**base, "reward_status": {f"s{i}": 1 for i in range(1000)}}, "reward_status"),
                      ({**base, "reward_status": {"ok": -5}}, "reward_status"),
                      ({**base, "num_tokens": 1.5}, "num_tokens"),
                      ({**base, "num_tokens": 10**400}, "num_tokens")]:
        with pytest.raises(MalformedReply, match=what):
            result_from_json(json.dumps(doc))
    for text in ["[" * 100_000, '{"a": 1' + "0" * 5000 + "}"]:  # too deep; more digits than Python converts
        with pytest.raises(MalformedReply, match="not JSON"):
            result_from_json(text)


# ---- the pool remembers what it asked ------------------------------------------------------------------
def test_the_pool_hands_each_reply_back_with_the_request_it_answers(monkeypatch):
    from echo2_sdk.config import WorkerSpec
    from echo2_sdk.runtime.rollout import pool as pool_module
    from echo2_sdk.runtime.rollout.pool import RolloutPool, WorkerSlot

    replies = {}

    class Actor:
        class generate_wire:
            @staticmethod
            def remote(examples):
                ref = object()
                replies[ref] = reply(*(wire(e["id"]) for e in examples)).encode()
                return ref

    pool = RolloutPool.__new__(RolloutPool)  # only the bookkeeping: no Ray, no actors
    pool.slots = [WorkerSlot("a", Actor(), WorkerSpec("a"))]
    pool._ref_owner, pool._requests, pool._starting = {}, {}, {}
    pool._settings = SimpleNamespace(samples_per_prompt=N)
    monkeypatch.setattr(pool_module.ray, "wait", lambda refs, num_returns=1, timeout=None: (list(refs), []))
    monkeypatch.setattr(pool_module.ray, "get", lambda ref: replies[ref])
    pool.submit(pool.slots[0], list(EXAMPLES[:2]))
    pool.submit(pool.slots[0], [EXAMPLES[2]])
    finished = pool.collect(0)
    assert [f.request for f in finished] == [SentRequest(EXAMPLES[:2], N), SentRequest(EXAMPLES[2:], N)]
    assert pool._requests == {} and pool.slots[0].inflight == []  # nothing kept once answered
    g = gate()
    for f in finished:
        g.admit("a", f.result, newest_version=0, learner_version=0, request=f.request)
    assert g.counters.accepted == 3 * N and g.counters.rejected == 0


def test_honest_multi_turn_groups_pass_the_group_checks(tiny_tokenizer):
    """Multi-turn: the n episodes of an example share their prompt and tag, so an honest reply passes;
    the learner does not render their prompt (it comes from playing the environment)."""
    from echo2_sdk.registry import make_task
    from echo2_sdk.runtime.admission.request import PromptRenderer
    from echo2_sdk.runtime.rollout.backends.base import Completion, SamplingParams
    from echo2_sdk.runtime.rollout.base import GenerationResult
    from echo2_sdk.runtime.rollout.codec import result_to_json
    from echo2_sdk.runtime.rollout.episodes import run_episodes

    class Fold:
        def generate(self, prompts, n, params):
            ids = tuple(tiny_tokenizer.encode("fold", add_special_tokens=False))
            return [[Completion(ids, (-0.5,) * len(ids), "length") for _ in range(n)] for _ in prompts]

    adapter = make_task("poker", {"num_train": 4, "num_eval": 2, "num_sft": 0, "opponent": "rule:calling"})
    examples = tuple(adapter.examples("train")[:2])
    batch = run_episodes(adapter, Fold(), tiny_tokenizer, examples, 3, SamplingParams(1.0, 1.0, 8, seed=0),
                         version=0, worker="a")
    renderer = PromptRenderer(adapter, tiny_tokenizer)
    assert renderer(examples[0]) is None
    g = AdmissionGate(staleness=2, limits=RecordLimits(vocab_size=len(tiny_tokenizer)),
                      audit=SimpleNamespace(check=lambda group: True), prompt_ids=renderer)
    raw = GenerationResult("a", [group_to_wire(grp) for grp in batch.groups], 0, 1, 0.1, 0.0, 0.0)
    g.admit("a", result_from_json(result_to_json(raw)), newest_version=0, learner_version=0,
            request=SentRequest(examples, 3))
    assert g.counters.reject_reasons == {} and g.counters.accepted == 6
    assert train_batches(g) == 6


def test_a_check_that_raises_refuses_the_group_as_check_failed_and_the_learner_goes_on():
    def broken(example):
        raise RuntimeError("a bug in the learner's own rendering")

    g = AdmissionGate(staleness=2, limits=RecordLimits(vocab_size=VOCAB), audit=SimpleNamespace(check=lambda grp: True),
                      prompt_ids=broken)
    out = admit(g, reply(wire("e0"), wire("e1")))
    assert out.accepted == 0 and g.counters.reject_reasons == {"check_failed": 2 * N}
