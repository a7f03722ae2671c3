"""Which transport NCCL chose, read from its debug output. The fixture lines
are built from the format strings of NCCL 2.30.7 (the pinned
nvidia-nccl-cu13 wheel's): the line prefix in src/debug.cc, "Using network"
in src/init.cc, "NET/IB : Using" in src/transport/net_ib/init.cc (2.21's
merged devices from its net_ib.cc), "NET/Socket : Using" in
src/transport/net_socket.cc with addresses as src/misc/socket.cc prints them,
and the connection lines of src/transport/net.cc, p2p.cc and shm.cc (2.29's
SHM form too). The trainer's hook needs a GPU; these test what it calls."""

import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest

from horovod_train.core import metrics
from horovod_train.torch import nccl_report
from horovod_train.torch.nccl_report import DebugOutput, parse, run_record, transport_line
from horovod_train.torch.options import parse_args


def debug_output(environ: dict, tmp_path) -> DebugOutput:
    """A DebugOutput of its own environment and temporary directory, and no
    /etc/nccl.conf but the test's."""
    return DebugOutput(environ, temp_parent=str(tmp_path), system_config=tmp_path / "nccl.conf")


def nccl_lines(host: str, *messages: str) -> str:
    """NCCL's INFO lines as src/debug.cc prints them: host:pid:tid [cudaDev] NCCL INFO ..."""
    return "".join(f"{host}:4242:{4242 + i} [0] NCCL INFO {m}\n" for i, m in enumerate(messages))


IB_RUN = nccl_lines(
    "gpu-01",
    "NCCL version 2.30.7+cuda13.0",
    "NET/IB : Using [0]mlx5_0:1/IB [1]mlx5_1:1/RoCE [RO]; OOB ib0:10.0.0.11<0>",
    "Using network IB",
    "Channel 00/02 : 0 1 2 3",
    "Channel 00/0 : 3[1] -> 0[0] [receive] via NET/IB/0/GDRDMA",
    "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    "Channel 01/0 : 1[1] -> 2[0] [send] via NET/IB/1(0)/GDRDMA/Shared",
)
SOCKET_RUN = nccl_lines(
    "gpu-02",
    "NCCL version 2.30.7+cuda13.0",
    "NET/IB : No device found.",
    "NET/Socket : Using [0]eth0:10.0.0.12<0> [1]eth1:fe80::1%eth1<0>",
    "Using network Socket",
    "Channel 00/0 : 1[0] -> 0[0] [receive] via NET/Socket/0",
    "Channel 00/0 : 0[0] -> 1[0] [send] via NET/Socket/0",
)
ONE_HOST_RUN = nccl_lines(
    "gpu-01",
    "NET/Socket : Using [0]eth0:172.17.0.2<0>",
    "Using network Socket",
    "Channel 00/0 : 0[0] -> 1[1] via P2P/IPC",
    "Channel 01/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    "Channel 00 : 1[1] -> 2[2] via SHM/direct",  # 2.30
    "Channel 01 : 1[1] -> 2[2] via SHM/direct/direct",  # 2.29 and before
)


def rank(text: str, host: str, infiniband=(), not_read=None) -> dict:
    return {"host": host, **parse(text), "infiniband": list(infiniband), "not_read": not_read}


def test_infiniband_devices_and_link_layers_as_nccl_printed_them():
    assert parse(IB_RUN) == {"version": "2.30.7+cuda13.0", "network": "IB",
                             "devices": ["mlx5_0:1/IB", "mlx5_1:1/RoCE"],
                             "transports": ["NET/IB", "P2P/IPC"]}


@pytest.mark.parametrize("devices, expected", [
    # 2.30 with NCCL_IB_HCA naming rails and planes
    ("[0]mlx5_0:1:0/IB [1]mlx5_1:1::1/IB ", ["mlx5_0:1:0/IB", "mlx5_1:1::1/IB"]),
    # 2.21 to 2.23: merged devices in braces
    ("[0]={[0] mlx5_0:1/IB, [1] mlx5_1:1/IB} [1]mlx5_2:1/RoCE [RO]",
     ["mlx5_0:1/IB", "mlx5_1:1/IB", "mlx5_2:1/RoCE"]),
])
def test_other_forms_of_the_infiniband_line(devices, expected):
    text = nccl_lines("h", f"NET/IB : Using {devices}; OOB ib0:10.0.0.1<0>", "Using network IB")
    assert parse(text)["devices"] == expected


def test_sockets_name_interface_and_address():
    assert parse(SOCKET_RUN) == {"version": "2.30.7+cuda13.0", "network": "Socket",
                                 "devices": ["eth0 10.0.0.12", "eth1 fe80::1%eth1"],
                                 "transports": ["NET/Socket"]}


def test_a_single_host_run_connects_without_the_network():
    assert parse(ONE_HOST_RUN)["transports"] == ["P2P/CUMEM", "P2P/IPC", "SHM"]
    record = run_record([rank(ONE_HOST_RUN, "gpu-01"), rank(ONE_HOST_RUN, "gpu-01")])
    assert record["between_hosts"] is False
    assert nccl_report.report_lines(record) == [
        "nccl: one host, no network (P2P/CUMEM, P2P/IPC, SHM)"]


def test_what_nccl_printed_on_a_gpu_with_no_infiniband():
    """NCCL 2.28.9's own output (torch 2.11's wheel), one rank on an H200 with
    the InfiniBand libraries but no device: "NET/IB : Using" is printed with
    no device before IB is given up, then sockets on lo."""
    text = (Path(__file__).parent / "fixtures" / "nccl-2.28.9-one-rank-no-ib.log").read_text()
    assert parse(text) == {"version": "2.28.9+cuda13.0", "network": "Socket",
                           "devices": ["lo 127.0.0.1"], "transports": []}
    record = run_record([rank(text, "vm")])
    assert nccl_report.report_lines(record) == ["nccl: one host, no network (no connections)"]
    assert record["warning"] is None


def test_a_plugin_network_and_timestamped_lines():
    text = "".join(f"[2025-11-25 17:08:00] {line}\n" for line in nccl_lines(
        "h", "Using network AWS Libfabric",
        "Channel 00/0 : 0[0] -> 1[0] [send] via NET/AWS Libfabric/0/GDRDMA").splitlines())
    assert parse(text) == {"version": None, "network": "AWS Libfabric", "devices": [],
                           "transports": ["NET/AWS Libfabric"]}


def test_the_lines_between_hosts():
    ib = run_record([rank(IB_RUN, "gpu-01"), rank(IB_RUN, "gpu-02")])
    assert nccl_report.report_lines(ib) == [
        "nccl: between hosts over IB (mlx5_0:1/IB, mlx5_1:1/RoCE); connections NET/IB, P2P/IPC"]
    sockets = run_record([rank(SOCKET_RUN, "gpu-02"), rank(SOCKET_RUN, "gpu-03")])
    assert transport_line(sockets) == ("nccl: between hosts over sockets (eth0 10.0.0.12, "
                                       "eth1 fe80::1%eth1); connections NET/Socket")
    assert sockets["ranks_agree"] and sockets["warning"] is None


def test_ranks_that_chose_differently_are_named():
    record = run_record([rank(IB_RUN, "gpu-01"), rank(SOCKET_RUN, "gpu-02")])
    assert not record["ranks_agree"]
    assert transport_line(record).endswith("; ranks differ: IB on gpu-01; Socket on gpu-02")


def test_sockets_on_a_host_with_infiniband_ports_up_is_one_warning_line():
    assert nccl_report.sockets_despite_infiniband("Socket", ["mlx5_0"])
    assert not nccl_report.sockets_despite_infiniband("IB", ["mlx5_0"])
    assert not nccl_report.sockets_despite_infiniband("Socket", [])
    record = run_record([rank(IB_RUN, "gpu-01", ["mlx5_0", "mlx5_1"]),
                         rank(SOCKET_RUN, "gpu-02", ["mlx5_0", "mlx5_1"]),
                         rank(SOCKET_RUN, "gpu-03", ["mlx5_0", "mlx5_1"])])
    lines = nccl_report.report_lines(record)
    assert len(lines) == 2 and lines[1] == record["warning"] == (
        "warning: NCCL chose sockets between hosts, though InfiniBand/RoCE ports are up on "
        "gpu-02, gpu-03 (mlx5_0, mlx5_1): a container needs /dev/infiniband; check "
        "NCCL_IB_DISABLE and NCCL_IB_HCA")
    no_infiniband = run_record([rank(SOCKET_RUN, "gpu-02"), rank(SOCKET_RUN, "gpu-03")])
    assert len(nccl_report.report_lines(no_infiniband)) == 1


def test_infiniband_devices_are_those_with_a_port_up(tmp_path):
    for device, port, state in [("mlx5_0", "1", "4: ACTIVE"), ("mlx5_1", "1", "1: DOWN"),
                                ("mlx5_2", "2", "4: ACTIVE"), ("mlx5_2", "1", "1: DOWN")]:
        (tmp_path / device / "ports" / port).mkdir(parents=True, exist_ok=True)
        (tmp_path / device / "ports" / port / "state").write_text(state + "\n")
    assert nccl_report.infiniband_devices(tmp_path) == ["mlx5_0", "mlx5_2"]
    assert nccl_report.infiniband_devices(tmp_path / "absent") == []


def test_setup_points_nccl_at_a_private_file_and_reads_it_once(tmp_path):
    environ = {"NCCL_SOCKET_IFNAME": "eth0"}
    output = debug_output(environ, tmp_path)
    output.start()
    assert environ["NCCL_DEBUG"] == "INFO" and environ["NCCL_DEBUG_SUBSYS"] == "INIT"
    assert environ["NCCL_SOCKET_IFNAME"] == "eth0"
    # NCCL puts its pid for %p (src/debug.cc); here NCCL would run in this process.
    written = environ["NCCL_DEBUG_FILE"].replace("%p", str(os.getpid()))
    assert os.path.dirname(written) == str(output.directory)
    with open(written, "w") as f:
        f.write(IB_RUN)
    record = output.rank_record("gpu-01", infiniband_class=tmp_path / "none")
    assert record == {"host": "gpu-01", **parse(IB_RUN), "infiniband": [], "not_read": None}
    assert not output.directory.exists()  # removed once read


@pytest.mark.parametrize("name", nccl_report.DEBUG_VARIABLES)
def test_the_users_own_nccl_debug_settings_are_left_alone(name, tmp_path):
    environ = {name: "WARN"}
    output = debug_output(environ, tmp_path)
    output.start()
    assert environ == {name: "WARN"} and list(tmp_path.iterdir()) == []
    record = run_record([output.rank_record("gpu-01", infiniband_class=tmp_path)])
    assert record["not_read"] == f"{name} is set by the user"
    assert nccl_report.report_lines(record) == [
        f"nccl: transport not read: {name} is set by the user"]


def test_nccl_debug_in_nccls_configuration_files_is_left_alone_too(tmp_path):
    """The environment wins over NCCL's files (src/misc/param.cc), so
    setting NCCL_DEBUG there would take the user's setting away."""
    (tmp_path / "nccl.conf").write_text("# site settings\nNCCL_IB_HCA=mlx5\nNCCL_DEBUG=WARN\n")
    output = debug_output({}, tmp_path)
    output.start()
    assert output.not_read == f"NCCL_DEBUG is set in {tmp_path / 'nccl.conf'}"
    (tmp_path / "nccl.conf").write_text("NCCL_IB_HCA=mlx5\n")
    own = tmp_path / "own.conf"
    own.write_text("NCCL_DEBUG_SUBSYS=INIT,NET\n")
    environ = {"NCCL_CONF_FILE": str(own)}
    output = debug_output(environ, tmp_path)
    output.start()
    assert output.not_read == f"NCCL_DEBUG_SUBSYS is set in {own}"
    assert environ == {"NCCL_CONF_FILE": str(own)}


def test_nothing_from_nccl_is_said_so(tmp_path):
    output = debug_output({}, tmp_path)
    output.start()  # and NCCL never wrote its file
    record = run_record([output.rank_record("gpu-01", infiniband_class=tmp_path)])
    assert transport_line(record) == (
        "nccl: transport not read: NCCL's debug output names no network")


def test_the_summary_has_null_until_the_trainer_hands_in_a_record_json_can_hold():
    rt = SimpleNamespace(size=2, controller="gloo", network=None, device="cuda:0")
    ranks = [{"rank": i, "host": "a", "local_rank": i, "images": 10, "step_time_s": 1.0,
              "train_time_s": 1.0, "images_per_sec": 10.0, "digest": "x"} for i in range(2)]
    args = ("pytorch", "m", rt, ranks, {"test_loss": 0.1, "test_accuracy": 0.9}, 1, 0, 2.0,
            parse_args([]))
    assert metrics.build_summary(*args)["nccl"] is None
    record = run_record([rank(ONE_HOST_RUN, "a"), rank(ONE_HOST_RUN, "a")])
    # loop.fit adds the Trainer's summary_fields() over build_summary's.
    assert json.loads(json.dumps(record))["transports"] == ["P2P/CUMEM", "P2P/IPC", "SHM"]
