"""Short, readable agents built from r2d2kit, CleanRL style: one file each, top to bottom.

This folder is the one copy; the wheel carries it as ``r2d2kit.examples``, so after
``pip install r2d2kit`` each runs as ``python -m r2d2kit.examples.dqn_per`` (``r2d2_minimal``,
``her_dqn``), and from a checkout as ``python agents/dqn_per.py``.
"""
