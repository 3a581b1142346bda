"""Supervised warm start before RL, with TRL's SFTTrainer.

GRPO only learns from groups whose rewards differ; a random-init or off-format policy gets reward
0 everywhere and never moves (see /work/shared/platform-notes.md). A few hundred supervised steps
on a slice of problems that is disjoint from the RL prompts teach the answer format and give the
policy a non-zero success rate to improve on.
"""

from __future__ import annotations

import contextlib
import io
import logging
import os
import warnings

import torch

from echo2_sdk.runtime.models.modeling import resolve_dtype


def sft_warm_start(
    model_path: str,
    pairs: list[tuple[list[dict], str]],
    out_dir: str,
    *,
    epochs: float,
    lr: float,
    batch_size: int,
    seed: int,
    dtype: str = "float32",
) -> str:
    """Fine-tune `model_path` on (prompt messages, answer) pairs; save model + tokenizer to out_dir.

    Each pair becomes a conversational prompt-completion example
    {"prompt": messages, "completion": [{"role": "assistant", "content": answer}]}; the loss covers
    completion tokens only (the answer and the closing <|im_end|> the chat template adds, so the
    model learns to stop). Runs offline on CPU: no Hub, no trackers, no checkpoints. Returns out_dir.
    """
    if not pairs:
        raise ValueError("sft_warm_start needs at least one (messages, answer) pair, got none")
    for index, (messages, answer) in enumerate(pairs):
        if not isinstance(messages, list) or not isinstance(answer, str):
            raise TypeError(
                f"pair {index} must be (list of {{'role','content'}} dicts, str answer), got "
                f"({type(messages).__name__}, {type(answer).__name__})"
            )
    # Offline and quiet before TRL/transformers read their environment.
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from datasets import Dataset, disable_progress_bars
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging
    from trl import SFTConfig, SFTTrainer

    disable_progress_bars()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # Training pads on the right; the saved tokenizer is switched back to left (generation) below.
    tokenizer.padding_side = "right"
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=resolve_dtype(dtype))

    dataset = Dataset.from_list(
        [
            {"prompt": messages, "completion": [{"role": "assistant", "content": answer}]}
            for messages, answer in pairs
        ]
    )
    with warnings.catch_warnings(), _quiet_stdout_and_loggers():
        # SFTConfig itself warns about deprecated TrainingArguments fields it forwards.
        warnings.simplefilter("ignore")
        config = SFTConfig(
            output_dir=out_dir,
            num_train_epochs=epochs,
            learning_rate=lr,
            per_device_train_batch_size=batch_size,
            seed=seed,
            data_seed=seed,
            use_cpu=True,
            report_to="none",
            save_strategy="no",
            logging_strategy="no",
            disable_tqdm=True,
            completion_only_loss=True,
            max_length=None,  # the short chat examples never need truncation
            # TRL defaults both on: checkpointing recomputes the forward (~40% of step time
            # here) and bf16 autocast would train an fp32 CPU model in reduced precision.
            gradient_checkpointing=False,
            bf16=resolve_dtype(dtype) == torch.bfloat16,
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            dataloader_num_workers=0,
            push_to_hub=False,
        )
        trainer = SFTTrainer(
            model=model, args=config, train_dataset=dataset, processing_class=tokenizer
        )
        trainer.train()
    # Save the plain weights from the trained parameters (the trainer patches forward(), not them).
    trained = trainer.model
    trained.save_pretrained(out_dir)
    tokenizer.padding_side = "left"
    tokenizer.save_pretrained(out_dir)
    del trainer, trained, model
    return out_dir


@contextlib.contextmanager
def _quiet_stdout_and_loggers():
    """Silence Trainer's stdout banners and library INFO logs for the duration of a warm start."""
    quieted = [logging.getLogger(name) for name in ("trl", "transformers", "accelerate", "datasets")]
    previous = [logger.level for logger in quieted]
    for logger in quieted:
        logger.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for logger, level in zip(quieted, previous):
            logger.setLevel(level)


def completion_loss(model, tokenizer, pairs: list[tuple[list[dict], str]]) -> float:
    """Mean next-token cross-entropy over the completion tokens of `pairs` (for checking training).

    Builds prompt = chat template with generation prompt, completion = answer + <|im_end|>\\n,
    exactly what SFTTrainer trains on.
    """
    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for messages, answer in pairs:
            prompt_ids = _ids(tokenizer.apply_chat_template(messages, add_generation_prompt=True))
            full_ids = _ids(
                tokenizer.apply_chat_template(
                    messages + [{"role": "assistant", "content": answer}]
                )
            )
            ids = torch.tensor([full_ids])
            logits = model(input_ids=ids).logits[0, :-1].float()
            targets = ids[0, 1:]
            losses = torch.nn.functional.cross_entropy(logits, targets, reduction="none")
            completion_losses = losses[len(prompt_ids) - 1 :]
            total += float(completion_losses.sum())
            count += completion_losses.numel()
    return total / max(count, 1)


def _ids(rendered) -> list[int]:
    """apply_chat_template(tokenize=True) returns a BatchEncoding in transformers 5, a list before."""
    return list(rendered["input_ids"]) if hasattr(rendered, "keys") else list(rendered)
