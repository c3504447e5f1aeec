"""Numba kernels for recurrent HER: one relabelled goal per sampled window, found by episode time.

A window of ``L`` rows starting at episode time ``t0`` holds rows ``t0 .. t0 + L - 1`` (ring slots
``slots[w]``, ``capacity`` for padding). Its episode has ``T`` transitions: observations ``o_0 .. o_T``.
``s_last = min(t0 + L - 1, T - 1)`` is the window's last transition. A relabelled goal is the achieved
goal of observation ``o_tau`` (example: ``t0 = 2``, ``L = 4``, ``T = 9``)::

    episode time:   0  1  2  3  4  5  6  7  8  9
    window rows:          [2  3  4  5]                s_last = 5; burn-in 1: first trained row t_s = 3
    'future' tau:                     6  7  8  9      uniform over s_last + 1 .. T
    'final'  tau:                                9
    'trace_future' tau:         4  5  6  7  8  9      uniform over t_s + 1 .. T
    rewards:              r2 r3 r4 r5                 r_t = compute_reward(ag(o_t+1), goal)
    prev_reward:          r1 r2 r3 r4                 (network input: the previous row's reward)

Times inside the window are read from the window's own slots. Later times (``o_6 .. o_9`` above, and
``o_6`` for the reward of the last row) come from the *goal table*: a ring of write indices, where a
finished episode's rows ``tau0 .. T`` were appended contiguously when it ended, so the entry for time
``tau`` sits at absolute table position ``origin + tau``. Rows written after a window's rows outlive
them in the step ring (it overwrites in write order), so while the window is sampleable every row it
looks up is still stored; the kernel checks that anyway (table position not yet reused, write index
not yet overwritten) and reports the first sample where it does not hold.

Strategy codes (``GoalSelectionStrategy.code``, as ints: kernels read no module globals): 0 future,
1 final, 4 trace_future. Randomness arrives as uniforms drawn by the caller's
``np.random.Generator``. Kernels do no validation; ``r2d2kit.replay.sequence_her`` checks input
before it gets here.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def _ring_slot_at(tau, t0, window_slots, origin, goal_table, table_written, rows_written, capacity):
    """Ring slot of the row at episode time ``tau`` (>= t0) of a finished episode, or -1 if gone."""
    length = window_slots.shape[0]
    offset = tau - t0
    if offset < 0:
        return np.int64(-1)  # before the window: never asked for
    if offset < length:
        return np.int64(window_slots[offset])
    table_size = goal_table.shape[0]
    position = origin + tau
    oldest_position = table_written - table_size if table_written > table_size else 0
    if position < oldest_position or position >= table_written:
        return np.int64(-1)
    write_index = goal_table[position % table_size]
    if write_index < 0 or write_index < rows_written - capacity or write_index >= rows_written:
        return np.int64(-1)
    return write_index % capacity


@njit(cache=True)
def sequence_her_relabel(indices, slots, window_start, window_transitions, table_origin, goal_table,
                         table_written, rows_written, capacity, strategy, burn_in, relabel_probability,
                         relabel_uniforms, goal_uniforms):
    """Goal row and reward pairs for every sampled window, vectorised over the batch.

    Sampled window ``b`` (slot ``indices[b]``) is relabelled when its episode is finished
    (``window_transitions >= 0``) and ``relabel_uniforms[b] < relabel_probability``. Its goal row is
    the row of ``o_tau`` with, by ``strategy``, 0 future: ``tau = s_last + 1 + floor(u * (T - s_last))``,
    1 final: ``tau = T``, 4 trace_future: ``tau = t_s + 1 + floor(u * (T - t_s))`` with ``t_s = t0 + burn_in``
    the window's first trained row (``u = goal_uniforms[b]``).

    The rewards to recompute are listed as pairs (sample, position, row): position ``p < L`` is
    window row ``p`` (episode time ``t0 + p`` in ``1 .. T``), whose own achieved goal gives
    ``prev_reward[p]`` and ``reward[p - 1]``; position ``L`` is the row after the window (time
    ``t0 + L``, when row ``L - 1`` is a transition), whose achieved goal gives ``reward[L - 1]``.

    Returns:
        ``goal_rows`` ``[B]`` int64: ring slot of the goal's observation, -1 where not relabelled;
        ``pair_samples``, ``pair_positions``, ``pair_rows`` ``[M]`` int64: the pairs, sample by
        sample; ``stale`` int: the first sample whose rows were no longer stored (-1: none; such a
        sample is left unrelabelled).
    """
    batch = indices.shape[0]
    length = slots.shape[1]
    goal_rows = np.full(batch, -1, dtype=np.int64)
    pair_samples = np.empty(batch * (length + 1), dtype=np.int64)
    pair_positions = np.empty(batch * (length + 1), dtype=np.int64)
    pair_rows = np.empty(batch * (length + 1), dtype=np.int64)
    pairs = 0
    stale = -1
    for b in range(batch):
        window = indices[b]
        transitions = window_transitions[window]
        if transitions < 0 or not relabel_uniforms[b] < relabel_probability:
            continue
        t0 = window_start[window]
        last_time = t0 + length - 1
        s_last = last_time if last_time < transitions - 1 else transitions - 1
        if strategy == 1:
            tau = transitions
        else:
            after = s_last if strategy == 0 else t0 + burn_in  # goals come after this transition
            span = transitions - after
            offset = np.int64(goal_uniforms[b] * span)
            if offset >= span:  # u * span rounds up to span only for u within an ulp of 1
                offset = span - 1
            tau = after + 1 + offset
        origin = table_origin[window]
        window_slots = slots[window]
        goal_row = _ring_slot_at(tau, t0, window_slots, origin, goal_table, table_written, rows_written, capacity)
        tail_row = np.int64(-2)  # -2: row L - 1 is no transition, no row after the window is needed
        if s_last == last_time:
            tail_row = _ring_slot_at(last_time + 1, t0, window_slots, origin, goal_table, table_written,
                                     rows_written, capacity)
        if goal_row < 0 or tail_row == -1:
            if stale < 0:
                stale = b
            continue
        goal_rows[b] = goal_row
        for p in range(length):
            time = t0 + p
            if 1 <= time <= transitions:
                pair_samples[pairs] = b
                pair_positions[pairs] = p
                pair_rows[pairs] = window_slots[p]
                pairs += 1
        if tail_row >= 0:
            pair_samples[pairs] = b
            pair_positions[pairs] = length
            pair_rows[pairs] = tail_row
            pairs += 1
    return goal_rows, pair_samples[:pairs], pair_positions[:pairs], pair_rows[:pairs], stale
