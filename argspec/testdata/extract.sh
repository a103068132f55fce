#!/bin/sh
# Extracts the USDT argument strings of an ELF file as "provider:name<TAB>args",
# one note per line, in note order. Usage: extract.sh ELF > NAME.args
# The committed *.args files were produced with GNU readelf (binutils 2.40)
# on Debian 12; regenerate them with argspec/testdata/regen.sh.
set -eu
printf '# %s\n' "$1"
# The Debian package and version the file came from, when dpkg knows it.
pkg=$(dpkg -S "$1" 2>/dev/null | cut -d: -f1 | head -n1) || true
if [ -n "$pkg" ]; then
	printf '# %s %s\n' "$pkg" "$(dpkg-query -W -f='${Version}' "$pkg")"
fi
LC_ALL=C readelf -n "$1" | awk '
	/^ *Provider: / { sub(/^ *Provider: /, ""); p = $0 }
	/^ *Name: /     { sub(/^ *Name: /, ""); n = $0 }
	/^ *Arguments:/ { sub(/^ *Arguments: ?/, ""); printf "%s:%s\t%s\n", p, n, $0 }
'
