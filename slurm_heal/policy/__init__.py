"""The pure decision core (ARCHITECTURE "pure core"): no I/O, no clock, no randomness.

    from slurm_heal.policy import decide
    plan = decide(view, state, now, policy, catalog=catalog)

Plain functions over two values passed explicitly (issue 33): a `WorkingSet` (the
frozen inputs and their indexes, a context per node) and a `Ledger` (the remediations
as they stand, the steps, records, effects and wakes that become the Plan), both in
`working`. One module per concern, none inherits from another: engine (`run`, the
fold), records (the store's index, kept between cycles), facts, intake and requests
(what comes in), gates (START_GATES: each returns a Hold, writes nothing), holding (a
Hold applied), lifecycle (a handler per phase), acting (the act and the return),
escalation (E1-E3 as data), endings (the end of automatic work: fail, a person),
cordon (our marker), incidents (S7), lemon (E7), person (S8), postgate (V4);
incremental.Decide is what the controller and simulate call cycle after cycle.
docs/adding-a-rule.md says where a new rule goes.
"""

from slurm_heal.policy.engine import decide, decide_counted, host_of, is_automatic

__all__ = ["decide", "decide_counted", "host_of", "is_automatic"]
