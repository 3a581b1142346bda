"""``ChatEpisode``: one episode of a text environment as a token-level chat, built for a sampler.

Where a turn closes and the next one opens is read off the tokenizer's chat template
(:mod:`echo2_sdk.chat`), never spelled as literals here.
"""

from __future__ import annotations

from typing import Any, Sequence

from echo2_sdk.chat import chat_markers, encode_text, render_chat, turn_suffix
from echo2_sdk.text_env import TextEnv


class ChatEpisode:
    """One episode of a :class:`TextEnv` as a chat, built token by token for a sampler.

    The conversation is ``[system], user(obs_0), assistant(a_0), user(obs_1), ...``. ``prompt_ids``
    is the chat template of the system and first user message plus the assistant header; the
    completion then grows by each turn's *sampled* token ids (loss mask 1, sampler logprobs kept;
    never re-tokenized from text) and the template text between turns (the turn's closing, the next
    user turn and the next assistant header; mask 0, logprob 0.0). The model always conditions on
    exactly the tokens it sampled, and every per-token list stays aligned to ``completion_ids`` (the
    ``Rollout`` convention).

    Loop: ``while not ep.done: ids, lps, finish = sample(ep.context_ids); ep.submit(ids, lps)``.
    """

    def __init__(self, env: TextEnv, tokenizer, episode_seed: int, *, system_prompt: str | None = None,
                 options: dict[str, Any] | None = None, final_observation: bool = False) -> None:
        self.env, self.tokenizer = env, tokenizer
        self.final_observation = final_observation
        """Append the closing observation as a last user turn (bookkeeping text, mask 0)."""
        obs, info = env.begin_episode(episode_seed, options)
        self.messages: list[dict[str, str]] = [{"role": "system", "content": system_prompt}] if system_prompt else []
        self.messages.append({"role": "user", "content": obs})
        self.prompt_ids = encode_text(tokenizer, render_chat(tokenizer, self.messages, True))
        self.completion_ids: list[int] = []
        self.loss_mask: list[int] = []
        self.logprobs: list[float] = []
        self.rewards: list[float] = []
        self.infos: list[dict[str, Any]] = [info]
        self.done = False
        self._opening_tokens = 0
        self.stop_reason: str | None = None
        """``terminated``, ``truncated`` (env limit) or the reason given to :meth:`stop`."""
        self._eos_id = chat_markers(tokenizer).turn_end_id
        """The token that closes a turn: a sampled reply ending with it is complete."""

    @property
    def context_ids(self) -> list[int]:
        """The prompt for the next assistant turn: ``prompt_ids + completion_ids``."""
        return self.prompt_ids + self.completion_ids

    def submit(self, token_ids: Sequence[int], logprobs: Sequence[float] | None = None) -> str:
        """Record one sampled assistant turn, step the env with its text; returns the text."""
        if self.done:
            raise RuntimeError(f"the episode is over ({self.stop_reason}); open a new ChatEpisode")
        token_ids = list(token_ids)
        logprobs = [0.0] * len(token_ids) if logprobs is None else [float(x) for x in logprobs]
        if len(logprobs) != len(token_ids):
            raise ValueError(f"{len(logprobs)} logprobs for {len(token_ids)} sampled tokens")
        text = self.tokenizer.decode(token_ids, skip_special_tokens=True)
        obs, reward, terminated, truncated, info = self.env.step(text)
        self.rewards.append(reward)
        self.infos.append(info)
        self.messages.append({"role": "assistant", "content": text})
        if terminated or truncated:
            self.done, self.stop_reason = True, "terminated" if terminated else "truncated"
        if not self.done or self.final_observation:
            self.messages.append({"role": "user", "content": obs})
        closing, opening = turn_suffix(self.tokenizer, obs if self.messages[-1]["role"] == "user" else None,
                                        generation_prompt=not self.done)
        if token_ids and token_ids[-1] == self._eos_id:
            eos_text = self.tokenizer.decode([self._eos_id], skip_special_tokens=False)
            closing = closing.removeprefix(eos_text)  # the model closed its turn itself
        opening_ids = encode_text(self.tokenizer, opening) if opening else []
        between = encode_text(self.tokenizer, closing) + opening_ids
        self._opening_tokens = 0 if self.done else len(opening_ids)
        self.completion_ids += token_ids + between
        self.loss_mask += [1] * len(token_ids) + [0] * len(between)
        self.logprobs += logprobs + [0.0] * len(between)
        return text

    def submit_text(self, text: str) -> str:
        """Submit a reply given as text (a scripted or API policy): tokenized as if sampled, logprobs 0."""
        return self.submit(encode_text(self.tokenizer, text) + [self._eos_id])

    def stop(self, reason: str) -> None:
        """End the conversation early (e.g. ``"length"``: the next prompt would not fit the context)."""
        if self.done:
            return
        self.done, self.stop_reason = True, reason
        if self._opening_tokens:  # drop the unanswered user turn and assistant header
            del self.completion_ids[-self._opening_tokens:], self.loss_mask[-self._opening_tokens:]
            del self.logprobs[-self._opening_tokens:]
            self.messages.pop()
            self._opening_tokens = 0

    @property
    def total_reward(self) -> float:
        return float(sum(self.rewards))
