"""Two small GPT-2s trained independently on the same text, saved as Hugging Face folders.

Writes ``corpus.txt`` (English text: Debian's fortunes when the ``fortunes`` package is
installed, else the Python Language Reference that every Python carries in its standard
library, ``pydoc_data.topics``), a byte-level BPE tokenizer trained on it, and ``gpt2-a/`` and
``gpt2-b/`` (``save_pretrained`` folders, the tokenizer in each) holding two GPT-2s of the same
shape trained from different seeds: the two checkpoints a user of ``lmc --hf-model`` brings.
Needs ``pip install 'lmc[hf]'``.

    python examples/hf_gpt2/make_two.py [--out DIR] [--steps N] [--chars N]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch


def python_reference_text() -> str:
    """The Python Language Reference's topics as ``pydoc`` shows them (``help("if")``), in
    the order of their names: about 450,000 characters of English (with some grammar and
    code) in every CPython's standard library (``pydoc_data/topics.py``)."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[name].strip() for name in sorted(topics)) + "\n"


def corpus_text(characters: int = 200_000) -> tuple[str, str]:
    """``(text, what)``: the first ``characters`` of Debian's fortunes (``lmc.data``'s
    ``fortunes`` corpus) when the ``fortunes`` package is installed, else of the Python
    Language Reference (:func:`python_reference_text`)."""
    from lmc.config import LmcError
    from lmc.data.paths import system_dirs
    from lmc.data.text import fortunes_text

    for folder in system_dirs("fortunes"):
        try:
            return fortunes_text(folder)[:characters], f"Debian's fortunes ({folder})"
        except LmcError:
            continue  # not installed (or not whole): the next corpus
    return python_reference_text()[:characters], "the Python Language Reference (pydoc_data)"


def train_tokenizer(text: str, vocab_size: int):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    raw = Tokenizer(models.BPE())
    raw.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    raw.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    raw.train_from_iterator([text], trainer)
    return PreTrainedTokenizerFast(tokenizer_object=raw, eos_token="<|endoftext|>")


def train_gpt2(tokens: torch.Tensor, vocab: int, seed: int, steps: int, context: int):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(seed)
    config = GPT2Config(
        vocab_size=vocab, n_positions=context, n_embd=64, n_layer=2, n_head=4,
        bos_token_id=0, eos_token_id=0,  # the tokenizer's <|endoftext|>
    )  # fmt: skip
    model = GPT2LMHeadModel(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    windows = tokens[: len(tokens) // context * context].reshape(-1, context)
    gen = torch.Generator().manual_seed(seed)
    model.train()
    for _ in range(steps):
        batch = windows[torch.randint(len(windows), (16,), generator=gen)]
        loss = model(input_ids=batch, labels=batch).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    return model.eval(), float(loss.detach())


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", default=".", help="folder to write into (default: here)")
    parser.add_argument("--steps", type=int, default=150, help="AdamW steps per model")
    parser.add_argument("--vocab", type=int, default=512, help="BPE vocabulary size")
    parser.add_argument("--chars", type=int, default=200_000, help="characters of text")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    text, what = corpus_text(args.chars)
    (out / "corpus.txt").write_text(text, encoding="utf-8")
    print(f"wrote {out / 'corpus.txt'} ({len(text):,} characters of {what})")
    tokenizer = train_tokenizer(text, args.vocab)
    tokens = torch.tensor(tokenizer(text)["input_ids"])
    for name, seed in (("gpt2-a", 1), ("gpt2-b", 2)):
        model, loss = train_gpt2(tokens, len(tokenizer), seed, args.steps, context=64)
        model.save_pretrained(out / name)
        tokenizer.save_pretrained(out / name)
        print(f"wrote {out / name} (last training loss {loss:.3f})")


if __name__ == "__main__":
    main()
