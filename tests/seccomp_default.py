"""Run a command under the one rule of Docker's and podman's default seccomp
profile that Open MPI meets: process_vm_readv and process_vm_writev (Linux's
cross-memory attach, the single copy of Open MPI's shared-memory transport)
refused with EPERM, as in a container without CAP_SYS_PTRACE. The filter is
the kernel's own (seccomp, inherited by every child), only narrower than a
runtime's whole profile.

    python3 seccomp_default.py COMMAND [ARGS...]

x86_64 only; standard library only (it runs in the image's hosts)."""

import ctypes
import os
import platform
import struct
import sys

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2
AUDIT_ARCH_X86_64 = 0xC000003E
PROCESS_VM_READV, PROCESS_VM_WRITEV = 310, 311  # x86_64's numbers
EPERM = 1
LOAD, JUMP_IF_EQUAL, RETURN = 0x20, 0x15, 0x06  # BPF_LD|W|ABS, BPF_JMP|JEQ|K, BPF_RET|K
ALLOW, ERRNO = 0x7FFF0000, 0x00050000

# seccomp_data: the syscall's number at offset 0, the architecture at 4.
PROGRAM = [
    (LOAD, 0, 0, 4),
    (JUMP_IF_EQUAL, 1, 0, AUDIT_ARCH_X86_64),
    (RETURN, 0, 0, ALLOW),
    (LOAD, 0, 0, 0),
    (JUMP_IF_EQUAL, 2, 0, PROCESS_VM_READV),
    (JUMP_IF_EQUAL, 1, 0, PROCESS_VM_WRITEV),
    (RETURN, 0, 0, ALLOW),
    (RETURN, 0, 0, ERRNO | EPERM),
]


def main() -> int:
    if len(sys.argv) < 2 or platform.machine() != "x86_64":
        print("seccomp_default.py: error: give a command (x86_64 only)", file=sys.stderr)
        return 2
    code = b"".join(struct.pack("HBBI", *instruction) for instruction in PROGRAM)
    buffer = ctypes.create_string_buffer(code, len(code))

    class Program(ctypes.Structure):
        _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]

    program = Program(len(PROGRAM), ctypes.addressof(buffer))
    libc = ctypes.CDLL(None, use_errno=True)
    if (libc.prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            or libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(program), 0, 0) != 0):
        print(f"seccomp_default.py: error: seccomp: {os.strerror(ctypes.get_errno())}",
              file=sys.stderr)
        return 1
    os.execvp(sys.argv[1], sys.argv[1:])


if __name__ == "__main__":
    sys.exit(main())
