#!/bin/sh
# Builds the C fixture of the uprobe tests into testdata/bin/malloc_user.
# -fcf-protection puts ENDBR64 at each function entry (the return-site
# scanner's hard case); -O2 gives classify() one RET per return path.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/../bin"
mkdir -p "$bin"
${CC:-cc} -O2 -g0 -fcf-protection=full -o "$bin/malloc_user" "$here/malloc_user.c"
