"""NVML's own error strings, and whether a value nvidia-smi printed is one of them.

nvidia-smi prints NVML's error string (``nvmlErrorString``) in place of a value it could
not read: ``[Unknown Error]``, ``[GPU requires reset]``, ``N/A (GPU is lost)``, or its own
``ERR!``. Such a value is the same on every broken machine, so it is never an identity
(SPEC D11, `slurm_heal.extra.is_placeholder_serial`), and a counter printed as one is
"cannot tell", never zero (SPEC D3, O6). ``N/A`` and ``[Not Supported]`` are not errors:
the GPU has no such counter (a consumer card, ECC disabled), so nothing is unknown.

Imports nothing: the node check reads it on every run (issue 26).
"""

from __future__ import annotations

# nvmlErrorString's words as nvidia-ml-py's NVMLError._errcode_to_string and DCGM's
# nvml_error_strings.h spell them, lower case.
NVML_ERROR_STRINGS = frozenset(s.lower() for s in (
    "Uninitialized", "Invalid Argument", "Not Supported", "Insufficient Permissions",
    "Already Initialized", "Not Found", "Insufficient Size", "Insufficient External Power",
    "Driver Not Loaded", "Timeout", "Interrupt Request Issue",
    "NVML Shared Library Not Found", "Function Not Found", "Corrupted infoROM",
    "GPU is lost", "GPU requires reset", "GPU requires restart",
    "GPU access blocked by the operating system",
    "The operating system has blocked the request.", "Driver/library version mismatch",
    "RM has detected an NVML/RM version mismatch.", "In use by another client",
    "The GPU is currently in use", "Insufficient Memory", "No data",
    "The requested vgpu operation is not available on target device, because ECC is "
    "enabled", "Insufficient resources", "Frequency not supported",
    "Argument version mismatch", "Deprecated", "Not ready", "GPU not found",
    "Invalid state", "Reset type not supported", "Unknown Error"))
# NVML's answers that say the GPU has no such value: not applicable, not an error.
NOT_APPLICABLE = frozenset({"not supported", "deprecated"})


def nvml_error(value: str | None) -> str | None:
    """``value`` as nvidia-smi printed it when it is an NVML error in place of a reading
    (``[Unknown Error]``, ``[GPU requires reset]``, ``[Timeout]``, ``N/A (GPU is lost)``,
    ``ERR!``); None for a reading, for ``N/A`` / ``[N/A]`` and for ``[Not Supported]``
    (the GPU has no such counter: not applicable, SPEC D3)."""
    if value is None:
        return None
    raw = " ".join(value.split())
    text = raw.strip("[]()<>\"' ").lower()
    if text == "err!":
        return raw
    if text.startswith("n/a"):
        text = text[3:].strip(" ()[]")  # "N/A (GPU is lost)"
    if text in NVML_ERROR_STRINGS and text not in NOT_APPLICABLE:
        return raw
    return None
