"""`make test` sets up the browser tests' Chromium on a bare machine (issue 22), checked with stand-ins.

The Makefile's `browser` target runs with a PATH of fakes only (id, apt-get, sudo), so nothing is installed:
the fakes log what they were asked and "install" an executable where CHROMIUM points.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAKE = shutil.which("make")
pytestmark = pytest.mark.skipif(MAKE is None, reason="make is not installed")

INSTALL = "apt-get update && apt-get install -y chromium fonts-dejavu-core"


def fake_bin(tmp: Path, uid: int, sudo: bool) -> Path:
    """A bin folder with only what the recipe runs: sh and env (real), id, apt-get and maybe sudo (fakes)."""
    bin_ = tmp / "bin"
    bin_.mkdir()
    for tool in ("sh", "env"):
        (bin_ / tool).symlink_to(shutil.which(tool))
    scripts = {
        "id": f"#!/bin/sh\necho {uid}\n",
        # logs its arguments; `install` puts an executable where the Makefile looks for chromium
        "apt-get": f'#!/bin/sh\necho "apt-get $*" >> {tmp}/log\n'
        f'[ "$1" = install ] && printf "#!/bin/sh\\n" > {tmp}/chromium && /bin/chmod +x {tmp}/chromium\nexit 0\n',
    }
    if sudo:
        scripts["sudo"] = f'#!/bin/sh\necho "sudo $*" >> {tmp}/log\nexec "$@"\n'
    for name, text in scripts.items():
        (bin_ / name).write_text(text)
        (bin_ / name).chmod(0o755)
    return bin_


def make_browser(tmp: Path, uid: int = 0, sudo: bool = False, chromium: Path | None = None, **variables: str):
    bin_ = fake_bin(tmp, uid, sudo)
    args = [f"CHROMIUM={chromium or tmp / 'chromium'}", f"BROWSER_FONT={ROOT / 'Makefile'}"]
    args += [f"{k}={v}" for k, v in variables.items()]
    run = subprocess.run(
        [MAKE, "-s", "-C", str(ROOT), "browser", *args],
        env={"PATH": str(bin_)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    log = (tmp / "log").read_text().splitlines() if (tmp / "log").exists() else []
    return run, log


def test_as_root_it_installs_with_apt_get(tmp_path):
    run, log = make_browser(tmp_path, uid=0)
    assert run.returncode == 0, run.stdout + run.stderr
    assert log == ["apt-get update", "apt-get install -y chromium fonts-dejavu-core"]
    assert INSTALL in run.stdout


def test_otherwise_through_sudo(tmp_path):
    run, log = make_browser(tmp_path, uid=1000, sudo=True)
    assert run.returncode == 0, run.stdout + run.stderr
    assert log[0].startswith("sudo env DEBIAN_FRONTEND=noninteractive sh -c") and INSTALL in log[0]
    assert log[1:] == ["apt-get update", "apt-get install -y chromium fonts-dejavu-core"]


def test_without_root_or_sudo_it_says_the_one_command(tmp_path):
    run, log = make_browser(tmp_path, uid=1000, sudo=False)
    assert run.returncode != 0 and log == []
    assert run.stdout.strip() == f"Browser tests need Debian's Chromium; as root, run: {INSTALL}"


def test_present_means_nothing_to_do_unless_ci_asks_for_the_upgrade(tmp_path):
    present = tmp_path / "present-chromium"
    present.write_text("#!/bin/sh\n")
    present.chmod(0o755)
    run, log = make_browser(tmp_path, uid=0, chromium=present)
    assert run.returncode == 0 and log == [] and run.stdout == ""
    ci = tmp_path / "ci"
    ci.mkdir()
    run, log = make_browser(ci, uid=0, chromium=present, BROWSER_UPGRADE="1")
    assert run.returncode == 0 and log == ["apt-get update", "apt-get install -y chromium fonts-dejavu-core"]


def test_make_test_depends_on_it_and_ci_calls_make_test():
    makefile = (ROOT / "Makefile").read_text()
    assert "\ntest: setup browser\n" in makefile
    ci = (ROOT / ".ci" / "run").read_text()
    assert "\nmake test BROWSER_UPGRADE=1\n" in ci
