"""Validation of vacated machines (SPEC V1–V3).

A machine vacated by migrate or remove (or named by ``slurm-heal validate NODE``) is held
in a maintenance reservation and tested by a Slurm job that runs the vendor's suite
(`suite`), on the node, through `runner`; the controller follows the job through Slurm
(`flow`), judges the results, and on a clear failure files a hardware ticket (`tickets`).
"""
