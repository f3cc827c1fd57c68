"""The pure decision core (ARCHITECTURE "pure core"): no I/O, no clock, no randomness.

    from slurm_heal.policy import decide
    plan = decide(view, state, now, policy)
"""

from slurm_heal.policy.engine import decide, decide_counted, host_of, is_automatic

__all__ = ["decide", "decide_counted", "host_of", "is_automatic"]
