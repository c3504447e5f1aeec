"""Numba kernels for hindsight experience replay: episode bookkeeping, goal selection, n-step returns.

Layout (``num_envs = 2``, ``rows = capacity // num_envs = 4``): every env owns one column of a flat
ring, and its ``c``-th step (its write count) lives at row ``c % rows``, flat index
``(c % rows) * num_envs + env``::

    flat index:    0    1  |  2    3  |  4    5  |  6    7
    row:           0       |  1       |  2       |  3
    env:           a    b  |  a    b  |  a    b  |  a    b
    count (a):     8       |  5       |  6       |  7          a's episode 5..8 wraps: rows 1 2 3 0
    count (b):          4  |       5  |       2  |       3

An episode is the run of counts ``[start, end)`` of one env, contiguous modulo ``rows``, so a goal
step ``j`` of the same episode is found by arithmetic on counts, never by comparing flat indices
(which is what breaks when an episode wraps around the end of the ring). Per flat index the caller
keeps three int64 arrays:

    step_count[i]     the count of the step stored there (-1: never written)
    episode_start[i]  the count of its episode's first step
    episode_end[i]    one past its episode's last count, or -1 while the episode is unfinished

A step is sampleable while its whole episode is in the ring: ``start >= written - rows``. The
moment the ring overwrites an episode's first step, every step of it still stored loses its mass.

Goal-selection strategy codes (as ints: kernels read no module globals): 0 future, 1 final,
2 episode, 3 random. Randomness arrives as uniforms drawn by the caller's ``np.random.Generator``.

Kernels do no validation; ``r2d2kit.replay.her`` checks input before it gets here.
"""

from __future__ import annotations

import numpy as np
from numba import njit


@njit(cache=True)
def her_write(envs, done, step_count, episode_start, episode_end, env_written, env_episode_start, rows,
              num_envs):
    """Book one vector-env step for ``envs`` (each at most once) and return the sampling-mass changes.

    For every env: the step gets count ``c = env_written[env]`` at row ``c % rows``. If the step it
    overwrites was the first step of its episode, the rest of that episode still in the ring loses
    its mass (a partly overwritten episode is never sampled). The new step has mass only while its
    episode fits in the column (``c - start < rows``). When ``done[k]`` the episode ends: its end is
    written into every one of its steps still stored, and the env's next step starts a new episode.

    Returns:
        ``(leaf_indices, valid)``: flat indices whose mass changes and, per index, 1.0 (sampleable)
        or 0.0; the caller writes them into its sum tree(s). Indices are distinct.
    """
    m = envs.shape[0]
    # pass 1 (read only): how many stored steps lose their mass, to size the output exactly
    lost = 0
    for k in range(m):
        env = envs[k]
        count = env_written[env]
        if count >= rows:
            flat = (count % rows) * num_envs + env
            old = step_count[flat]
            if old == episode_start[flat]:
                old_end = episode_end[flat] if episode_end[flat] >= 0 else count
                lost += old_end - old - 1
    leaf_indices = np.empty(lost + m, dtype=np.int64)
    valid = np.empty(lost + m, dtype=np.float64)
    out = 0
    for k in range(m):
        env = envs[k]
        count = env_written[env]
        flat = (count % rows) * num_envs + env
        if count >= rows:
            old = step_count[flat]
            if old == episode_start[flat]:  # the old episode loses its first step: drop all of it
                old_end = episode_end[flat] if episode_end[flat] >= 0 else count
                for c in range(old + 1, old_end):
                    leaf_indices[out] = (c % rows) * num_envs + env
                    valid[out] = 0.0
                    out += 1
        start = env_episode_start[env]
        step_count[flat] = count
        episode_start[flat] = start
        episode_end[flat] = -1
        leaf_indices[out] = flat
        valid[out] = 1.0 if count - start < rows else 0.0
        out += 1
        env_written[env] = count + 1
        if done[k]:
            end = count + 1
            first_stored = end - rows if end - rows > start else start
            for c in range(first_stored, end):
                episode_end[(c % rows) * num_envs + env] = end
            env_episode_start[env] = end
    return leaf_indices, valid


@njit(cache=True)
def her_sample_goals(indices, step_count, episode_start, episode_end, env_written, rows, num_envs, n_step,
                     strategy, relabel_probability, relabel_unfinished, relabel_uniforms, goal_uniforms,
                     random_goals):
    """Goal step and n-step window per sampled transition, vectorised over the batch.

    For sampled flat index ``i`` (env ``i % num_envs``, count ``c``, episode ``[start, stop)``, where
    ``stop`` is the episode's end or, while it is unfinished, the env's write count):

    * it is relabelled when ``relabel_uniforms[b] < relabel_probability`` and its episode is
      finished (or ``relabel_unfinished``);
    * the goal step ``j`` (a count) is, by ``strategy``: 0 future ``c + floor(u * (stop - c))``
      (``c <= j < stop``, the sampled step included), 1 final ``stop - 1``, 2 episode
      ``start + floor(u * (stop - start))``; 3 random takes ``random_goals[b]`` (a flat index the
      caller drew over all sampleable steps). ``u = goal_uniforms[b]``;
    * the window holds the steps ``c, c + 1, ...`` of the same episode, at most ``n_step``.

    Returns:
        ``goal_indices`` ``[B]`` int64: flat index of the goal step, -1 where not relabelled;
        ``steps`` ``[B, n_step]`` int64: flat index of each window step, -1 past the episode;
        ``pair_samples``, ``pair_steps`` ``[M]`` int64: for every window step of every relabelled
        sample (sample by sample, step by step), the sample and the step: the (achieved goal, goal)
        pairs whose rewards must be recomputed, in the order :func:`her_nstep_returns` reads them.
    """
    batch = indices.shape[0]
    goal_indices = np.full(batch, -1, dtype=np.int64)
    steps = np.full((batch, n_step), -1, dtype=np.int64)
    pair_samples = np.empty(batch * n_step, dtype=np.int64)
    pair_steps = np.empty(batch * n_step, dtype=np.int64)
    pairs = 0
    for b in range(batch):
        i = indices[b]
        env = i % num_envs
        count = step_count[i]
        start = episode_start[i]
        finished = episode_end[i] >= 0
        stop = episode_end[i] if finished else env_written[env]
        available = stop - count  # >= 1: the sampled step itself
        window = n_step if n_step < available else available
        for k in range(window):
            steps[b, k] = ((count + k) % rows) * num_envs + env
        if not (finished or relabel_unfinished) or not relabel_uniforms[b] < relabel_probability:
            continue
        for k in range(window):
            pair_samples[pairs] = b
            pair_steps[pairs] = steps[b, k]
            pairs += 1
        if strategy == 3:
            goal_indices[b] = random_goals[b]
            continue
        if strategy == 0:
            low, span = count, available
        elif strategy == 1:
            low, span = stop - 1, 1
        else:
            low, span = start, stop - start
        offset = np.int64(goal_uniforms[b] * span)
        if offset >= span:  # u * span rounds up to span only for u within an ulp of 1
            offset = span - 1
        goal_indices[b] = ((low + offset) % rows) * num_envs + env
    return goal_indices, steps, pair_samples[:pairs], pair_steps[:pairs]


@njit(cache=True)
def her_nstep_returns(steps, goal_indices, reward, terminated, pair_rewards, pair_terminated, gamma):
    """Discounted return over each window, under the relabelled goal where there is one.

    ``steps`` ``[B, n]`` and ``goal_indices`` ``[B]`` come from :func:`her_sample_goals`;
    ``reward`` and ``terminated`` are the stored per-slot arrays; ``pair_rewards`` and
    ``pair_terminated`` ``[M]`` replace them for the window steps of relabelled samples, in the
    order of ``her_sample_goals``'s pairs. For a window of ``m`` summed steps (stopping after the
    first terminated one): ``G = sum_{k < m} gamma^k r_k``; ``discount = 0`` if step ``m - 1``
    terminated, else ``gamma^m``.

    Returns:
        ``returns`` ``[B]`` float32 (summed in float64), ``discount`` ``[B]`` float32 and
        ``last_steps`` ``[B]`` int64, the flat index of the last summed step.
    """
    batch, n = steps.shape
    returns = np.empty(batch, dtype=np.float32)
    discount = np.empty(batch, dtype=np.float32)
    last_steps = np.empty(batch, dtype=np.int64)
    cursor = 0
    for b in range(batch):
        relabelled = goal_indices[b] >= 0
        window = 0
        while window < n and steps[b, window] >= 0:
            window += 1
        total = 0.0
        scale = 1.0
        ended = False
        for k in range(window):
            step = steps[b, k]
            if relabelled:
                r = pair_rewards[cursor + k]
                done = pair_terminated[cursor + k]
            else:
                r = reward[step]
                done = terminated[step]
            total += scale * r
            scale *= gamma
            last_steps[b] = step
            if done:
                ended = True
                break
        if relabelled:
            cursor += window
        returns[b] = total
        discount[b] = 0.0 if ended else scale
    return returns, discount, last_steps
