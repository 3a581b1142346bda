"""Chat-template markers are read off the tokenizer, so templates other than ChatML work too."""

import pytest

from echo2_sdk.chat import chat_markers, chat_token_ids
from echo2_sdk.env import ChatEpisode, TextEnv
from echo2_sdk.signals import assistant_mask
from echo2_sdk.tiny_tokenizer import IM_END, IM_START, PAD_TOKEN, build_tiny_tokenizer

# Another layout over the same vocabulary: "<|im_start|>role: content<|endoftext|>", no newlines.
COLON_TEMPLATE = (
    "{%- for m in messages %}{{- '<|im_start|>' + m['role'] + ': ' + m['content'] + '<|endoftext|>' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant: ' }}{%- endif %}"
)
PLAIN_TEMPLATE = (
    "{%- for m in messages %}{{- m['role'] + ': ' + m['content'] + '\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- 'assistant: ' }}{%- endif %}"
)


class FindTheDigit(TextEnv):
    """The episode seed's last digit is the secret; two guesses."""

    def _reset_episode(self, episode_seed, options):
        self.secret, self.left = str(episode_seed % 10), 2
        return "Guess a digit.", {}

    def _step_text(self, action):
        self.left -= 1
        hit = action.strip() == self.secret
        return ("Correct." if hit else "Wrong."), float(hit), hit, not hit and self.left == 0, {}

    def legal_actions(self):
        return [] if self.done else [str(d) for d in range(10)]


def _tokenizer(template: str | None = None):
    tok = build_tiny_tokenizer()
    if template is not None:
        tok.chat_template = template
    return tok


def test_chatml_markers_of_the_tiny_tokenizer():
    tok = _tokenizer()
    markers = chat_markers(tok)
    assert (markers.turn_start_id, markers.turn_end_id) == tuple(tok.convert_tokens_to_ids([IM_START, IM_END]))
    assert markers.header_end_id == tok.encode("\n", add_special_tokens=False)[0]


def test_markers_follow_the_template_not_chatml():
    tok = _tokenizer(COLON_TEMPLATE)
    markers = chat_markers(tok)
    assert markers.turn_end_id == tok.convert_tokens_to_ids(PAD_TOKEN)
    assert markers.header_end_id == tok.encode(" ", add_special_tokens=False)[0]
    messages = [{"role": "system", "content": "Add."}, {"role": "user", "content": "1+1"},
                {"role": "assistant", "content": "2"}, {"role": "user", "content": "2+2"},
                {"role": "assistant", "content": "4"}]
    ids = chat_token_ids(tok, messages, add_generation_prompt=False)
    mask = assistant_mask(ids, im_start_id=markers.turn_start_id, im_end_id=markers.turn_end_id,
                          newline_id=markers.header_end_id)
    trained = tok.decode([t for t, m in zip(ids, mask) if m], skip_special_tokens=False)
    assert trained == f"2{PAD_TOKEN}4{PAD_TOKEN}"


def test_chat_episode_closes_turns_with_the_templates_marker():
    tok = _tokenizer(COLON_TEMPLATE)
    episode = ChatEpisode(FindTheDigit(), tok, episode_seed=13, system_prompt="Guess.", final_observation=True)
    episode.submit_text("9")
    episode.submit_text("3")
    assert episode.done and episode.total_reward == 1.0 and episode.messages[-1]["content"] == "Correct."
    assert episode.prompt_ids + episode.completion_ids == chat_token_ids(tok, episode.messages, add_generation_prompt=False)
    trained = [t for t, m in zip(episode.completion_ids, episode.loss_mask) if m]
    assert tok.decode(trained, skip_special_tokens=False) == f"9{PAD_TOKEN}3{PAD_TOKEN}"


def test_a_template_without_marker_tokens_is_refused_with_the_reason():
    with pytest.raises(ValueError, match=r"opens a turn with 'assistant: '.*ordinary text .*not a marker token"):
        chat_markers(_tokenizer(PLAIN_TEMPLATE))
