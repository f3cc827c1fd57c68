"""The node check's healthy path stays lean (issue 26): no module on it pulls in
`dataclasses`, `argparse` or `socket` (nor click, pydantic, requests), and a detector's
module is imported only where its precondition holds. A `sys.modules` check in a fresh
interpreter, never a timing: each forbidden module is a measured cost (dataclasses
imports inspect, ast, dis, tokenize: ~15 ms; argparse gettext, locale, shutil, bz2,
lzma: ~17 ms; socket and selectors ~5 ms) on every node at every HealthCheckInterval."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.unit.test_check_replays import Replay

REPO = Path(__file__).resolve().parents[2]
FORBIDDEN = ("dataclasses", "argparse", "socket", "click", "pydantic", "requests",
             "importlib.metadata")
# ... and where no tool runs and no check.toml is read (no GPU, no systemd, defaults):
# subprocess's selectors, shutil, tomllib, typing (our modules import it for the type
# checker only), pathlib and tempfile (fsio without them), hashlib (issue 43: what Extra
# says is compared as its text on a healthy node, not hashed).
NO_TOOL = ("selectors", "shutil", "tomllib", "typing", "pathlib", "tempfile", "hashlib")
DETECTOR_MODULES = tuple(f"slurm_heal.checks.detectors.{m}" for m in (
    "gpu", "nvidia", "amd", "infiniband", "network"))

# The console script's own route (what HealthCheckProgram and the glue run): the check's
# argv through slurm_heal.entry, then the modules it loaded (not those the interpreter
# had at its start), on stderr.
HARNESS = """
import sys
started = set(sys.modules)  # the interpreter's own (site, an editable install's hook)
import json
{before}
from slurm_heal.entry import main
try:
    main(["check", "--dry-run", "--json", "--node", "n1", *sys.argv[1:]])
except SystemExit as exc:
    code = exc.code
names = {names!r}
sys.stderr.write("\\nLOADED " + json.dumps({{"exit": code,
    "loaded": [m for m in names if m in sys.modules and m not in started]}}) + "\\n")
"""


def loaded(root: Path, path: str, names: tuple[str, ...], *args: str,
           before: str = "") -> tuple[int, list[str]]:
    env = dict(os.environ, SLURM_HEAL_ROOT=str(root), PATH=path,
               PYTHONPATH=str(REPO))
    res = subprocess.run([sys.executable, "-c", HARNESS.format(before=before, names=names),
                          *args], env=env, capture_output=True, text=True, timeout=120,
                         check=False)
    line = [x for x in res.stderr.splitlines() if x.startswith("LOADED ")]
    assert line, res.stderr
    out = json.loads(line[-1][len("LOADED "):])
    return out["exit"], out["loaded"]


def healthy_root(root: Path) -> Path:
    (root / "dev").mkdir(parents=True)
    (root / "proc/sys/kernel/random").mkdir(parents=True)
    (root / "proc/sys/kernel/random/boot_id").write_text("boot-1\n")
    (root / "proc/mounts").write_text("/dev/sda1 / ext4 rw,relatime 0 0\n")
    (root / "proc/uptime").write_text("100.0 10.0\n")
    (root / "dev/kmsg").write_text("6,1,100,-;IPv6: ADDRCONF(NETDEV_CHANGE): eth0: up\n")
    return root


def test_a_healthy_node_without_gpus_runs_the_check_without_the_forbidden_modules(
        tmp_path: Path) -> None:
    root = healthy_root(tmp_path / "root")
    (tmp_path / "bin").mkdir()
    code, found = loaded(root, str(tmp_path / "bin"), FORBIDDEN + NO_TOOL + DETECTOR_MODULES)
    assert code == 0
    assert found == []


def test_a_healthy_8_gpu_node_imports_its_gpu_detector_and_none_of_the_forbidden(
        tmp_path: Path) -> None:
    """The detectors with something to look at run (NVIDIA through the nvidia-smi stub,
    the GPU count, disk) and import what running a tool needs (subprocess), never the
    forbidden modules; network has no endpoints here, so not even `socket`."""
    node = Replay(tmp_path)
    node.nvidia_node()
    node.config["network"] = {"enabled": True}
    node.config.pop("infiniband")
    node.run()  # writes the check.toml; the first run sets the cursor and the state dir
    node.run()  # ... the second keeps the parsed check.toml there
    code, found = loaded(node.root, f"{node.bin}:/usr/bin:/bin",
                         FORBIDDEN + ("typing", "tomllib") + DETECTOR_MODULES)
    assert code == 0
    assert found == ["slurm_heal.checks.detectors.gpu", "slurm_heal.checks.detectors.nvidia"]


def test_the_guard_sees_a_forbidden_module_when_something_on_the_path_pulls_it_in(
        tmp_path: Path) -> None:
    root = healthy_root(tmp_path / "root")
    (tmp_path / "bin").mkdir()
    _, found = loaded(root, str(tmp_path / "bin"), FORBIDDEN,
                      before="import slurm_heal.checks.runner, dataclasses, argparse")
    assert found == ["dataclasses", "argparse"]


def test_a_node_with_endpoints_imports_socket_but_not_the_idna_codec(tmp_path: Path) -> None:
    """SPEC D6 with `[network] endpoints`: socket is what the detector needs; a numeric or
    plain host name never loads the IDNA codec (encodings.idna, stringprep, unicodedata)."""
    root = healthy_root(tmp_path / "root")
    (tmp_path / "bin").mkdir()
    conf = root / "etc/slurm-heal/check.toml"
    conf.parent.mkdir(parents=True)
    conf.write_text('[network]\nendpoints = ["127.0.0.1:1", "localhost:1"]\n')
    for _ in range(2):  # the state dir, then the parsed check.toml in it
        loaded(root, str(tmp_path / "bin"), ())
    code, found = loaded(root, str(tmp_path / "bin"), (
        "socket", "slurm_heal.checks.detectors.network", "encodings.idna", "stringprep",
        "unicodedata", "typing", "tomllib", "dataclasses", "argparse"))
    assert code == 0  # refused, but for less than unreachable_for: no finding yet
    assert found == ["socket", "slurm_heal.checks.detectors.network"]
