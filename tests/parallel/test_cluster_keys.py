"""scripts/cluster_keys.sh: one user key pair and one host key per cluster,
the private keys readable by their owner only, never replaced by accident."""

import stat
import subprocess

from conftest import REPO

SCRIPT = REPO / "scripts" / "cluster_keys.sh"


def make_keys(*args) -> subprocess.CompletedProcess:
    return subprocess.run([str(SCRIPT), *map(str, args)], capture_output=True, text=True,
                          timeout=60)


def mode(path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_keys_are_written_with_safe_permissions(tmp_path):
    keys = tmp_path / "keys"
    result = make_keys(keys)
    assert result.returncode == 0, result.stderr
    assert mode(keys) == 0o700
    assert mode(keys / "id_ed25519") == 0o600
    assert mode(keys / "authorized_keys") == 0o600
    assert mode(keys / "id_ed25519.pub") == 0o644
    assert mode(keys / "ssh_host_ed25519_key") == 0o600
    assert mode(keys / "ssh_host_ed25519_key.pub") == 0o644
    public = (keys / "id_ed25519.pub").read_text().strip()
    # The nodes accept this key only, and only to run commands.
    assert (keys / "authorized_keys").read_text() == f"restrict {public}\n"
    fingerprint = subprocess.run(["ssh-keygen", "-l", "-f", str(keys / "id_ed25519")],
                                 capture_output=True, text=True, check=True).stdout
    assert "(ED25519)" in fingerprint


def test_existing_keys_are_kept_unless_forced(tmp_path):
    keys = tmp_path / "keys"
    assert make_keys(keys).returncode == 0
    private = (keys / "id_ed25519").read_bytes()
    host = (keys / "ssh_host_ed25519_key").read_bytes()

    refused = make_keys(keys)
    assert refused.returncode == 2  # bad input: --force was not given
    assert refused.stderr.strip().splitlines() == [
        f"cluster_keys.sh: error: {keys}/id_ed25519 exists; pass --force to replace it"]
    assert (keys / "id_ed25519").read_bytes() == private

    forced = make_keys(keys, "--force")
    assert forced.returncode == 0, forced.stderr
    assert (keys / "id_ed25519").read_bytes() != private
    assert (keys / "ssh_host_ed25519_key").read_bytes() != host
    assert mode(keys / "id_ed25519") == 0o600


def test_a_loose_directory_is_tightened(tmp_path):
    keys = tmp_path / "keys"
    keys.mkdir(mode=0o777)
    keys.chmod(0o777)
    assert make_keys(keys).returncode == 0
    assert mode(keys) == 0o700


def test_bad_arguments_are_one_line_and_exit_2(tmp_path):
    for args, message in (((tmp_path / "k", "--bogus"), "unknown option --bogus"),
                          ((tmp_path / "k", tmp_path / "j"), "one DIR only")):
        result = make_keys(*args)
        assert result.returncode == 2
        assert message in result.stderr and len(result.stderr.strip().splitlines()) == 1
        assert not (tmp_path / "k").exists()
    assert make_keys().returncode == 2
