"""A tokenizer fitted to one task: a small BPE vocabulary learned from the task's own text.

The tiny model's character tokenizer (:mod:`echo2_sdk.tiny_tokenizer`) spends one token per
character, so a poker or MOBA episode runs past the tiny model's 1,024 positions and an action
is 5-12 sampled characters that a barely trained model rarely gets all right. Fitted to the
task's system prompt, observations, legal actions and demonstrations, the same model sees an
action as 1-3 tokens and a whole episode in a few hundred.

The result has the char tokenizer's layout where it matters to the rest of echo2: ids 0-3 are
``<|endoftext|>`` (pad), ``<|im_start|>``, ``<|im_end|>`` (eos), ``<unk>``; the Qwen-style ChatML
chat template; left padding; and every printable-ASCII/newline character is in the alphabet, so
``decode(encode(s)) == s`` for any such text, not only for text seen in the corpus. Building is
deterministic: the same corpus and vocabulary size give the same ids.

:meth:`echo2_sdk.adapter.BaseTaskAdapter.tokenizer_corpus` yields a task's corpus; the runtime
builds and caches the tokenizer with the tiny model when ``model.tiny.tokenizer`` is ``task``.
"""

from __future__ import annotations

import hashlib
import json
import re
from typing import Iterable

from echo2_sdk.text_env import TEXT_CHARSET
from echo2_sdk.tiny_tokenizer import SPECIALS, UNK_TOKEN, chatml_tokenizer

DEFAULT_TASK_VOCAB_SIZE = 1024
"""An upper bound the poker and moba corpora do not reach (they stop at 904 and 740 tokens, once every
chunk they repeat is one token); 512 makes poker episodes ~4% longer. Small enough that the tiny
model's embedding stays a fraction of its weights (1,024 x 128 = 131k parameters)."""
MIN_TASK_VOCAB_SIZE = 128
"""The four specials and the printable-ASCII alphabet (96 symbols) must fit, with room to merge."""

# Pre-tokens are whitespace-delimited chunks with their leading space (" call", " 40..960",
# " hp102/135"), newlines and runs of other whitespace; BPE merges only inside a pre-token. Chunks
# rather than GPT-2's word/number/punctuation split: the game texts are dense with symbols
# ("you@3 hp102/135 L2"), and merging across them shortens a moba episode 5x instead of 2.2x.
# A newline is always a token of its own, so the newline that ends a chat turn's header never
# merges with the content after it (the assistant mask and the chat markers count that token).
# The whitespace alternatives leave a run's last space to the next chunk (GPT-2's "\s+(?!\S)").
_PRE_TOKEN_PATTERN = r" ?\S+|\n|[^\S\n]+(?!\S)|[^\S\n]+"
_ROLE_WORDS = ("system", "user", "assistant")
"""Rendered by the chat template after every ``<|im_start|>``: worth one token each, so the corpus
counts them once per text (about once per chat message, as often as a conversation shows them)."""
# Every number below 100, bare, with a leading space and zero-padded, twice (BPE's min_frequency):
# an amount the corpus never showed ("raise 537") then still splits into two pieces (" 5", "37"),
# not four characters, so a poker raise stays within 3 tokens for any amount up to 1,000.
_NUMBER_SEED = tuple(text for n in range(100) for text in (str(n), f" {n}", f"{n:02d}")) * 2


def build_task_tokenizer(corpus: Iterable[str], *, vocab_size: int = DEFAULT_TASK_VOCAB_SIZE,
                         atoms: str | None = None):
    """A ``transformers.PreTrainedTokenizerFast`` with a BPE vocabulary of at most ``vocab_size``
    tokens (specials included) learned from ``corpus`` (an iterable of texts), ChatML specials and
    the Qwen-style chat template of the tiny tokenizer.

    ``atoms``, a regular expression, splits the chunks further: each match is a piece BPE never
    merges with its neighbours, so a symbol the task composes (a card's rank, its suit) keeps one id
    wherever it occurs instead of vanishing into a whole-chunk token per context (``" [Ah,"``).
    Characters outside printable ASCII that occur in the corpus join the alphabet; any other one
    encodes as ``<unk>``, as with the char tokenizer.
    """
    if not MIN_TASK_VOCAB_SIZE <= vocab_size <= 65536:
        raise ValueError(f"vocab_size={vocab_size} must be in [{MIN_TASK_VOCAB_SIZE}, 65536]; "
                         f"e.g. {DEFAULT_TASK_VOCAB_SIZE}")
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    specials = list(SPECIALS)
    texts = [text for text in corpus if text]
    if not texts:
        raise ValueError("the tokenizer corpus is empty; the task yielded no text (see "
                         "BaseTaskAdapter.tokenizer_corpus)")
    backend = Tokenizer(models.BPE(unk_token=UNK_TOKEN, fuse_unk=False))
    chunks = pre_tokenizers.Split(Regex(_PRE_TOKEN_PATTERN), behavior="isolated")
    if atoms:
        try:
            re.compile(atoms)
        except re.error as exc:
            raise ValueError(f"tokenizer atoms {atoms!r} is not a regular expression ({exc}); "
                             r"give one like '[2-9TJQKA](?=[cdhs])'") from None
        chunks = pre_tokenizers.Sequence([chunks, pre_tokenizers.Split(Regex(atoms), behavior="isolated")])
    backend.pre_tokenizer = chunks
    # Tokens are raw text (spaces and newlines included), so concatenating them is the decoding.
    backend.decoder = decoders.Fuse()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=specials, show_progress=False,
        # The whole alphabet, seen in the corpus or not: every printable-ASCII text stays encodable.
        initial_alphabet=sorted(TEXT_CHARSET),
    )
    # Sorted so the corpus's order (e.g. a dict or set upstream) cannot change the merges' tie-breaks.
    backend.train_from_iterator(sorted(texts) + list(_ROLE_WORDS * max(2, len(texts)) + _NUMBER_SEED),
                                trainer=trainer)
    backend.add_special_tokens(specials)  # "<|im_start|>" in text is then one id, not BPE pieces
    return chatml_tokenizer(backend)


def fit_task_tokenizer(adapter, *, vocab_size: int = DEFAULT_TASK_VOCAB_SIZE):
    """:func:`build_task_tokenizer` on ``adapter.tokenizer_corpus()`` and ``adapter.tokenizer_atoms``
    (any task adapter)."""
    return build_task_tokenizer(adapter.tokenizer_corpus(), vocab_size=vocab_size,
                                atoms=getattr(adapter, "tokenizer_atoms", None))


def tokenizer_fingerprint(tokenizer) -> str:
    """Short hex digest of what decides a tokenizer's ids and rendering: its backend (vocabulary,
    merges, pre-tokenizer, decoder, added tokens), chat template and maximum length. Two tokenizers
    with the same fingerprint give the same ids for the same chat, so a model cache can key on it."""
    backend = json.loads(tokenizer.backend_tokenizer.to_str())
    payload = json.dumps({"backend": backend, "chat_template": tokenizer.chat_template,
                          "model_max_length": tokenizer.model_max_length}, sort_keys=True)
    return hashlib.sha256(payload.encode()).hexdigest()[:12]
