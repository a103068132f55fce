#!/bin/sh
# Builds the debuginfo fixtures into testdata/debuginfo/bin:
#   dbg_v5, dbg_v4       stripped (.symtab removed), linked by
#                        .gnu_debuglink to dbg_v5.debug / dbg_v4.debug
#                        (DWARF 5 / DWARF 4, split by objcopy --only-keep-debug)
#   dbg_id               stripped, no debuglink: its debug file dbg_id.debug
#                        is found by build ID only
#   dbg_v5.zlib.debug    dbg_v5.debug with SHF_COMPRESSED zlib sections,
#   dbg_v5.zstd.debug    zstd sections, and
#   dbg_v5.gnu.debug     the legacy .zdebug_* form
# -ffile-prefix-map keeps the DWARF (and so the build ID) the same in any
# checkout.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/bin"
mkdir -p "$bin"
cd "$here"
build() { # name dwarf-version [cflags]
	${CC:-cc} -O2 ${3:-} -g -gdwarf-$2 -ffile-prefix-map="$here"=. -Wl,--build-id=sha1 -o "$bin/$1" dbg.c
	objcopy --only-keep-debug "$bin/$1" "$bin/$1.debug"
	strip --strip-all "$bin/$1"
}
build dbg_v5 5
build dbg_v4 4
build dbg_id 5 -fno-inline  # another build ID than dbg_v5
# The link is added from inside bin: it records the base name.
(cd "$bin" && objcopy --add-gnu-debuglink=dbg_v5.debug dbg_v5 && objcopy --add-gnu-debuglink=dbg_v4.debug dbg_v4)
objcopy --compress-debug-sections=zlib "$bin/dbg_v5.debug" "$bin/dbg_v5.zlib.debug"
objcopy --compress-debug-sections=zstd "$bin/dbg_v5.debug" "$bin/dbg_v5.zstd.debug"
objcopy --compress-debug-sections=zlib-gnu "$bin/dbg_v5.debug" "$bin/dbg_v5.gnu.debug"

# mini: stripped, with MiniDebugInfo (.gnu_debugdata) made as Fedora's
# find-debuginfo does: the .symtab functions that .dynsym lacks, in an ELF
# file of symbols only, xz-compressed. mini.debug keeps the full .symtab
# (found by no rule: no debuglink, not in a debug directory) for the
# tests to compare with.
mini() {
	tmp=$(mktemp -d)
	${CC:-cc} -O2 -g0 -Wl,--build-id=sha1 -o "$bin/mini" mini.c
	objcopy --only-keep-debug "$bin/mini" "$bin/mini.debug"
	nm -D "$bin/mini" --format=posix --defined-only | awk '{print $1}' | sort >"$tmp/dynsyms"
	nm "$bin/mini" --format=posix --defined-only | awk '$2 == "T" || $2 == "t" {print $1}' | sort >"$tmp/funcsyms"
	comm -13 "$tmp/dynsyms" "$tmp/funcsyms" >"$tmp/keep"
	objcopy -S --remove-section .gdb_index --remove-section .comment --keep-symbols="$tmp/keep" "$bin/mini.debug" "$tmp/mini_debuginfo"
	strip --strip-all -R .comment "$bin/mini"
	xz --threads=1 "$tmp/mini_debuginfo"
	objcopy --add-section .gnu_debugdata="$tmp/mini_debuginfo.xz" "$bin/mini"
	rm -rf "$tmp"
}
mini
