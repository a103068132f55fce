#!/bin/sh
# Builds the named-argument fixtures into testdata/params/bin:
#   params_O2, params_O0   params.c, gcc -g -O2 / -O0 (DWARF 5; -O0's
#                          locations are stack slots of the callee's frame)
#   params_v4              params.c, gcc -g -O2 -gdwarf-4 (.debug_loc)
#   params_stripped        params_O2 stripped, linked by .gnu_debuglink to
#                          params_stripped.debug (objcopy --only-keep-debug)
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
CCX=aarch64-linux-gnu-gcc cc params_arm64 -O2 -gdwarf-5
CCX=clang-19 cc params_clang -O2 -gdwarf-5 -Wno-unknown-attributes
cp "$bin/params_O2" "$bin/params_stripped"
objcopy --only-keep-debug "$bin/params_stripped" "$bin/params_stripped.debug"
strip --strip-all "$bin/params_stripped"
(cd "$bin" && objcopy --add-gnu-debuglink=params_stripped.debug params_stripped)
${CXX:-g++} -Wall -Wextra -g -O2 -ffile-prefix-map="$here"=. -o "$bin/params_cc" params.cc
cd ../goparams
CGO_ENABLED=0 GOOS=linux GOARCH=amd64 go build -trimpath -buildvcs=false -o "$bin/goparams" .
