"""docker/env/patch_packages.py's rules, with GNU patch on a small site of
its own: applied once, then left; a file that fits neither way is named."""

import sys

import pytest
from conftest import REPO

sys.path.insert(0, str(REPO / "docker" / "env"))
import patch_packages  # noqa: E402

PATCH = """What it fixes.
--- a/pkg/mod.py
+++ b/pkg/mod.py
@@ -1,2 +1,2 @@
 import numpy as np
-kind = np.bool
+kind = np.bool_
"""


@pytest.fixture
def site(tmp_path):
    (tmp_path / "site" / "pkg").mkdir(parents=True)
    (tmp_path / "site" / "pkg" / "mod.py").write_text("import numpy as np\nkind = np.bool\n")
    (tmp_path / "fix.patch").write_text(PATCH)
    return tmp_path / "site"


def test_a_patch_is_applied_once_and_then_left(site):
    patch = site.parent / "fix.patch"
    linked = site.parent / "cache-copy.py"  # as the installer's cache links it
    linked.hardlink_to(site / "pkg" / "mod.py")
    assert patch_packages.apply(patch, site) == "applied"
    assert (site / "pkg" / "mod.py").read_text().endswith("kind = np.bool_\n")
    assert linked.read_text().endswith("kind = np.bool\n")  # the cache keeps the release
    assert patch_packages.apply(patch, site) == "already applied"
    assert (site / "pkg" / "mod.py").read_text().count("np.bool_") == 1


def test_a_file_that_fits_neither_way_is_named(site):
    (site / "pkg" / "mod.py").write_text("import numpy as np\nkind = bool\n")
    with pytest.raises(patch_packages.PatchFailed, match="fix.patch does not fit"):
        patch_packages.apply(site.parent / "fix.patch", site)


def test_only_the_installed_version_is_patched_and_names_are_checked(tmp_path):
    (tmp_path / "pytest-0.0.1-never.patch").write_text(PATCH)
    (tmp_path / f"pytest-{pytest.__version__}-this.patch").write_text(PATCH)
    (tmp_path / "no-such-package-1.0-x.patch").write_text(PATCH)
    assert [p.name for p in patch_packages.patches_for_installed(tmp_path)] == [
        f"pytest-{pytest.__version__}-this.patch"]
    (tmp_path / "badname.patch").write_text(PATCH)
    with pytest.raises(patch_packages.PatchFailed, match="badname.patch: not named"):
        patch_packages.patches_for_installed(tmp_path)


def test_each_package_patch_opens_with_what_it_fixes():
    patches = sorted(patch_packages.PATCH_DIR.glob("*.patch"))
    assert patches
    for patch in patches:
        assert patch_packages.NAME.fullmatch(patch.name), patch.name
        assert not patch.read_text().startswith("---"), f"{patch.name} has no header"
