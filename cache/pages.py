"""The pages of an LMDB data file, read without LMDB, so that a damaged file can be
judged and read without crashing the process.

LMDB maps its file and trusts it: a file shorter than its last transaction says
(a partial copy, a full disk) kills the reader with SIGBUS, and a page of zeros
met while walking a database ends in an assertion (SIGABRT). Neither can be
caught, so before LMDB maps a file `check` compares the file's size with what its
meta pages promise, and `cache verify`/`cache recover` walk the B+trees here, in
Python, where every offset is bounds-checked and a bad page is only an error
about that page. No library reads LMDB's format apart from LMDB itself.

The format (LMDB 0.9, `mdb.c`; little-endian, 64-bit): pages of `psize` bytes;
pages 0 and 1 are meta pages, the one with the higher transaction id is current.
A page starts with a 16-byte header (pgno u64, pad u16, flags u16, lower u16,
upper u16; an overflow page keeps its page count where lower/upper are), then
u16 offsets of its nodes. A node is lo u16, hi u16, flags u16, key size u16, the
key, then the data: a leaf's data size is lo | hi << 16, a branch's child page is
lo | hi << 16 | flags << 32. A big value (node flag 1) is a u64 page number of
an overflow run whose data starts after that page's header. The meta page holds
two databases' roots: the free-page database (the pages a transaction freed, by
transaction id) and the main one (the named databases).
"""

from __future__ import annotations

import mmap
import os
import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

import msgspec

__all__ = ["MAGIC", "DataFile", "Meta", "PageError", "check", "DATA_FILE"]

DATA_FILE = "data.mdb"
MAGIC = 0xBEEFC0DE
_DATA_VERSION = 1
_HEADER = 16  # page header bytes
_NODE = 8  # node header bytes
_BRANCH, _LEAF, _OVERFLOW, _META = 0x01, 0x02, 0x04, 0x08
_BIGDATA, _SUBDATA, _DUPDATA = 0x01, 0x02, 0x04
_DB = struct.Struct("<IHHQQQQQ")  # MDB_db: pad (the page size, in the free db), flags, depth, pages×3, entries, root
_META_HEAD = struct.Struct("<IIQQ")  # magic, version, address, map size
_NO_PAGE = 0xFFFFFFFFFFFFFFFF  # the root of an empty database


class PageError(Exception):
    """A page or a meta page that cannot be what the format says."""


class Meta(msgspec.Struct, frozen=True):
    psize: int
    map_size: int
    last_page: int
    txnid: int
    main_root: int
    free_root: int = _NO_PAGE  # the root of LMDB's free-page database

    @property
    def needed_bytes(self) -> int:
        """The size of a file that holds every page up to the last one."""
        return (self.last_page + 1) * self.psize


def _read_meta(page: bytes) -> Meta:
    if len(page) < _HEADER + _META_HEAD.size + 2 * _DB.size + 16:
        raise PageError("too short for a meta page")
    magic, version, _, map_size = _META_HEAD.unpack_from(page, _HEADER)
    if magic != MAGIC:
        raise PageError("not an LMDB file (no LMDB magic number in its first page)")
    if version != _DATA_VERSION:
        raise PageError(f"LMDB data format {version}, not {_DATA_VERSION}")
    free_off = _HEADER + _META_HEAD.size
    free = _DB.unpack_from(page, free_off)
    psize = free[0]
    main = _DB.unpack_from(page, free_off + _DB.size)
    last_page, txnid = struct.unpack_from("<QQ", page, free_off + 2 * _DB.size)
    if psize < 512 or psize & (psize - 1):
        raise PageError(f"page size {psize} is not a power of two ≥ 512")
    return Meta(psize=psize, map_size=map_size, last_page=last_page, txnid=txnid, main_root=main[7],
                free_root=free[7])


def read_meta(data: bytes | bytes, size: int) -> Meta:
    """The current meta page of a data file whose first bytes are `data` (at least
    two pages when the file has them). A torn or damaged meta page is skipped if
    the other one is good, as LMDB does."""
    first = _read_meta(bytes(data[:4096]))
    metas = [first]
    if size >= 2 * first.psize:
        try:
            metas.append(_read_meta(bytes(data[first.psize:2 * first.psize])))
        except PageError:
            pass
    return max(metas, key=lambda m: m.txnid)


def check(path: str | os.PathLike) -> None:
    """Raise PageError when the data file in the folder `path` is foreign or shorter
    than its last transaction needs; a missing or empty file (a new cache) passes."""
    file = Path(path) / DATA_FILE
    try:
        with file.open("rb") as f:
            # The meta pages first, then the size: a writer (another run on the cache, in this
            # process or another) writes a transaction's pages before its meta page, and the file
            # never shrinks, so the size taken after the meta holds every page the meta names.
            # Taken before, a commit in between made a sound cache look short ("damaged": two runs
            # started at once on one cache, tests/core/test_api_concurrent.py).
            head = f.read(2 * 65536)
            size = os.fstat(f.fileno()).st_size
    except FileNotFoundError:
        return
    if size == 0:
        return
    meta = read_meta(head, size)
    if size < meta.needed_bytes:
        raise PageError(f"{file} is {size:,} bytes but its last transaction needs {meta.needed_bytes:,} "
                        "(a partial copy or a full disk?)")


class DataFile:
    """A data file opened for reading pages; only the bytes the file has are mapped,
    so a page past its end is a PageError, never a SIGBUS. Pages and values are
    copies (bytes), so nothing holds on to the map when it is closed."""

    def __init__(self, path: str | os.PathLike):
        self.path = Path(path) / DATA_FILE
        with self.path.open("rb") as f:
            head = f.read(2 * 65536)  # the meta pages before the size, as `check` reads them
            self.size = os.fstat(f.fileno()).st_size
            if not self.size:
                raise PageError(f"{self.path} is empty")
            self._map = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
        self.meta = read_meta(head, self.size)
        self.pages = self.size // self.meta.psize

    def close(self) -> None:
        self._map.close()

    def __enter__(self) -> DataFile:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def page(self, pgno: int) -> tuple[int, bytes]:
        """(flags, bytes) of page `pgno`."""
        if not 2 <= pgno <= min(self.meta.last_page, self.pages - 1):
            raise PageError(f"page {pgno} is outside the file's pages 2–{min(self.meta.last_page, self.pages - 1)}")
        ps = self.meta.psize
        page = self._map[pgno * ps:(pgno + 1) * ps]
        return struct.unpack_from("<H", page, 10)[0], page

    def nodes(self, page: bytes) -> Iterator[tuple[int, int, bytes, int, int]]:
        """(flags, lo | hi << 16, key, data offset, node offset) of each node of a branch or leaf page."""
        lower, upper = struct.unpack_from("<HH", page, 12)
        if not _HEADER <= lower <= upper <= len(page):
            raise PageError(f"page bounds {lower}–{upper} make no sense")
        for i in range((lower - _HEADER) // 2):
            off = struct.unpack_from("<H", page, _HEADER + 2 * i)[0]
            if not upper <= off <= len(page) - _NODE:
                raise PageError(f"node {i} at offset {off} is outside the page's node area")
            lo, hi, nflags, ksize = struct.unpack_from("<HHHH", page, off)
            start = off + _NODE
            if start + ksize > len(page):
                raise PageError(f"node {i}'s key runs past the page")
            yield nflags, lo | hi << 16, page[start:start + ksize], start + ksize, off

    def value(self, page: bytes, nflags: int, size: int, at: int) -> bytes:
        """The data of a leaf node: in the page, or in its overflow pages."""
        if nflags & _DUPDATA:
            raise PageError("a sorted-duplicates node (the cache never writes one)")
        if not nflags & _BIGDATA:
            if at + size > len(page):
                raise PageError(f"a value of {size:,} bytes runs past its page")
            return page[at:at + size]
        (pgno,) = struct.unpack_from("<Q", page, at)
        flags, first = self.page(pgno)
        if not flags & _OVERFLOW:
            raise PageError(f"page {pgno} should hold a big value but is not an overflow page")
        start = pgno * self.meta.psize + _HEADER
        if start + size > min(self.size, (self.meta.last_page + 1) * self.meta.psize):
            raise PageError(f"a value of {size:,} bytes on page {pgno} runs past the file")
        return self._map[start:start + size]

    def walk(self, root: int, on_error) -> Iterator[tuple[bytes, int, bytes]]:
        """(key, node flags, value) of every leaf node under page `root`, in key
        order. A page that cannot be read is reported as ``on_error(pgno, after,
        message)`` (`after`: the last key read before it) and skipped: its siblings
        are still read."""
        if root == _NO_PAGE:
            return
        last: list[bytes] = [b""]
        stack = [root]
        while stack:
            pgno = stack.pop()
            try:
                flags, page = self.page(pgno)
                if flags & _BRANCH:
                    # a branch node's child: its lo | hi << 16, then its flags as bits 32–47
                    children = [low | nflags << 32 for nflags, low, _, _, _ in self.nodes(page)]
                    stack.extend(reversed(children))
                elif flags & _LEAF:
                    yield from self._leaf(page, last)
                else:
                    raise PageError(f"page flags {flags:#x}: neither a branch nor a leaf")
            except PageError as e:
                on_error(pgno, last[0], str(e))

    def _leaf(self, page: bytes, last: list[bytes]) -> Iterator[tuple[bytes, int, bytes]]:
        # Nodes are checked before any is yielded: a page that is bad halfway gives
        # nothing rather than a half that may be garbage.
        nodes = [(bytes(key), nflags, self.value(page, nflags, size, at))
                 for nflags, size, key, at, _ in self.nodes(page)]
        for key, nflags, value in nodes:
            last[0] = key
            yield key, nflags, value

    def databases(self, on_error) -> dict[bytes, int]:
        """Name → root page of every named database (the main database's entries)."""
        out = {}
        for key, nflags, value in self.walk(self.meta.main_root, on_error):
            if nflags & _SUBDATA and len(value) >= _DB.size:
                out[key] = _DB.unpack_from(value, 0)[7]
        return out

    def free_pages(self, on_error) -> set[int]:
        """The pages LMDB keeps as free, to be reused: older copies of pages a
        transaction changed (copy-on-write) and the pages of deleted records, whose
        bytes stay until a later transaction writes over them. LMDB's free database
        holds, per transaction, the list of pages it freed (an IDL: a u64 count, then
        that many u64 page numbers). In a sound file every page is either reached
        from the current meta page or listed here. A page of the list that cannot
        be read is reported as `walk` reports it."""
        out: set[int] = set()
        for _, _, value in self.walk(self.meta.free_root, on_error):
            if len(value) < 8:
                on_error(self.meta.free_root, b"", "a free-page list shorter than its count")
                continue
            (n,) = struct.unpack_from("<Q", value, 0)
            if len(value) < 8 * (n + 1):
                on_error(self.meta.free_root, b"", f"a free-page list of {n} pages in {len(value)} bytes")
                continue
            out.update(struct.unpack_from(f"<{n}Q", value, 8))
        return out

    @property
    def page_numbers(self) -> range:
        """The pages after the meta pages that the file holds, up to the last one in use."""
        return range(2, min(self.meta.last_page + 1, self.pages))

    def leaves(self, pgnos: Iterable[int] | None = None) -> Iterator[tuple[int, bytes, bytes]]:
        """(page number, key, value) of every leaf page in the file (or among the
        pages `pgnos`), whether a tree still reaches it or not (a page under a
        damaged branch, an older copy of a page, a page LMDB freed): for carving
        records out of a file whose trees are broken. Pages that do not parse are
        passed over in silence."""
        for pgno in self.page_numbers if pgnos is None else pgnos:
            try:
                flags, page = self.page(pgno)
                if flags & (_BRANCH | _LEAF | _OVERFLOW | _META) != _LEAF:
                    continue
                for key, nflags, value in self._leaf(page, [b""]):
                    if not nflags & _SUBDATA:
                        yield pgno, key, value
            except PageError:
                continue
