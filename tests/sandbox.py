"""What a unit's network settings do to a process, applied here by the same kernel
features systemd uses, for a test without a systemd to start the unit:
``PrivateNetwork=yes`` is a new network namespace with only a loopback that is down
(``unshare -n``, as systemd sets it up), and ``RestrictAddressFamilies=`` is a
seccomp filter on socket(2) answering EAFNOSUPPORT for every other family
(libseccomp, as systemd does). ``IPAddressAllow=`` (a cgroup BPF program) is not
applied here."""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import socket
from pathlib import Path

SCMP_ACT_ALLOW = 0x7FFF0000
SCMP_CMP_EQ = 4
EAFNOSUPPORT = 97
# settings whose assignments add up (the rest: the last one counts)
LISTS = {"RestrictAddressFamilies", "IPAddressAllow", "IPAddressDeny", "SystemCallFilter", "ReadWritePaths",
         "Environment"}


class _ArgCmp(ctypes.Structure):
    _fields_ = [("arg", ctypes.c_uint), ("op", ctypes.c_int), ("datum_a", ctypes.c_uint64),
                ("datum_b", ctypes.c_uint64)]


def unit_settings(*files: Path) -> dict[str, list[str]]:
    """The [Service] assignments of a unit and its drop-ins, merged as systemd merges
    them: a list setting's later assignments add and an empty one resets it; any other
    setting takes its last assignment."""
    out: dict[str, list[str]] = {}
    for f in files:
        section = ""
        for line in f.read_text().splitlines():
            line = line.strip()
            if not line or line.startswith(("#", ";")):
                continue
            if line.startswith("["):
                section = line
                continue
            if section == "[Service]" and "=" in line:
                key, value = (t.strip() for t in line.split("=", 1))
                if key in LISTS:
                    out[key] = [] if not value else out.get(key, []) + value.split()
                else:
                    out[key] = value.split()
    return out


def families(settings: dict[str, list[str]]) -> set[int]:
    return {int(getattr(socket, name)) for name in settings.get("RestrictAddressFamilies", [])}


def restrict_families(allowed: set[int]):
    """A preexec_fn: from here on, socket(2) with a family not in ``allowed`` fails."""
    def apply() -> None:
        lib = ctypes.CDLL("libseccomp.so.2", use_errno=True)
        lib.seccomp_init.restype = ctypes.c_void_p
        lib.seccomp_init.argtypes = [ctypes.c_uint32]
        lib.seccomp_rule_add_array.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_int, ctypes.c_uint,
                                               ctypes.POINTER(_ArgCmp)]
        lib.seccomp_load.argtypes = [ctypes.c_void_p]
        lib.seccomp_syscall_resolve_name.argtypes = [ctypes.c_char_p]
        ctx = lib.seccomp_init(SCMP_ACT_ALLOW)
        nr = lib.seccomp_syscall_resolve_name(b"socket")
        for family in range(1, 64):
            if family not in allowed:
                cmp = _ArgCmp(0, SCMP_CMP_EQ, family, 0)
                if lib.seccomp_rule_add_array(ctx, 0x00050000 | EAFNOSUPPORT, nr, 1, ctypes.byref(cmp)):
                    raise OSError("seccomp_rule_add_array failed")
        ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS, as NoNewPrivileges=yes
        if lib.seccomp_load(ctx):
            raise OSError("seccomp_load failed")

    return apply


def command(settings: dict[str, list[str]], argv: list[str]) -> list[str]:
    """``argv`` in a private network namespace when the unit asks for one."""
    private = settings.get("PrivateNetwork", ["no"])[-1] in ("yes", "true", "1", "on")
    return (["unshare", "--net", "--", *argv] if private else argv)


def ip_allowed(settings: dict[str, list[str]]) -> list[str]:
    return [a for a in settings.get("IPAddressAllow", []) if re.match(r"[\d.:a-fA-F/]+$", a) or a == "localhost"]
