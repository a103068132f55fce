package tracer

import (
	"strings"
	"testing"

	"github.com/probekit/probekit/record"
)

// The readable forms: a count table, and histograms as bpftrace draws
// them.
func TestAggregateText(t *testing.T) {
	b := appendCountTable(nil, []probeTotals{{label: "sample:loop", count: 1234567}, {label: "uprobe:malloc", count: 3}})
	want := "  COUNT  PROBE\n1234567  sample:loop\n      3  uprobe:malloc\n"
	if string(b) != want {
		t.Errorf("count table:\n%s\nwant:\n%s", b, want)
	}
	var h record.Histogram
	h[record.Bucket(-5)] = 1
	h[record.Bucket(5)] = 2
	h[record.Bucket(4096)] = 4
	b = appendHistText(nil, "uprobe:malloc", &h)
	lines := strings.Split(strings.TrimSuffix(string(b), "\n"), "\n")
	bar := func(n int) string { return "|" + strings.Repeat("@", n) + strings.Repeat(" ", histBarWidth-n) + "|" }
	wantLines := []string{
		"uprobe:malloc",
		"(..., 0)                1 " + bar(13),
		"[0]                     0 " + bar(0),
		"[1]                     0 " + bar(0),
		"[2, 4)                  0 " + bar(0),
		"[4, 8)                  2 " + bar(26),
	}
	if len(lines) != 16 || strings.Join(lines[:6], "\n") != strings.Join(wantLines, "\n") ||
		lines[15] != "[4K, 8K)                4 "+bar(52) || lines[14] != "[2K, 4K)                0 "+bar(0) {
		t.Errorf("histogram:\n%s", b)
	}
	if got := bucketLabel(record.NumBuckets - 1); got != "[4E, 8E)" {
		t.Errorf("last bucket %q", got)
	}
}
