#!/usr/bin/python3
"""Makes dwz --dwarf-5's output reproducible: rewrites the checksum of the
.debug_sup section of MAIN and SUP (the same bytes in both, DWARF 5
section 7.3.6) with the SHA-1 of SUP whose checksum bytes are zeroed.

usage: sup_checksum.py MAIN SUP   (64-bit little-endian ELF files)
"""
import hashlib
import struct
import sys


def debug_sup(data):
    """Offset and length of the checksum bytes of data's .debug_sup."""
    shoff, = struct.unpack_from("<Q", data, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 0x3A)
    def section(i):
        return struct.unpack_from("<IIQQQQIIQQ", data, shoff + i * shentsize)
    strtab = section(shstrndx)
    for i in range(shnum):
        sh = section(i)
        at = strtab[4] + sh[0]
        name = data[at:data.index(b"\0", at)]
        if name != b".debug_sup":
            continue
        off = sh[4] + 3  # version (2 bytes), is_supplementary (1)
        off = data.index(b"\0", off) + 1  # the file name
        n, shift = 0, 0
        while True:  # the checksum's length, ULEB128
            b = data[off]
            off += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                break
        if off + n > sh[4] + sh[5]:
            sys.exit("checksum past the end of .debug_sup")
        return off, n
    sys.exit("no .debug_sup")


def main():
    main_path, sup_path = sys.argv[1:3]
    sup = bytearray(open(sup_path, "rb").read())
    off, n = debug_sup(sup)
    sup[off:off + n] = bytes(n)
    digest = hashlib.sha1(sup).digest()
    if n > len(digest):
        sys.exit("checksum of %d bytes" % n)
    for path in (main_path, sup_path):
        data = bytearray(open(path, "rb").read())
        off, m = debug_sup(data)
        if m != n:
            sys.exit("%s: checksum of %d bytes, %s has %d" % (path, m, sup_path, n))
        data[off:off + n] = digest[:n]
        open(path, "wb").write(data)


main()
