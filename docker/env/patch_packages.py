"""Patches to installed packages that no release will fix:
patches/packages/NAME-VERSION-WHAT.patch, applied to the environment's
site-packages where NAME is installed at VERSION (MXNet 1.9.1 is retired).
Run by the environment's own Python (setup.sh does, after installing):

    .venv/bin/python docker/env/patch_packages.py

A patch already applied is left as it is, so a second run changes nothing;
one that applies neither way stops with its name. GNU patch writes each
file anew, so the installer's cache, whose files the venv links to, keeps
the released ones. Standard library only.
"""

import importlib.metadata
import re
import subprocess
import sys
import sysconfig
from pathlib import Path

PATCH_DIR = Path(__file__).resolve().parent / "patches" / "packages"
NAME = re.compile(r"(?P<name>[A-Za-z0-9_.-]+?)-(?P<version>\d[^-]*)-.+\.patch")


class PatchFailed(Exception):
    pass


def patches_for_installed(patch_dir: Path = PATCH_DIR) -> list[Path]:
    """The patches whose package is installed here at their version."""
    wanted = []
    for patch in sorted(patch_dir.glob("*.patch")):
        match = NAME.fullmatch(patch.name)
        if not match:
            raise PatchFailed(f"{patch.name}: not named NAME-VERSION-WHAT.patch")
        try:
            installed = importlib.metadata.version(match["name"])
        except importlib.metadata.PackageNotFoundError:
            continue
        if installed == match["version"]:
            wanted.append(patch)
    return wanted


def run_patch(patch: Path, site: Path, *flags: str) -> bool:
    # --force: no guessing that a patch is reversed (--batch would apply an
    # unapplied one when asked for --reverse).
    result = subprocess.run(["patch", "-p1", "--force", "--fuzz=0", "--silent",
                             "--no-backup-if-mismatch", "-d", str(site), *flags,
                             "-i", str(patch)], capture_output=True, text=True, timeout=60)
    return result.returncode == 0


def apply(patch: Path, site: Path) -> str:
    """'applied' or 'already applied'; PatchFailed when it fits neither way."""
    if run_patch(patch, site, "--reverse", "--dry-run"):
        return "already applied"
    if run_patch(patch, site, "--forward", "--dry-run") and run_patch(patch, site, "--forward"):
        return "applied"
    raise PatchFailed(f"{patch.name} does not fit the installed files in {site}")


def main() -> int:
    site = Path(sysconfig.get_paths()["purelib"])
    try:
        for patch in patches_for_installed():
            print(f"patch_packages: {patch.name}: {apply(patch, site)}")
    except (PatchFailed, OSError, subprocess.TimeoutExpired) as err:
        print(f"patch_packages: error: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
