"""The pure decision core (ARCHITECTURE "pure core"): no I/O, no clock, no randomness.

    from slurm_heal.policy import decide
    plan = decide(view, state, now, policy, catalog=catalog)

One module per concern (issue 20): engine (the fold), working (the working set, a
context per node, the ledger that becomes the Plan), records (the store's index,
kept between cycles), facts, intake and requests (what comes in), gates (each
returns a Hold), lifecycle (a handler per phase), acting (the act and the return),
escalation (E1-E3 as data), cordon (our marker); incremental.Decide is what the
controller and simulate call cycle after cycle.
"""

from slurm_heal.policy.engine import decide, decide_counted, host_of, is_automatic

__all__ = ["decide", "decide_counted", "host_of", "is_automatic"]
