package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/test/testkit"
)

// benchLatency is BenchmarkTraceCount's latency cases: probekit trace
// --latency and bpftrace's @start[tid] idiom on the same fixture loop.
func benchLatency(b *testing.B) {
	fx := testkit.Fixture("latency")
	b.Run("trace_latency_pair", func(b *testing.B) {
		benchTraceLatency(b, fx, "pair", fx+":lat:start", fx+":lat:done")
	})
	b.Run("bpftrace_latency_pair", func(b *testing.B) {
		benchBpftrace(b, fx, "pair", "cpu-ns/pair", fmt.Sprintf("usdt:%[1]s:lat:start { @start[tid] = nsecs; } "+
			"usdt:%[1]s:lat:done /@start[tid]/ { @ns = hist(nsecs - @start[tid]); delete(@start[tid]); }", fx),
			"uprobe:"+fx+":lat_fn", "fn")
	})
	b.Run("trace_latency_func", func(b *testing.B) {
		benchTraceLatency(b, fx, "fn", "uprobe:"+fx+":lat_fn")
	})
	b.Run("bpftrace_latency_func", func(b *testing.B) {
		benchBpftrace(b, fx, "fn", "cpu-ns/pair", fmt.Sprintf("uprobe:%[1]s:lat_fn { @start[tid] = nsecs; } "+
			"uretprobe:%[1]s:lat_fn /@start[tid]/ { @ns = hist(nsecs - @start[tid]); delete(@start[tid]); }", fx),
			"usdt:"+fx+":lat:start", "pair")
	})
}

// benchTraceLatency runs probekit trace --latency -p on the fixture's
// command and checks that it timed every round.
func benchTraceLatency(b *testing.B, fixture, command string, probes ...string) {
	p := testkit.Start(b, fixture)
	finish := traceLatencyPID(b, p, probes...)
	b.ResetTimer()
	loopCPUOf(b, p, command, "cpu-ns/pair")
	b.StopTimer()
	var n uint64
	for _, bk := range finish().Buckets {
		n += bk.Count
	}
	if n != uint64(b.N) {
		b.Fatalf("timed %d pairs, want %d", n, b.N)
	}
}

// traceLatencyPID runs probekit trace --json --latency -i 1 -p on p's
// process and waits for a printed histogram (it prints once attached).
// finish stops the process, which ends the trace, and returns the final
// histogram of the first start probe.
func traceLatencyPID(tb testing.TB, p *testkit.Process, probes ...string) (finish func() latLine) {
	tb.Helper()
	var out, errOut testkit.Buffer
	done := make(chan int, 1)
	go func() {
		args := append([]string{"trace", "--json", "--latency", "-i", "1", "-p", itoa(p.PID())}, probes...)
		done <- run(args, &out, &errOut)
	}()
	for deadline := time.Now().Add(30 * time.Second); !strings.Contains(out.String(), `"buckets"`); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			tb.Fatalf("no histogram printed within 30s: %s", errOut.String())
		}
	}
	return func() latLine {
		tb.Helper()
		p.Stop()
		if code := <-done; code != 0 {
			tb.Fatalf("exit %d: %s", code, errOut.String())
		}
		if e := errOut.String(); e != "" {
			tb.Logf("probekit trace: %s", e)
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		var l latLine
		if err := json.Unmarshal([]byte(lines[len(lines)-1]), &l); err != nil {
			tb.Fatal(err)
		}
		return l
	}
}

// progStats snapshots the statistics of every BPF program on the host.
func progStats() map[ebpf.ProgramID]ebpf.ProgramStats {
	out := map[ebpf.ProgramID]ebpf.ProgramStats{}
	for id, err := ebpf.ProgramGetNextID(0); err == nil; id, err = ebpf.ProgramGetNextID(id) {
		prog, err := ebpf.NewProgramFromID(id)
		if err != nil {
			continue // gone since
		}
		if st, err := prog.Stats(); err == nil {
			out[id] = *st
		}
		prog.Close()
	}
	return out
}

// progRuntime is the run time, since before, of the programs that ran n
// or 2n times (a probe's program, or one program at both probes of a
// pair): the programs of the n rounds of a benchmark, whichever tool
// loaded them. Another tool's program that ran exactly as often would
// count too. ok is false when none did (statistics are off).
func progRuntime(before map[ebpf.ProgramID]ebpf.ProgramStats, n int) (ns time.Duration, ok bool) {
	for id, st := range progStats() {
		old, seen := before[id]
		if !seen {
			continue
		}
		if d := st.RunCount - old.RunCount; d == uint64(n) || d == 2*uint64(n) {
			ns += st.Runtime - old.Runtime
			ok = true
		}
	}
	return ns, ok
}

// bpftraceHist matches a line of a bpftrace hist(): "[4K, 8K)  12 |@@ |".
var bpftraceHist = regexp.MustCompile(`^\[[^)\]]*[)\]]\s+(\d+) \|`)

// filteredOut matches the filters of the benchmarks' bpftrace scripts
// that no hit passes.
var filteredOut = regexp.MustCompile(`/\(int64\)arg[02] [<>] 0/`)

// benchBpftrace runs bpftrace -p on the fixture with script, plus a last
// probe, marker, that prints once its probes are attached (bpftrace
// attaches them in the script's order), fired by markerCmd until it
// does. It checks that bpftrace counted every round: the sum of @'s
// counts or of @ns's buckets; none for a script that filters all out.
func benchBpftrace(b *testing.B, fixture, command, unit, script, marker, markerCmd string) {
	bt, err := exec.LookPath("bpftrace")
	if err != nil {
		testkit.Unavailable(b, "no bpftrace (make deps): %v", err)
	}
	p := testkit.Start(b, fixture)
	script += fmt.Sprintf(" %s { printf(\"attached\\n\"); }", marker)
	cmd := exec.Command(bt, "-B", "line", "-p", itoa(p.PID()), "-e", script)
	runBpftrace(b, cmd, p, command, unit, func() error { return p.Loop(markerCmd, 1) })
}

func runBpftrace(b *testing.B, cmd *exec.Cmd, p *testkit.Process, command, unit string, fireMarker func() error) {
	var errOut bytes.Buffer
	cmd.Stderr = &errOut
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	exited := false
	defer func() {
		if !exited {
			cmd.Process.Kill()
			cmd.Wait()
		}
	}()
	var attached atomic.Bool
	var mu testkit.Buffer
	read := make(chan struct{})
	go func() {
		defer close(read)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if sc.Text() == "attached" {
				attached.Store(true)
			}
			mu.Write(append(sc.Bytes(), '\n'))
		}
	}()
	for deadline := time.Now().Add(60 * time.Second); !attached.Load(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			b.Fatalf("bpftrace not attached within 60s: %s", errOut.String())
		}
		if err := fireMarker(); err != nil {
			b.Fatal(err)
		}
	}
	b.ResetTimer()
	loopCPUOf(b, p, command, unit)
	b.StopTimer()
	cmd.Process.Signal(syscall.SIGINT)
	<-read
	err = cmd.Wait()
	exited = true
	if err != nil {
		b.Fatalf("bpftrace: %v: %s", err, errOut.String())
	}
	// @[comm]: N, @: N, or @ns's histogram lines.
	var n uint64
	for _, line := range strings.Split(mu.String(), "\n") {
		if m := bpftraceHist.FindStringSubmatch(line); m != nil {
			c, _ := strconv.ParseUint(m[1], 10, 64)
			n += c
		} else if strings.HasPrefix(line, "@") && !strings.HasPrefix(line, "@ns") && !strings.HasPrefix(line, "@start") {
			if i := strings.LastIndex(line, ": "); i >= 0 {
				c, _ := strconv.ParseUint(line[i+2:], 10, 64)
				n += c
			}
		}
	}
	want := uint64(b.N)
	if filteredOut.MatchString(cmd.Args[len(cmd.Args)-1]) {
		want = 0
	}
	if n != want {
		b.Fatalf("bpftrace counted %d, want %d:\n%s", n, want, mu.String())
	}
}
