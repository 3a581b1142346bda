"""The tiny model's tokenizer: character-level, with ChatML turn markers and a Qwen-style chat template.

It is the one tokenizer that needs no download, so the SDK's checks (``echo2 check --tokenizer tiny``),
the tests a generated task ships with and the runtime's ``tiny-qwen3`` model all build it from here.
The SDK itself never reads these markers as literals: it derives them from a tokenizer's chat template
(:func:`echo2_sdk.chat.chat_markers`), so the same code serves any chat model.
"""

from __future__ import annotations

import string

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"  # end of a chat turn; the model's eos
# WordLevel needs an id for characters outside its vocabulary (non-ASCII text).
UNK_TOKEN = "<unk>"
SPECIALS = (PAD_TOKEN, IM_START, IM_END, UNK_TOKEN)
"""The tiny tokenizers' special tokens, ids 0-3 in this order."""
MODEL_MAX_LENGTH = 1024
"""The tiny model's context (its max_position_embeddings); both tiny tokenizers declare it."""

# Qwen's ChatML layout without the <think> handling: every message is
# "<|im_start|>{role}\n{content}<|im_end|>\n"; the generation prompt opens an assistant turn.
QWEN_STYLE_CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


def build_tiny_tokenizer():
    """Character-level tokenizer over printable ASCII plus newline, with ChatML special tokens.

    Ids 0-3 are `<|endoftext|>` (pad), `<|im_start|>`, `<|im_end|>` (eos), `<unk>`; then one id
    per character. decode(encode(s)) == s for any printable-ASCII/newline string.
    Returns a ``transformers.PreTrainedTokenizerFast``.
    """
    # Imported here: `import echo2_sdk.tiny_tokenizer` stays cheap for code that only reads the markers.
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    specials = list(SPECIALS)
    characters = sorted(set(string.printable) - set("\t\r\x0b\x0c"))  # printable ASCII + " " + "\n"
    vocab = {token: index for index, token in enumerate(specials + characters)}
    backend = Tokenizer(models.WordLevel(vocab=vocab, unk_token=UNK_TOKEN))
    # Every character is its own pre-token ([\s\S] rather than ".", which skips newlines).
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    # Fuse concatenates tokens on decode (the default decoder would join them with spaces).
    backend.decoder = decoders.Fuse()
    # Registering the specials as added tokens makes "<|im_start|>" in text one id, not 12 chars.
    backend.add_special_tokens(specials)
    return chatml_tokenizer(backend)


def chatml_tokenizer(backend):
    """Wrap a ``tokenizers.Tokenizer`` whose specials are ``SPECIALS`` (ids 0-3) as the tiny models'
    ``PreTrainedTokenizerFast``: pad/eos/unk, left padding, the context length and the chat template."""
    from transformers import PreTrainedTokenizerFast

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        pad_token=PAD_TOKEN,
        eos_token=IM_END,
        unk_token=UNK_TOKEN,
        additional_special_tokens=[IM_START],
        padding_side="left",
        model_max_length=MODEL_MAX_LENGTH,
        clean_up_tokenization_spaces=False,  # decoding must give back the exact text, spaces included
    )
    tokenizer.chat_template = QWEN_STYLE_CHAT_TEMPLATE
    return tokenizer
