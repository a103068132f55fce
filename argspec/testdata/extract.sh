#!/bin/sh
# Extracts the USDT argument strings of an ELF file as "provider:name<TAB>args",
# one note per line, in note order. Usage: extract.sh ELF > NAME.args
# The committed *.args files were produced with GNU readelf (binutils 2.40).
set -eu
printf '# %s\n' "$1"
LC_ALL=C readelf -n "$1" | awk '
	/^ *Provider: / { sub(/^ *Provider: /, ""); p = $0 }
	/^ *Name: /     { sub(/^ *Name: /, ""); n = $0 }
	/^ *Arguments:/ { sub(/^ *Arguments: ?/, ""); printf "%s:%s\t%s\n", p, n, $0 }
'
