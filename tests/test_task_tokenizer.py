"""The task-fitted tiny tokenizer: lossless on any ASCII text, deterministic, short actions and episodes,
the char tokenizer's ChatML layout, and a cache folder of its own for the model built with it."""

from __future__ import annotations

import random
import string
from pathlib import Path

import pytest

from echo2_sdk.adapters.moba import MobaAdapter
from echo2_sdk.adapters.poker import PokerAdapter
from echo2_sdk.chat import chat_markers, chat_token_ids, render_chat
from echo2_sdk.config import ConfigError, TinyModelConfig, load_config
from echo2_sdk.records import validate_rollout
from echo2_sdk.task_tokenizer import build_task_tokenizer, fit_task_tokenizer, tokenizer_fingerprint
from echo2_sdk.text_env import TEXT_CHARSET
from echo2_sdk.tiny_tokenizer import IM_END, IM_START, PAD_TOKEN, UNK_TOKEN, build_tiny_tokenizer

TASKS = {"poker": PokerAdapter, "moba": MobaAdapter}
TINY = dict(hidden_size=32, num_layers=1, num_heads=2, num_kv_heads=1, intermediate_size=64)


def encode(tok, text: str) -> list[int]:
    return list(tok.encode(text, add_special_tokens=False))


@pytest.fixture(scope="module")
def fitted():
    return {name: fit_task_tokenizer(cls()) for name, cls in TASKS.items()}


@pytest.fixture(scope="module")
def char():
    return build_tiny_tokenizer()


def random_ascii(rng: random.Random, length: int) -> str:
    return "".join(rng.choice(TEXT_CHARSET) for _ in range(length))


@pytest.mark.parametrize("name", sorted(TASKS))
def test_any_printable_ascii_text_round_trips(fitted, name):
    tok = fitted[name]
    rng = random.Random(7)
    texts = [random_ascii(rng, rng.randrange(1, 80)) for _ in range(300)]
    texts += ["", " ", "\n", "\n\n \n", "  call  ", "raise 1234567", "~`{|}", string.printable[:95],
              "hit c17\n\ncast 1 hero ", "x" * 500]
    for text in texts:
        ids = encode(tok, text)
        assert UNK_TOKEN not in tok.convert_ids_to_tokens(ids), repr(text)
        assert tok.decode(ids) == text, repr(text)
    # Outside the alphabet: <unk>, as with the char tokenizer (and dropped when decoding).
    assert tok.convert_ids_to_tokens(encode(tok, "\u00e9")) == [UNK_TOKEN]


def test_same_corpus_same_tokenizer_and_a_different_one_differs():
    corpus = list(PokerAdapter().tokenizer_corpus())
    first, second = build_task_tokenizer(corpus), build_task_tokenizer(list(reversed(corpus)))
    assert first.get_vocab() == second.get_vocab()
    assert tokenizer_fingerprint(first) == tokenizer_fingerprint(second)
    text = corpus[1] + "\nraise 537"
    assert encode(first, text) == encode(second, text)
    smaller = build_task_tokenizer(corpus, vocab_size=256)
    assert len(smaller) == 256 and tokenizer_fingerprint(smaller) != tokenizer_fingerprint(first)
    # The corpus is the task's, not the run's: another adapter seed fits the same tokenizer.
    assert list(PokerAdapter(seed=5).tokenizer_corpus()) == corpus
    with pytest.raises(ValueError, match="vocab_size"):
        build_task_tokenizer(corpus, vocab_size=64)
    with pytest.raises(ValueError, match="empty"):
        build_task_tokenizer([])


def test_atoms_keep_one_id_wherever_they_occur(fitted):
    """Poker's card ranks and suits are atoms: an ace is one id as a first, a last or a board card (whole
    chunks gave " [Ah," and " Ah]," unrelated ids, and no tiny model learned to read its cards)."""
    tok = fitted["poker"]

    def pieces(text):
        return tok.convert_ids_to_tokens(encode(tok, text))

    hand = pieces("Hand: [Ah, Ad], Board: [Kc, As, 7h], Pot: 20")
    assert hand.count("A") == 3 and hand.count("h") == 2 and "K" in hand and "7" in hand
    assert pieces("Hand: [Ah, Ad], Board")[1:-1] == [" [", "A", "h", ",", " ", "A", "d", "],"]
    # Only cards: words with those letters ("Hand", "raise 20..1000", "check") stay whole chunks.
    assert pieces(" check") == [" check"] and pieces("Hand:") == ["Hand:"]
    # Without atoms the same corpus merges each card with its brackets.
    whole = build_task_tokenizer(PokerAdapter().tokenizer_corpus())
    assert " [Ah," in whole.convert_ids_to_tokens(encode(whole, "Hand: [Ah, Ad]"))
    assert tokenizer_fingerprint(whole) != tokenizer_fingerprint(tok)
    with pytest.raises(ValueError, match="not a regular expression"):
        build_task_tokenizer(["a b"], atoms="[2-9")


def _offered_and_played_actions(adapter, episodes: int) -> set[str]:
    """Every legal action offered, and every reply played, in ``episodes`` eval episodes (seeds the
    corpus never played) by the demonstrator and by a rule bot of another style."""
    actions: set[str] = set()
    bots = {"poker": ("rule:random", "rule:lag"), "moba": ("rule:random", "rule:pusher")}[adapter.name]
    for example in list(adapter.examples("eval"))[:episodes]:
        for bot in bots:
            log = adapter.play_episode(example, bot).log
            env = adapter.env_for(example)  # replayed to see what was legal at every decision
            env.begin_episode(log.episode_seed)
            for turn in log.turns:
                actions |= set(env.legal_actions()) | {turn.action}
                env.step(turn.action)
    return actions


@pytest.mark.parametrize("name", sorted(TASKS))
def test_actions_are_one_to_three_tokens(fitted, char, name):
    tok, adapter = fitted[name], TASKS[name]()
    actions = _offered_and_played_actions(adapter, 24)
    assert len(actions) >= 8
    lengths = {a: len(encode(tok, a)) for a in actions}
    assert max(lengths.values()) <= 3, {a: n for a, n in lengths.items() if n > 3}
    # Mostly 1-2 tokens ("hit c29", a creep the corpus saw rarely, is 3; against poker's default pool the
    # raise sizes vary: "bet 490" is 3; 25 of 40 poker actions are 1-2); 4-11 with the char tokenizer.
    assert sum(n <= 2 for n in lengths.values()) >= 0.6 * len(lengths)
    assert max(len(encode(char, a)) for a in actions) >= 7
    # Amounts and creeps the corpus may never have shown still stay within 3 tokens.
    unseen = ([f"{verb} {n}" for verb in ("raise", "bet", "call") for n in range(1, 1001)] if name == "poker"
              else [f"hit c{n}" for n in range(1, 100)])
    assert max(len(encode(tok, a)) for a in unseen) <= 3


@pytest.mark.parametrize("name, at_least", [("poker", 3.0), ("moba", 4.0)])
def test_turns_and_episodes_are_several_times_shorter(fitted, char, name, at_least):
    """Measured (64 eval episodes): an observation+action turn is 3.9x (poker) and 5.1x (moba) fewer tokens
    at least, 4.1x and 5.3x on average; whole episodes 847 -> 195 (poker) and 1470 -> 286 (moba) tokens."""
    tok, adapter = fitted[name], TASKS[name]()
    longest = {"char": 0, "task": 0}
    for example in list(adapter.examples("eval"))[:16]:
        episode = adapter.play_episode(example, adapter.demonstrators[0][0])  # the mixture's first style
        for turn in episode.log.turns:
            text = f"{IM_START}user\n{turn.observation}{IM_END}\n{IM_START}assistant\n{turn.action}{IM_END}\n"
            assert len(encode(char, text)) >= at_least * len(encode(tok, text)), text
        messages = list(episode.messages)
        longest["char"] = max(longest["char"], len(chat_token_ids(char, messages, add_generation_prompt=False)))
        longest["task"] = max(longest["task"], len(chat_token_ids(tok, messages, add_generation_prompt=False)))
    assert longest["task"] * at_least <= longest["char"]
    assert longest["task"] < tok.model_max_length // 2  # a whole episode fits the tiny model's context


def test_the_chat_layout_is_the_char_tokenizers(fitted, char):
    tok = fitted["poker"]
    for special in (PAD_TOKEN, IM_START, IM_END, UNK_TOKEN):
        assert tok.convert_tokens_to_ids(special) == char.convert_tokens_to_ids(special)
    assert (tok.pad_token, tok.eos_token, tok.unk_token) == (char.pad_token, char.eos_token, char.unk_token)
    assert tok.padding_side == "left" and tok.model_max_length == char.model_max_length
    messages = [{"role": "system", "content": "rules"}, {"role": "user", "content": "\nLegal: fold | call 20"},
                {"role": "assistant", "content": "\n call 20"}, {"role": "user", "content": " next"}]
    for generation_prompt in (True, False):
        text = render_chat(tok, messages, generation_prompt)
        assert text == render_chat(char, messages, generation_prompt)
        ids = chat_token_ids(tok, messages, add_generation_prompt=generation_prompt)
        assert tok.decode(ids, skip_special_tokens=False) == text
    markers, char_markers = chat_markers(tok), chat_markers(char)
    assert (markers.turn_start_id, markers.turn_end_id) == (char_markers.turn_start_id, char_markers.turn_end_id)
    assert tok.convert_ids_to_tokens(markers.header_end_id) == "\n"
    # The header's newline stays one token even when the content starts with whitespace.
    ids = chat_token_ids(tok, messages, add_generation_prompt=False)
    starts = [i for i, t in enumerate(ids) if t == markers.turn_start_id]
    assert all(ids[i + 2] == markers.header_end_id for i in starts)
    for role in ("system", "user", "assistant"):
        assert len(encode(tok, role)) == 1


def test_token_level_episodes_match_the_text_level_ones(fitted):
    for name, tok in fitted.items():
        adapter = TASKS[name]({"num_train": 3, "num_eval": 1})
        for example in adapter.examples("train"):
            text_episode = adapter.play_episode(example, "rule:random")
            replies = iter([m["content"] for m in text_episode.messages if m["role"] == "assistant"])
            session = adapter.open_episode(example, tok)
            while not session.done:
                session.submit_text(next(replies))
            tokens = adapter.episode_to_tokens(text_episode, tok)
            assert session.prompt_ids == tokens.prompt_ids
            assert session.completion_ids == tokens.completion_ids and session.loss_mask == tokens.loss_mask
            assert validate_rollout(adapter.to_rollout(session, example=example, version=0), newest_version=0) is None


def test_each_tokenizer_gets_its_own_cached_model(tmp_path, fitted, char):
    from echo2_sdk.runtime.models.modeling import ensure_tiny_from_config, ensure_tiny_qwen3, load_policy

    char_path = Path(ensure_tiny_qwen3(str(tmp_path), **TINY))
    poker_path = Path(ensure_tiny_qwen3(str(tmp_path), tokenizer=fitted["poker"], **TINY))
    moba_path = Path(ensure_tiny_qwen3(str(tmp_path), tokenizer=fitted["moba"], **TINY))
    assert len({char_path, poker_path, moba_path}) == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in (char_path, poker_path, moba_path))
    assert char_path.name.endswith(f"-t{tokenizer_fingerprint(char)}")
    # The run's config rebuilds the poker tokenizer from the task and finds the same folder, unchanged.
    stamp = (poker_path / "model.safetensors").stat().st_mtime_ns
    tiny = TinyModelConfig(**TINY, tokenizer="task")
    assert Path(ensure_tiny_from_config(tiny, PokerAdapter(), str(tmp_path))) == poker_path
    assert (poker_path / "model.safetensors").stat().st_mtime_ns == stamp
    assert Path(ensure_tiny_from_config(TinyModelConfig(**TINY), None, str(tmp_path))) == char_path
    model, loaded = load_policy(str(poker_path))
    assert model.config.vocab_size == len(fitted["poker"]) < model.config.max_position_embeddings
    assert load_policy(str(char_path))[0].config.vocab_size == len(char)
    text = "Legal: fold | call 20 | raise 40..960\nraise 537 "
    assert encode(loaded, text) == encode(fitted["poker"], text) and loaded.decode(encode(loaded, text)) == text
    assert loaded.chat_template == fitted["poker"].chat_template and loaded.padding_side == "left"
    with pytest.raises(ValueError, match="no task adapter"):
        ensure_tiny_from_config(tiny, None, str(tmp_path))


def test_config_field():
    assert TinyModelConfig().tokenizer == "char"
    cfg = load_config(None, ["task.name=poker", "model.tiny.tokenizer=task", "model.tiny.task_vocab_size=512"])
    assert (cfg.model.tiny.tokenizer, cfg.model.tiny.task_vocab_size) == ("task", 512)
    with pytest.raises(ConfigError, match="not one of"):
        load_config(None, ["model.tiny.tokenizer=bpe"])
    with pytest.raises(ConfigError, match="task_vocab_size"):
        load_config(None, ["model.tiny.task_vocab_size=64"])
    for example in ("poker", "moba"):  # the multi-turn examples fit their tokenizer; arith keeps characters
        assert load_config(str(Path(__file__).parents[1] / "examples" / f"{example}.yaml")).model.tiny.tokenizer == "task"
    assert load_config(str(Path(__file__).parents[1] / "examples" / "quickstart.yaml")).model.tiny.tokenizer == "char"


def test_the_default_corpus_serves_single_turn_and_generated_multi_turn_tasks(tmp_path):
    from echo2_sdk.adapters.arith import ArithAdapter
    from echo2_sdk.registry import get_task_class
    from echo2_sdk.scaffold import new_task

    arith = ArithAdapter()
    tok = fit_task_tokenizer(arith, vocab_size=256)
    example = arith.examples("eval")[0]
    prompt = render_chat(tok, arith.build_messages(example), True)
    assert tok.decode(encode(tok, prompt), skip_special_tokens=False) == prompt

    new_task("tokgame", "multi-turn", tmp_path / "tokgame")
    task = get_task_class(f"{tmp_path}/tokgame/tokgame_task.py:TokgameTask")()
    corpus = list(task.tokenizer_corpus())
    tok = build_task_tokenizer(corpus)
    env = task.make_env()
    obs, info = env.begin_episode(1)
    assert obs in corpus and info["legal_actions"]
    assert all(len(encode(tok, action)) <= 2 for action in info["legal_actions"])
    assert len(encode(tok, obs)) * 2 <= len(obs)


def test_fitting_a_tokenizer_needs_neither_ray_nor_the_runtime():
    import subprocess
    import sys

    code = ("import sys; import echo2_sdk.task_tokenizer as t; assert 'transformers' not in sys.modules; "
            "from echo2_sdk.adapters.moba import MobaAdapter; tok = t.fit_task_tokenizer(MobaAdapter()); "
            "assert len(tok) > 200; "
            "bad = [m for m in sys.modules if m == 'ray' or m.startswith(('ray.', 'echo2_sdk.runtime'))]; "
            "assert not bad, bad")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_echo2_check_uses_the_configs_fitted_tokenizer(monkeypatch, capsys):
    import echo2_sdk.task_tokenizer as task_tokenizer
    from echo2_sdk.runtime.cli import main

    fitted_for: list[str] = []
    real = task_tokenizer.fit_task_tokenizer

    def spy(adapter, **kwargs):
        fitted_for.append(adapter.name)
        return real(adapter, **kwargs)

    monkeypatch.setattr(task_tokenizer, "fit_task_tokenizer", spy)
    moba = str(Path(__file__).parents[1] / "examples" / "moba.yaml")
    assert main(["check", "--config", moba, "--set", "model.tiny.tokenizer=task", "--episodes", "1",
                 "--max-examples", "2"]) == 0
    assert fitted_for == ["moba"] and "0 failed" in capsys.readouterr().out
    assert main(["check", "--config", moba, "--set", "model.tiny.tokenizer=char", "--episodes", "1",
                 "--max-examples", "2"]) == 0  # characters
    assert fitted_for == ["moba"]
