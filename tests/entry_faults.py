"""The words every entry point (scripts/launch.sh, the Slurm job, the
trainer's --num-proc, launch_cluster.sh, the preflight) must say for one
fault, after its own `PROG: error: `: one table, so a test of one entry
point cannot drift from another's. Bad input exits 2; a network the probe
finds cannot carry the job, 1 (launch/pipeline.py's convention)."""

UNKNOWN_HOST = "host no-such-host.invalid does not resolve"
UNKNOWN_HOST_KEY = ("host 127.0.0.2: ssh fails (Host key verification failed): its host key is "
                    "not known here: add it to ~/.ssh/known_hosts")
# The trainer's own argparse line, named by the trainer where a launcher says it.
BAD_TRAINER_OPTION = "argument --epochs: 'x' is not an integer"
# HVT_PORTS that is no range (50000 alone).
BAD_PORT_RANGE = ("HVT_PORTS=50000: want a range of ports LOW-HIGH between 1024 and 65535, "
                  "e.g. 50000-50200")
# Host b's SSH port refusing (a firewall rule), host a fine.
SSH_REFUSED_ON_B = "cannot reach host b on SSH port {port}: connection refused"
# A network name that no host has; one that is local to each host.
NETWORK_MISSING = "network interface nope cannot carry the job: missing on a, b"
NETWORK_LOCAL = ("network interface docker0 cannot carry the job: the same address 172.17.0.1 "
                 "on a and b (a network local to each host, such as Docker's bridge)")
