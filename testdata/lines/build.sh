#!/bin/sh
# Builds the line-table fixtures into testdata/lines/bin, each carrying its
# own DWARF:
#   lines_c_v4, lines_c_v5       lines.c, gcc -g -O2, DWARF 4 / DWARF 5
#   lines_cc_v4, lines_cc_v5     lines.cc, g++ -g -O2, DWARF 4 / DWARF 5
#   lines_c_split                lines.c, gcc -g -O2 -gsplit-dwarf: a skeleton
#                                unit; its .dwo is removed (Lines reads none)
#   lines_rs                     lines.rs, rustc -g -C opt-level=2, LTO (when
#                                rustc is installed; the built file is
#                                committed)
#   lines_dwz, lines_dwz.sup     lines_c_v5 and a copy of it through dwz -m:
#                                the shared entries and strings moved to the
#                                common file lines_dwz.sup, named by
#                                .gnu_debugaltlink (DW_FORM_GNU_ref_alt,
#                                DW_FORM_GNU_strp_alt)
#   lines_dwz5, lines_dwz5.sup   the same with dwz --dwarf-5: .debug_sup,
#                                DW_FORM_ref_sup4, DW_FORM_strp_sup
# -ffile-prefix-map (--remap-path-prefix for rustc) keeps the DWARF the
# same in any checkout.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/bin"
mkdir -p "$bin"
cd "$here"
for v in 4 5; do
	${CC:-gcc} -O2 -g -gdwarf-$v -ffile-prefix-map="$here"=. -o "$bin/lines_c_v$v" lines.c
	${CXX:-g++} -O2 -g -gdwarf-$v -ffile-prefix-map="$here"=. -o "$bin/lines_cc_v$v" lines.cc
done
# -o relative to $here: the skeleton unit names its .dwo by the output path.
${CC:-gcc} -O2 -g -gsplit-dwarf -ffile-prefix-map="$here"=. -o bin/lines_c_split lines.c
rm -f "$bin"/*.dwo ./*.dwo
if command -v rustc >/dev/null; then
	rustc -g -C opt-level=2 -C lto=fat -C panic=abort -C codegen-units=1 --remap-path-prefix="$here"=. -o "$bin/lines_rs" lines.rs
fi
for v in dwz dwz5; do
	opt=
	[ $v = dwz5 ] && opt=--dwarf-5
	cp "$bin/lines_c_v5" "$bin/lines_$v"
	cp "$bin/lines_c_v5" "$bin/lines_$v.copy"
	dwz $opt -m "$bin/lines_$v.sup" -M "lines_$v.sup" "$bin/lines_$v" "$bin/lines_$v.copy"
	rm "$bin/lines_$v.copy"
done
# dwz 0.15 --dwarf-5 fills .debug_sup's checksum with bytes that differ
# from run to run on the same input; sup_checksum.py replaces them in both
# files with the SHA-1 of the supplementary file with its checksum zeroed.
/usr/bin/python3 "$here/sup_checksum.py" "$bin/lines_dwz5" "$bin/lines_dwz5.sup"
