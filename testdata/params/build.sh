#!/bin/sh
# Builds the named-argument fixtures into testdata/params/bin:
#   params_O2, params_O0   params.c, gcc -g -O2 / -O0 (DWARF 5; -O0's
#                          locations are stack slots of the callee's frame)
#   params_v4              params.c, gcc -g -O2 -gdwarf-4 (.debug_loc)
#   params_stripped        params_O2 stripped, linked by .gnu_debuglink to
#                          params_stripped.debug (objcopy --only-keep-debug)
#   params_dwz, params_dwz.sup
#                          params_O2 and a copy of it through dwz -m: the
#                          entries and strings they share (base types, const
#                          char *, struct point, function names) moved to the
#                          common file params_dwz.sup, named by
#                          .gnu_debugaltlink (DW_FORM_GNU_ref_alt,
#                          DW_FORM_GNU_strp_alt)
#   params_dwz5, params_dwz5.sup
#                          the same with dwz --dwarf-5: .debug_sup,
#                          DW_FORM_ref_sup4, DW_FORM_strp_sup
#   strings                strings.c, gcc -g -O2: a string literal in a
#                          page not mapped at the call, escape bytes, a
#                          hostile comm
#   params_cc              params.cc, g++ -g -O2
#   params_clang           params.c, clang-19 -g -O2 (DWARF 5 with
#                          DW_FORM_loclistx); read, not run: clang has no
#                          noipa and may inline the calls
#   params_arm64           params.c for AArch64 (aarch64-linux-gnu-gcc -g -O2):
#                          read, not run
#   goparams               ../goparams, go build with DWARF (no -w)
# -ffile-prefix-map and -trimpath keep the output the same in any checkout.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/bin"
mkdir -p "$bin"
cd "$here"
cc() { # out cflags...
	out=$1
	shift
	${CCX:-${CC:-gcc}} -Wall -Wextra -g -ffile-prefix-map="$here"=. "$@" -o "$bin/$out" params.c
}
cc params_O2 -O2 -gdwarf-5
cc params_O0 -O0 -gdwarf-5
cc params_v4 -O2 -gdwarf-4
${CC:-gcc} -Wall -Wextra -g -ffile-prefix-map="$here"=. -O2 -gdwarf-5 -o "$bin/strings" strings.c
CCX=aarch64-linux-gnu-gcc cc params_arm64 -O2 -gdwarf-5
CCX=clang-19 cc params_clang -O2 -gdwarf-5 -Wno-unknown-attributes
cp "$bin/params_O2" "$bin/params_stripped"
objcopy --only-keep-debug "$bin/params_stripped" "$bin/params_stripped.debug"
strip --strip-all "$bin/params_stripped"
(cd "$bin" && objcopy --add-gnu-debuglink=params_stripped.debug params_stripped)
for v in dwz dwz5; do
	opt=
	[ $v = dwz5 ] && opt=--dwarf-5
	cp "$bin/params_O2" "$bin/params_$v"
	cp "$bin/params_O2" "$bin/params_$v.copy"
	dwz $opt -m "$bin/params_$v.sup" -M "params_$v.sup" "$bin/params_$v" "$bin/params_$v.copy"
	rm "$bin/params_$v.copy"
done
# dwz 0.15 --dwarf-5 writes a .debug_sup checksum that differs from run to
# run; both files get the SHA-1 of the common file's .debug_info instead
# (DWARF 5 §7.3.6: version 5, is_supplementary, the file name, the
# checksum's length and bytes), so the build is reproducible.
tmp=$(mktemp -d)
objcopy --dump-section .debug_info="$tmp/info" "$bin/params_dwz5.sup" "$tmp/unused"
sum=$(sha1sum "$tmp/info" | cut -c1-40 | tr a-f A-F)
{ printf '\005\000\000params_dwz5.sup\000\024'; printf %s "$sum" | basenc --base16 -d; } >"$tmp/link"
{ printf '\005\000\001\000\024'; printf %s "$sum" | basenc --base16 -d; } >"$tmp/sup"
objcopy --update-section .debug_sup="$tmp/link" "$bin/params_dwz5"
objcopy --update-section .debug_sup="$tmp/sup" "$bin/params_dwz5.sup"
rm -r "$tmp"
${CXX:-g++} -Wall -Wextra -g -O2 -ffile-prefix-map="$here"=. -o "$bin/params_cc" params.cc
cd ../goparams
CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -buildvcs=false -o "$bin/goparams" .
