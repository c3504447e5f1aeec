"""Numba kernels that walk an episode's rows through the step ring's row links (diagnostics).

The window ring stores every step once, interleaved across envs; ``SequenceReplayBuffer`` links each
row to the previous and next row of its episode by write index (``-1``: no such row). A link is
followed only while the row it names is still in the ring (its write index is not older than the
oldest one kept and its ring slot still holds that write index); a link below ``-1`` names a row
the ring lost before the link was made.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def walk_links(links, row_write_index, starts, steps, oldest):
    """Follow ``links`` from each write index in ``starts`` for up to ``steps`` rows.

    Returns ``(chain [B, steps], reached_end [B])``: the write indices met, in walking order, ``-1``
    after the walk stopped; ``reached_end`` is true where the rows walked reach the episode's first
    or last row (the next link is ``-1``), false where the episode goes on past them or the ring
    overwrote a row on the way.
    """
    batch = starts.shape[0]
    capacity = links.shape[0] - 1  # the last entry belongs to the padding row
    chain = np.full((batch, steps), -1, dtype=np.int64)
    reached_end = np.zeros(batch, dtype=np.bool_)
    for b in range(batch):
        current = starts[b]
        for k in range(steps + 1):  # one look past the last step: does the episode end right there?
            following = links[current % capacity]
            if following == -1:
                reached_end[b] = True
                break
            if k == steps:
                break
            if following < 0 or following < oldest or row_write_index[following % capacity] != following:
                break
            chain[b, k] = following
            current = following
    return chain, reached_end


@njit(cache=True)
def discounted_episode_returns(window_slots, tail_slots, capacity, reward, mask, ended, gamma):
    """Discounted return from each row of ``[B, L]`` windows to the end of its episode.

    ``window_slots`` ``[B, L]``: ring slots of the windows' rows (``capacity`` = padding);
    ``tail_slots`` ``[B, H]``: ring slots of the rows after each window's last row, in order
    (``-1`` where unknown). Rows are summed up to and including the first transition whose
    ``ended`` flag (terminated or truncated) is set. Returns ``(returns [B, L], known [B, L])``:
    ``known`` is false for rows that are not transitions and for windows whose episode end was not
    found in the rows walked.
    """
    batch, length = window_slots.shape
    horizon = tail_slots.shape[1]
    returns = np.zeros((batch, length), dtype=np.float64)
    known = np.zeros((batch, length), dtype=np.bool_)
    sequence = np.empty(length + horizon, dtype=np.int64)
    positions = np.empty(length + horizon, dtype=np.int64)  # window row of each sequence entry, -1 for the tail
    for b in range(batch):
        count = 0
        for j in range(length):
            if window_slots[b, j] != capacity:
                sequence[count] = window_slots[b, j]
                positions[count] = j
                count += 1
        for k in range(horizon):
            if tail_slots[b, k] < 0:
                break
            sequence[count] = tail_slots[b, k]
            positions[count] = -1
            count += 1
        end = -1
        for i in range(count):
            slot = sequence[i]
            if mask[slot] and ended[slot]:
                end = i
                break
        if end < 0:
            continue
        total = 0.0
        for i in range(end, -1, -1):
            slot = sequence[i]
            if mask[slot]:
                total = reward[slot] + gamma * total
                if positions[i] >= 0:
                    returns[b, positions[i]] = total
                    known[b, positions[i]] = True
    return returns, known
