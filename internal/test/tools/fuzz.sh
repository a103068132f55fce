#!/bin/sh
# Runs every Fuzz target of every package for $FUZZTIME each, prints each
# target's last executions-per-second figure, and goes on after a failure:
# the exit status is 1 if any target failed. A target that fails only with
# Go's coordinator error "context deadline exceeded" (the fuzzing engine,
# not a crasher) is run once more before it counts as failed. $PKGS
# narrows the packages (default ./...).
go=${GO:-go}
fuzztime=${FUZZTIME:-60s}
failed=""
for pkg in $($go list ${PKGS:-./...}); do
	for f in $($go test -list '^Fuzz' "$pkg" | grep '^Fuzz' || true); do
		for try in 1 2; do
			out=$($go test -run '^$' -fuzz "^$f\$" -fuzztime "$fuzztime" -fuzzminimizetime 0 "$pkg" 2>&1)
			rc=$?
			if [ $rc -eq 0 ] || ! printf '%s\n' "$out" | grep -q 'context deadline exceeded'; then
				break
			fi
		done
		# The last progress line: "fuzz: elapsed: 20s, execs: 81234 (...)".
		rate=$(printf '%s\n' "$out" | grep -o 'elapsed: [0-9]*s, execs: [0-9]*' | tail -1 |
			awk '{ s = $2 + 0; n = $4 + 0; if (s > 0) printf "%d executions in %ds, %d/s", n, s, n / s }')
		echo "$pkg $f: ${rate:-no executions reported}"
		if [ $rc -ne 0 ]; then
			printf '%s\n' "$out"
			failed="$failed $pkg.$f"
		fi
	done
done
if [ -n "$failed" ]; then
	echo "failed:$failed"
	exit 1
fi
