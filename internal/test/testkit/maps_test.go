package testkit

import (
	"bufio"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
)

// mainBase returns the lowest mapping of the process's executable.
func mainBase(t *testing.T, pid int) uint64 {
	t.Helper()
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		fields := strings.Fields(s.Text())
		if len(fields) >= 6 && fields[5] == exe && fields[2] == "00000000" {
			start, _, _ := strings.Cut(fields[0], "-")
			v, err := strconv.ParseUint(start, 16, 64)
			if err != nil {
				t.Fatal(err)
			}
			return v
		}
	}
	t.Fatalf("no mapping of %s in pid %d", exe, pid)
	return 0
}
