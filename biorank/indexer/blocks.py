"""Cutting a document into blocks that fit the encoder's window (Ma et al.'s 300-word-piece passages).

A block is the title followed by consecutive whole sentences of the abstract, packed greedily while the
block stays within the budget, so no sentence is cut between two blocks and every block can be read alone.
The budget is 300 word pieces as in Ma et al., lowered to what the encoder reads (MiniLM-L6: 256 with
[CLS]/[SEP], so 254); a document that fits is one block, and a single sentence longer than the budget is a
block of its own (the encoder reads its start, BM25 all of it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

PAPER_BLOCK_TOKENS = 300


def block_budget(max_seq_length: int) -> int:
    """Word pieces per block: Ma et al.'s 300, or fewer when the encoder's window (less 2 specials) is smaller."""
    return min(PAPER_BLOCK_TOKENS, max_seq_length - 2)


@dataclass(frozen=True, slots=True)
class Block:
    number: int
    text: str
    """The title and the block's sentences, as BM25 indexes it and the encoder reads it."""
    wordpieces: tuple[str, ...]


def make_blocks(
    title: str,
    title_pieces: Sequence[str],
    sentences: Sequence[str],
    sentence_pieces: Sequence[Sequence[str]],
    budget: int,
) -> list[Block]:
    """Pack ``sentences`` (with their word pieces) behind the title into blocks of at most ``budget`` pieces.

    A document without abstract sentences is one block of its title.
    """
    room = max(budget - len(title_pieces), 1)
    groups: list[list[int]] = [[]]
    used = 0
    for i, pieces in enumerate(sentence_pieces):
        if groups[-1] and used + len(pieces) > room:
            groups.append([])
            used = 0
        groups[-1].append(i)
        used += len(pieces)
    blocks = []
    for number, group in enumerate(groups):
        text = " ".join([title, *(sentences[i] for i in group)]).strip()
        pieces = tuple(title_pieces) + tuple(p for i in group for p in sentence_pieces[i])
        blocks.append(Block(number, text, pieces))
    return blocks
