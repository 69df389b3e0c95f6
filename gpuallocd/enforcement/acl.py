"""POSIX access ACLs on device files, written as the kernel's own xattr, with no library.

`system.posix_acl_access` holds a 4-byte version (2) and then one 8-byte entry per rule:
tag (u16), permissions (u16), id (u32), little-endian, sorted by tag and then id. A file
without the xattr has the three entries its mode bits imply. Named user entries need a mask
entry, the union of the group class's permissions; the kernel shows the mask as the mode's
group bits. Setting the xattr needs the file's owner or CAP_FOWNER (docs/enforcement.md).
"""

from __future__ import annotations

import errno
import os
import stat
import struct
from dataclasses import dataclass

__all__ = ["Acl", "grant_user", "read_acl", "revoke_user", "write_acl"]

XATTR = "system.posix_acl_access"
VERSION = 2
USER_OBJ, USER, GROUP_OBJ, GROUP, MASK, OTHER = 0x01, 0x02, 0x04, 0x08, 0x10, 0x20
NO_ID = 0xFFFFFFFF
RW = 0o6
_HEADER = struct.Struct("<I")
_ENTRY = struct.Struct("<HHI")


@dataclass(frozen=True)
class Acl:
    """The entries of one access ACL: (tag, id) → permission bits (rwx as 0o7)."""

    entries: dict[tuple[int, int], int]

    @classmethod
    def from_mode(cls, mode: int) -> Acl:
        bits = stat.S_IMODE(mode)
        return cls(
            {
                (USER_OBJ, NO_ID): (bits >> 6) & 7,
                (GROUP_OBJ, NO_ID): (bits >> 3) & 7,
                (OTHER, NO_ID): bits & 7,
            }
        )

    @classmethod
    def decode(cls, data: bytes) -> Acl:
        (version,) = _HEADER.unpack_from(data)
        if version != VERSION or (len(data) - _HEADER.size) % _ENTRY.size:
            raise ValueError("not a POSIX ACL of version 2")
        entries = {}
        for offset in range(_HEADER.size, len(data), _ENTRY.size):
            tag, perm, ident = _ENTRY.unpack_from(data, offset)
            entries[(tag, ident)] = perm
        return cls(entries)

    def encode(self) -> bytes:
        entries = dict(self.entries)
        entries.pop((MASK, NO_ID), None)
        named = [key for key in entries if key[0] in (USER, GROUP)]
        if named:
            group_class = [entries[key] for key in named] + [entries[(GROUP_OBJ, NO_ID)]]
            mask = 0
            for perm in group_class:
                mask |= perm
            entries[(MASK, NO_ID)] = mask
        body = b"".join(
            _ENTRY.pack(tag, perm, ident) for (tag, ident), perm in sorted(entries.items())
        )
        return _HEADER.pack(VERSION) + body

    def users(self) -> dict[int, int]:
        """The named user entries: uid → permission bits."""
        return {ident: perm for (tag, ident), perm in self.entries.items() if tag == USER}

    def with_user(self, uid: int, perm: int | None) -> Acl:
        """This ACL with `uid`'s entry set to `perm` (removed when None)."""
        entries = dict(self.entries)
        if perm is None:
            entries.pop((USER, uid), None)
        else:
            entries[(USER, uid)] = perm
        return Acl(entries)


def read_acl(path: str) -> Acl:
    """The file's access ACL: its xattr, or what its mode implies where it has none."""
    try:
        return Acl.decode(os.getxattr(path, XATTR))
    except OSError as exc:
        if exc.errno != errno.ENODATA:
            raise
    return Acl.from_mode(os.stat(path).st_mode)


def write_acl(path: str, acl: Acl) -> None:
    os.setxattr(path, XATTR, acl.encode())


def grant_user(path: str, uid: int, perm: int = RW) -> None:
    """Give `uid` `perm` on `path` (read-write by default), other entries kept."""
    write_acl(path, read_acl(path).with_user(uid, perm))


def revoke_user(path: str, uid: int) -> None:
    """Take `uid`'s own entry off `path`; a file left with no named entry keeps its mode."""
    acl = read_acl(path)
    if uid in acl.users():
        write_acl(path, acl.with_user(uid, None))
