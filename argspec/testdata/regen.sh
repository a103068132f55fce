#!/bin/sh
# Regenerates the committed argument strings. Run from the repository root.
#   regen.sh          the fixtures' (after `make testdata` built them):
#                     the same bytes in any checkout
#   regen.sh system   the system programs' (`make testdata-system`), on
#                     Debian 12 with python3.11-minimal, postgresql-15,
#                     openjdk-17-jre-headless and libruby3.1 installed;
#                     each file names the package version it came from,
#                     so it changes when the package is upgraded
set -eu
d=argspec/testdata
x=$d/extract.sh
if [ "${1:-}" = system ]; then
	$x /usr/bin/python3.11 > $d/python3.11.args
	$x /usr/lib/postgresql/15/bin/postgres > $d/postgres15.args
	$x /usr/lib/jvm/java-17-openjdk-amd64/lib/server/libjvm.so > $d/libjvm17.args
	$x /usr/lib/x86_64-linux-gnu/libruby-3.1.so.3.1.2 > $d/libruby3.1.args
	exit
fi
for f in usdt_sample usdt_sample_O0 usdt_sample_i386 usdt_sample_aarch64 usdt_sample_armhf \
	usdt_sample_s390x usdt_sample_riscv64 usdt_sample_ppc64le usdt_sample_ppc64; do
	$x testdata/bin/$f > $d/$f.args
done
