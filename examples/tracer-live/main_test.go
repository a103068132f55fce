package main

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
)

func TestMain(m *testing.M) { os.Exit(testkit.RunWithLeakCheck(m)) }

// The fixture fires sample:sizes 4 times and sample:zero twice after
// start returned: report, its context ended, stops the trace and prints
// those counts.
func TestReport(t *testing.T) {
	testkit.RequireKernel(t)
	fixture := testkit.Fixture("usdt_sample")
	p := testkit.Start(t, fixture)
	ctx, cancel := context.WithCancel(context.Background())
	tr, err := start(ctx, p.PID(), []string{fixture + ":sample:sizes", fixture + ":sample:zero"})
	if err != nil {
		t.Fatal(err)
	}
	p.Fire("sizes", 4)
	p.Fire("zero", 2)
	cancel()
	var out bytes.Buffer
	if err := report(ctx, tr, time.Hour, &out); err != nil {
		t.Fatal(err)
	}
	if want := "         4 sample:sizes\n         2 sample:zero\n"; out.String() != want {
		t.Errorf("printed %q, want %q", out.String(), want)
	}
}
