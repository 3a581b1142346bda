"""Does a poker model read its hole cards? Its first preflop reply with the cards swapped, printed as JSON.

Takes the held-out deals where the agent opens as the small blind (nothing but the blinds in; the reply is
fold, call or raise), puts each hand of a fixed panel into the observation in place of the dealt one (the
env's own ``Hand: [..]`` text), and reads the model's next-token distribution at the reply's first token,
summed by action word. A model that reads its cards raises aces more often than seven-deuce; one that does
not gives every hand the same distribution. Beside it, the same split of the task's warm-start
demonstrations (what the warm start was shown), and how much the last hidden state moves when only the
cards change (relative L2 per layer, averaged over the deals).

    python benchmarks/poker_card_reading.py --model runs/NAME/base_model [--model runs/NAME] [--deals 32]
    python benchmarks/poker_card_reading.py --model runs/NAME --config runs/NAME/config.yaml

``--model`` takes what ``echo2 eval`` takes for a model agent (a model folder, a run's ``base_model``,
``runs/NAME/checkpoints/step_K`` or ``runs/NAME``); repeat it to compare models on the same deals.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from typing import Any

STRONG = ("As Ah", "Ks Kd", "Qh Qc", "Ac Kc", "Ad Qd")
WEAK = ("7c 2h", "8s 3d", "9h 4c", "6d 2s", "Tc 3h")
ACTIONS = ("fold", "check", "call", "bet", "raise", "all-in")
STRONG_BUCKETS = ("pair-high", "pair-low", "broadway-suited", "broadway-offsuit")
HAND_RE = re.compile(r"Hand: \[[^\]]*\]")
OPENING = ("You are SB. Street: preflop.", "To call: ")


def action_of(token_text: str) -> str | None:
    """The action word a reply starting with ``token_text`` names, if only one fits (a character-level
    tokenizer's ``c`` could start check or call: its mass is left out of every share).

    >>> action_of(" raise"), action_of("fold"), action_of("all"), action_of(" 40"), action_of("c")
    ('raise', 'fold', 'all-in', None, None)
    """
    word = token_text.strip().lower()
    fits = [action for action in ACTIONS if word and (action.startswith(word) or word.startswith(action))]
    return fits[0] if len(fits) == 1 else None


def opening_decisions(adapter, tokenizer, count: int) -> list[list[dict[str, str]]]:
    """Up to ``count`` held-out first observations where the agent opens as the small blind."""
    found = []
    for example in adapter.examples("eval"):
        messages = adapter.open_episode(example, tokenizer).messages
        first = messages[-1]["content"]
        if all(mark in first for mark in OPENING) and "History:" not in first and HAND_RE.search(first):
            found.append(messages)
            if len(found) == count:
                break
    return found


def parse_cards(text: str) -> tuple:
    """Cards from text as the env writes them (``[As, Ah]``) or bare (``As Ah``)."""
    from pokerkit import Card

    return tuple(Card.parse(text.strip("[]").replace(",", " ")))


def with_hand(messages: list[dict[str, str]], hand: str) -> list[dict[str, str]]:
    from echo2_sdk.envs.poker.hand import card_text

    cards = parse_cards(hand)
    shown = [dict(m) for m in messages]
    shown[-1]["content"] = HAND_RE.sub(f"Hand: {card_text(cards)}", shown[-1]["content"], count=1)
    return shown


def demonstration_split(adapter) -> dict[str, dict[str, float]]:
    """Shares of fold / call / raise among the sft split's opening decisions, strong vs weak starting hands
    (strong: the :data:`STRONG_BUCKETS` of ``hand_bucket``, a pair or two cards ten or higher)."""
    from echo2_sdk.envs.poker.strength import hand_bucket

    counts: dict[str, dict[str, int]] = {"strong": {}, "weak": {}}
    for example in adapter.examples("sft"):
        last = example.meta["messages"][-1]["content"]
        if not (all(mark in last for mark in OPENING) and "History:" not in last):
            continue
        strong = hand_bucket(parse_cards(HAND_RE.search(last).group(0)[len("Hand: "):])) in STRONG_BUCKETS
        action = action_of(example.answer.split()[0]) or "other"
        bucket = counts["strong" if strong else "weak"]
        bucket[action] = bucket.get(action, 0) + 1
    return {kind: {a: round(n / max(1, sum(c.values())), 3) for a, n in sorted(c.items())} | {"n": sum(c.values())}
            for kind, c in counts.items()}


def card_reading(spec: str, adapter, deals: int) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from echo2_sdk.chat import chat_token_ids
    from echo2_sdk.runtime.rollout.chat_policy import resolve_policy_path

    weights, tokenizer_path = resolve_policy_path(spec)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_path)
    model = AutoModelForCausalLM.from_pretrained(weights, dtype=torch.float32).eval()
    words = [action_of(t) for t in tokenizer.batch_decode([[i] for i in range(len(tokenizer))])]
    index = {a: torch.tensor([i for i, w in enumerate(words) if w == a], dtype=torch.long) for a in ACTIONS}
    decisions = opening_decisions(adapter, tokenizer, deals)
    if not decisions:
        raise SystemExit(f"no held-out opening decisions found for {spec!r}: is this a heads-up poker table?")

    def read(messages):
        ids = torch.tensor([chat_token_ids(tokenizer, messages)])
        with torch.no_grad():
            out = model(ids, output_hidden_states=True)
        probs = out.logits[0, -1].float().softmax(-1)
        shares = {a: float(probs[i].sum()) if len(i) else 0.0 for a, i in index.items()}
        return shares, [h[0, -1] for h in out.hidden_states]

    panel: dict[str, dict[str, float]] = {}
    moved = []
    for messages in decisions:
        states = {}
        for hand in STRONG + WEAK:
            shares, states[hand] = read(with_hand(messages, hand))
            for action, p in shares.items():
                panel.setdefault(hand, {}).setdefault(action, 0.0)
                panel[hand][action] += p / len(decisions)
        a, b = states[STRONG[0]], states[WEAK[0]]
        moved.append([float((x - y).norm() / x.norm().clamp_min(1e-12)) for x, y in zip(a[1:], b[1:])])

    def mean_of(hands, action):
        return sum(panel[h][action] for h in hands) / len(hands)

    aggressive = ("bet", "raise", "all-in")
    raise_strong = sum(mean_of(STRONG, a) for a in aggressive)
    raise_weak = sum(mean_of(WEAK, a) for a in aggressive)
    return {
        "model": spec,
        "decisions": len(decisions),
        "raise_share_strong": round(raise_strong, 4),
        "raise_share_weak": round(raise_weak, 4),
        "raise_gap": round(raise_strong - raise_weak, 4),
        "fold_share_strong": round(mean_of(STRONG, "fold"), 4),
        "fold_share_weak": round(mean_of(WEAK, "fold"), 4),
        "hidden_state_change_by_layer": [round(sum(col) / len(col), 5) for col in zip(*moved)],
        "panel": {h: {a: round(p, 4) for a, p in v.items() if p >= 5e-4} for h, v in panel.items()},
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", action="append", required=True, help="a model agent as echo2 eval takes it; repeatable")
    ap.add_argument("--config", help="a run's config.yaml: its task options (table, opponents, demonstrator)")
    ap.add_argument("--deals", type=int, default=32, help="held-out opening decisions to average over")
    args = ap.parse_args(argv)
    if args.deals < 1:
        ap.error(f"--deals {args.deals}: give at least 1")
    from echo2_sdk.registry import make_task

    options: dict[str, Any] = {}
    if args.config:
        from echo2_sdk.config import load_config

        cfg = load_config(args.config)
        if cfg.task.name != "poker":
            ap.error(f"--config {args.config} trains task {cfg.task.name!r}; this benchmark reads poker models")
        options = dict(cfg.task.options)
    adapter = make_task("poker", options, seed=0)
    report = {"demonstrations": demonstration_split(adapter),
              "models": [card_reading(spec, adapter, args.deals) for spec in args.model]}
    json.dump(report, sys.stdout, indent=1)
    print()


if __name__ == "__main__":
    main()
