"""``aime24``: the 30 AIME 2024 problems, answers checked with math-verify.

Data comes through the ``datasets`` library: the Hub dataset ``options.dataset`` by default, or a
local JSONL / JSON / Parquet file (``options.path``) with fields ``problem`` and ``answer``
(``id`` optional; the row number is used without it). Offline machines must set the path.

Splits: AIME24 is too small to hold out anything, so every problem is in both ``train`` and
``eval`` (evaluating on the training problems measures fitting, not generalization) and ``sft`` is
empty (there are no worked solutions to warm start from).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from echo2_sdk.adapter import SPLITS, Example, TaskAdapter
from echo2_sdk.adapters.math_reward import math_verify_reward
from echo2_sdk.registry import register_task

DEFAULT_PROMPT_SUFFIX = "Please reason step by step, and put your final answer within \\boxed{}."
_LOCAL_BUILDERS = {".jsonl": "json", ".json": "json", ".parquet": "parquet"}
_REQUIRED_FIELDS = ("problem", "answer")


@register_task("aime24")
class Aime24Adapter(TaskAdapter):
    """AIME 2024; see the module docstring."""

    name = "aime24"

    @dataclass(frozen=True)
    class Options:
        dataset: str = "HuggingFaceH4/aime_2024"
        """Dataset name on the Hugging Face Hub (used when ``path`` is not set)."""
        path: str | None = None
        """Local .jsonl/.json/.parquet file with fields problem, answer (id optional); no network."""
        split: str = "train"
        """Split of the dataset to read (the Hub dataset ships everything in 'train')."""
        prompt_suffix: str = DEFAULT_PROMPT_SUFFIX
        """Instruction appended to every problem (empty string: none)."""

    def __init__(self, options=None, *, seed: int = 0) -> None:
        super().__init__(options, seed=seed)
        # Loaded on first use: a reward-only process (RewardGuard's child) never needs the data.
        self._examples: list[Example] | None = None

    # ----- data -------------------------------------------------------------------------------
    def examples(self, split: str) -> Sequence[Example]:
        if split not in SPLITS:
            raise ValueError(f"unknown split {split!r}; use one of {SPLITS}")
        if split == "sft":
            return []
        if self._examples is None:
            examples = [self._to_example(i, row) for i, row in enumerate(self._load_rows())]
            seen: set[str] = set()
            for example in examples:
                if example.id in seen:
                    raise ValueError(
                        f"AIME24 data has the id {example.id!r} twice; ids must be unique (drop the "
                        "'id' field to number rows instead)"
                    )
                seen.add(example.id)
            self._examples = examples
        return self._examples

    def _load_rows(self) -> Any:
        import datasets  # heavy import (~1 s), only where the data is actually read

        opts = self.options
        if opts.path is not None:
            path = Path(opts.path).expanduser()
            builder = _LOCAL_BUILDERS.get(path.suffix.lower())
            if builder is None:
                raise ValueError(
                    f"task.options.path={opts.path!r} has an unsupported extension; use one of "
                    f"{sorted(_LOCAL_BUILDERS)}"
                )
            if not path.is_file():
                raise FileNotFoundError(
                    f"task.options.path={opts.path!r} does not exist; point it at a local "
                    "JSONL/JSON/Parquet file with fields 'problem' and 'answer'"
                )
            # Naming the split after options.split lets any split name work for a single file.
            return datasets.load_dataset(
                builder, data_files={opts.split: str(path)}, split=opts.split
            )
        try:
            return datasets.load_dataset(opts.dataset, split=opts.split)
        except Exception as exc:  # network, auth, missing split... all end in the same advice
            raise RuntimeError(
                f"could not load the AIME24 dataset {opts.dataset!r} (split {opts.split!r}) from the "
                f"Hugging Face Hub: {type(exc).__name__}: {exc}. On a machine without network access, "
                "download the data elsewhere and set task.options.path to a local JSONL/JSON/Parquet "
                "file with fields 'problem' and 'answer' (e.g. task.options.path=aime24.jsonl)."
            ) from exc

    def _to_example(self, row_index: int, row: dict) -> Example:
        missing = [f for f in _REQUIRED_FIELDS if row.get(f) in (None, "")]
        if missing:
            raise ValueError(
                f"AIME24 row {row_index} lacks field(s) {missing} (it has {sorted(row)}); every row "
                "needs 'problem' and 'answer'"
            )
        problem = str(row["problem"]).strip()
        suffix = self.options.prompt_suffix
        row_id = row.get("id")
        return Example(
            id=f"aime24:{row_index if row_id in (None, '') else row_id}",
            prompt=f"{problem}\n\n{suffix}" if suffix else problem,
            answer=str(row["answer"]).strip(),
            meta={"url": row.get("url") or ""},
        )

    # ----- reward -----------------------------------------------------------------------------
    def reward(self, example: Example, completion_text: str) -> float:
        return math_verify_reward(example.answer, completion_text)
