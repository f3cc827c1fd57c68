"""SPEC D11: machine identity never comes from a placeholder serial (hypothesis).

Real tools print a stand-in where a GPU has no readable serial: ``0000000000000``
(nvidia-smi on AWS A10G / T4, and the masked captures in tests/data/real/nvidia),
``N/A`` / ``[N/A]`` (consumer and vGPU cards; the real RTX 4080 SUPER CSV),
``[Not Supported]``, ``0`` (rocm-smi), empty. Two machines printing the same stand-in are
two machines: each falls back to its instance id, else its node name, and says which.
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

from slurm_heal import extra
from slurm_heal.checks.detectors import nvidia

REAL = Path(__file__).resolve().parent.parent / "data" / "real" / "nvidia"

WORDS = ["N/A", "NA", "Not Supported", "Unknown Error", "Insufficient Permissions",
         "None", "Unknown", "null", "GPU is lost", "Not Available", ""]


@st.composite
def placeholders(draw: st.DrawFn) -> str:
    """One placeholder as a tool may print it: zeros of any length, or a word in any
    case, maybe bracketed (CSV), maybe padded."""
    if draw(st.booleans()):
        core = "0" * draw(st.integers(min_value=1, max_value=24))
    else:
        word = draw(st.sampled_from(WORDS))
        core = "".join(c.upper() if draw(st.booleans()) else c.lower() for c in word)
    if draw(st.booleans()):
        core = f"[{core}]"
    pad = draw(st.sampled_from(["", " ", "  ", "\t"]))
    return pad + core + draw(st.sampled_from(["", " ", "\t"]))


real_serials = st.from_regex(r"\A1[0-9]{12}\Z").filter(lambda s: set(s) != {"0"}) | \
    st.from_regex(r"\A[A-Z]{2}[0-9A-F]{10}\Z").filter(lambda s: any(c not in "0F" for c in s))


@given(st.lists(placeholders(), min_size=1, max_size=8),
       st.lists(placeholders(), min_size=1, max_size=8),
       st.from_regex(r"\Ai-[0-9a-f]{8,17}\Z"), st.from_regex(r"\Ai-[0-9a-f]{8,17}\Z"))
@example(["0000000000000"] * 8, ["0000000000000"] * 4, "i-0a1b2c3d", "i-9f8e7d6c")  # A10G, T4
@example(["[N/A]"], ["N/A"], "i-00000001", "i-00000002")
@example(["0"], [""], "i-00000003", "i-00000004")  # rocm-smi
def test_placeholder_serials_never_make_two_machines_one(
        a: list[str], b: list[str], iid_a: str, iid_b: str) -> None:
    """SPEC D11: with only placeholders, no ``gpus-`` host is made; the instance id is
    the identity (and the record says so); two machines with different instance ids
    never share a host; without an instance id there is no host (the node name)."""
    ma, mb = extra.machine_identity(a, iid_a), extra.machine_identity(b, iid_b)
    assert ma is not None and mb is not None
    if iid_a != iid_b:
        assert ma["host"] != mb["host"]
    assert ma["host"] == f"instance-{iid_a}" and ma["identity"] == "instance_id"
    assert "gpu_serials" not in ma and ma["placeholder_serials"]
    for serial in a + b:
        assert extra.is_placeholder_serial(serial), serial
    bare = extra.machine_identity(a)
    assert bare is not None and "host" not in bare and bare["identity"] == "node_name"
    section = extra.our_section([], extra.EARLIEST, bare)
    assert "host" not in section and section["machine"]["identity"] == "node_name"


@given(st.lists(real_serials, min_size=1, max_size=8, unique=True),
       st.lists(placeholders(), max_size=4))
def test_real_serials_identify_the_machine_and_placeholders_among_them_are_ignored(
        serials: list[str], noise: list[str]) -> None:
    """SPEC D11: real serials are the identity; a placeholder next to them (one GPU
    whose serial cannot be read) changes nothing."""
    assert not any(extra.is_placeholder_serial(s) for s in serials)
    clean = extra.machine_identity(serials)
    noisy = extra.machine_identity(serials + noise, "i-0abc")
    assert clean is not None and noisy is not None
    assert clean["host"].startswith("gpus-") and noisy["host"] == clean["host"]
    assert noisy["gpu_serials"] == sorted(serials)


def test_real_csv_captures_with_placeholder_serials_are_two_machines() -> None:
    """SPEC D11 on real ``nvidia-smi --query-gpu ... --format=csv`` output (its header,
    every column of driver 590/595): an RTX 4080 SUPER prints ``[N/A]``, an L40S and an
    H100 ``0000000000000``. Each node keeps its own identity."""
    serials = {}
    for name in ("rtx-4080-super-595.71.05", "l40s-595.80", "h100-590.48.01"):
        (reading,) = nvidia.parse_csv((REAL / f"query-gpu-{name}.csv").read_text())
        serials[name] = reading.serial
    assert serials == {"rtx-4080-super-595.71.05": "[N/A]", "l40s-595.80": "0000000000000",
                       "h100-590.48.01": "0000000000000"}
    hosts = {extra.machine_identity([s], f"i-{n}")["host"]  # type: ignore[index]
             for n, s in enumerate(serials.values())}
    assert len(hosts) == 3
    assert all(h.startswith("instance-") for h in hosts)


# ------------------------------------------- issue 35 item 7: NVML's error strings (D11)

def _nvml_error_strings() -> list[str]:
    """NVML's error strings as nvidia-ml-py (installed with the project) spells them,
    plus those of newer nvml.h versions (DCGM's nvml_error_strings.h)."""
    import pynvml

    words = set(pynvml.NVMLError._errcode_to_string.values())
    return sorted(words | {"GPU requires reset", "In use by another client", "No data",
                           "Driver/library version mismatch", "Insufficient resources",
                           "GPU access blocked by the operating system"})


@st.composite
def nvml_errors(draw: st.DrawFn) -> str:
    """An NVML error as nvidia-smi prints it in place of a value: bracketed in CSV and
    -q text (``[GPU requires reset]``), bare, after ``N/A`` (``N/A (GPU is lost)``), or
    its short ``ERR!``; or NVML's "value not available" (-1 unsigned, all F)."""
    word = draw(st.sampled_from(_nvml_error_strings()))
    form = draw(st.sampled_from(["[{}]", "{}", "N/A ({})", "ERR!", "0xFFFFFFFF",
                                 "FFFFFFFFFFFFF", "ffff", "4294967295",
                                 "18446744073709551615"]))
    return draw(st.sampled_from(["", " "])) + form.format(word)


@given(nvml_errors(), nvml_errors(), st.from_regex(r"\Ai-[0-9a-f]{8,17}\Z"))
@example("[GPU requires reset]", "[GPU requires reset]", "i-00000001")
@example("N/A (GPU is lost)", "[Unknown Error]", "i-00000002")
@example("FFFFFFFFFFFFF", "ERR!", "i-00000003")
@example("<<<NOT_SUPPORTED>>>", "[Not Found]", "i-00000004")  # DCGM 4.2.3 on a GB10
def test_nvml_error_strings_are_no_identity(a: str, b: str, iid: str) -> None:
    """SPEC D11, E1, E7: two broken machines whose nvidia-smi prints the same NVML
    error for the serial share no machine id (so no lemon ledger, no escalation count):
    the error is set aside as a placeholder and no ``gpus-`` host is made."""
    assert extra.is_placeholder_serial(a) and extra.is_placeholder_serial(b)
    ident = extra.machine_identity([a, b], iid)
    assert ident is not None and ident["host"] == f"instance-{iid}"
    assert "gpu_serials" not in ident
    assert extra.machine_identity([a, b]) == {"identity": "node_name",
                                              "placeholder_serials": sorted({a.strip(),
                                                                             b.strip()})}


@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=24)
       .filter(lambda t: not (2 <= len(t.strip()) <= 64)
               or any(c.lower() not in "abcdefghijklmnopqrstuvwxyz0123456789-_." for c in t.strip())))
def test_a_value_not_in_a_serials_form_is_no_identity(value: str) -> None:
    """SPEC D11: a value with blanks, punctuation or odd characters, or too short to be
    a serial, is not a serial of any vendor's form: no identity."""
    assert extra.is_placeholder_serial(value)


def test_a_real_h100_csv_whose_serial_reads_an_nvml_error_makes_no_machine_id() -> None:
    """SPEC D11 on the real H100 ``--query-gpu`` capture (driver 590.48.01): with its
    serial column holding what nvidia-smi prints for a GPU that needs a reset (the
    value put in by hand, each NVML error in turn), two such nodes are two machines
    (before: ``[GPU requires reset]`` was hashed as a serial, one id for both)."""
    header, row = (REAL / "query-gpu-h100-590.48.01.csv").read_text().splitlines()[:2]
    for word in ("GPU requires reset", "Unknown Error", "Not Found", "Timeout", "GPU is lost"):
        text = "\n".join([header, row.replace("0000000000000", f"[{word}]", 1)]) + "\n"
        (reading,) = nvidia.parse_csv(text)
        assert reading.serial == f"[{word}]"
        one = extra.machine_identity([reading.serial], "i-0a1")
        two = extra.machine_identity([reading.serial], "i-0b2")
        assert one is not None and two is not None and one["host"] != two["host"]
        assert one["identity"] == "instance_id"
