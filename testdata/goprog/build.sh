#!/bin/sh
# Builds the Go fixture of the uprobe tests into testdata/bin:
#   goprog                 amd64, with symbol table (-w: no DWARF, to stay small)
#   goprog_stripped        amd64, -s -w (functions only in .gopclntab)
#   goprog_arm64           arm64, with symbol table (return-site scanner test)
# Run from anywhere; the lead's `make testdata` calls it.
# -trimpath and -buildvcs=false keep the output reproducible.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
bin="$here/../bin"
mkdir -p "$bin"
cd "$here"
build() {
	out=$1
	shift
	CGO_ENABLED=0 go build -trimpath -buildvcs=false "$@" -o "$bin/$out" ./main.go
}
GOOS=linux GOARCH=amd64 build goprog -ldflags='-w'
GOOS=linux GOARCH=amd64 build goprog_stripped -ldflags='-s -w'
GOOS=linux GOARCH=arm64 build goprog_arm64 -ldflags='-w'
