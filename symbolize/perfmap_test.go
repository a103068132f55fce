package symbolize

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/probekit/probekit/internal/test/testkit"
	"github.com/probekit/probekit/procmaps"
)

func TestParsePerfMap(t *testing.T) {
	in := "" +
		"1000 10 first\n" +
		"0x2000 0x20 with spaces in [eval]:1:25\n" +
		"garbage\n" +
		"3000 0 zero size\n" +
		"ffffffffffffff00 200 wraps\n" +
		"4000 10\n" +
		"zz 10 nothex\n" +
		"1008 4 later overlap\r\n" +
		"\n" +
		"5000 100 outer\n" +
		"5010 10 inner\n"
	m, err := ParsePerfMap(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if m.Bad != 5 || m.Len() != 5 || m.Truncated {
		t.Fatalf("bad %d, len %d, truncated %v", m.Bad, m.Len(), m.Truncated)
	}
	for _, c := range []struct {
		addr uint64
		name string
		off  uint64
	}{
		{0x1000, "first", 0}, {0x1007, "first", 7}, {0x1008, "later overlap", 0}, {0x100b, "later overlap", 3},
		{0x100c, "first", 0xc}, {0x1010, "", 0}, {0x201f, "with spaces in [eval]:1:25", 0x1f},
		{0x2020, "", 0}, {0x5000, "outer", 0}, {0x5010, "inner", 0}, {0x5020, "outer", 0x20}, {0xfff, "", 0},
	} {
		name, off, ok := m.Lookup(c.addr)
		if name != c.name || off != c.off || ok != (c.name != "") {
			t.Errorf("%#x: %q+%#x %v, want %q+%#x", c.addr, name, off, ok, c.name, c.off)
		}
	}
}

// TestParsePerfMapCeilings: a name is cut at MaxPerfMapName; a file
// beyond MaxPerfMapBytes is read up to it.
func TestParsePerfMapCeilings(t *testing.T) {
	long := "1000 10 " + strings.Repeat("n", MaxPerfMapName+100) + "\n"
	m, err := ParsePerfMap(strings.NewReader(long))
	if err != nil {
		t.Fatal(err)
	}
	if name, _, _ := m.Lookup(0x1000); len(name) != MaxPerfMapName {
		t.Fatalf("name of %d bytes", len(name))
	}
	line := []byte("1000 10 x\n")
	big := bytes.Repeat(line, 1000)
	m, err = parsePerfMap(bytes.NewReader(big), 100*len(line)+5, 1000)
	if err != nil || !m.Truncated || m.Len() != 100 || m.Bad != 0 {
		t.Fatalf("bytes ceiling: truncated %v, len %d, bad %d, %v", m.Truncated, m.Len(), m.Bad, err)
	}
	m, err = parsePerfMap(bytes.NewReader(big), len(big), 10)
	if err != nil || !m.Truncated || m.Len() != 10 {
		t.Fatalf("entries ceiling: truncated %v, len %d, %v", m.Truncated, m.Len(), err)
	}
}

func FuzzPerfMap(f *testing.F) {
	f.Add([]byte("e32c7114d9e 26 JS:~probekitHotLoop [eval]:1:25\n7f28937c5900 12c JS:^probekitHotLoop [eval]:1:25\n"))
	f.Add([]byte("0x7f0000001000 0x40 Lcom/example/Foo;bar\n7f0000001000 10 later\n"))
	f.Add([]byte("1000 10 a\n1008 ffffffffffffffff b\n\r\n  \t 5 5 c d\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := ParsePerfMap(bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		if m.Len()+m.Bad > bytes.Count(data, []byte("\n"))+1 {
			t.Fatalf("%d entries and %d bad lines from %d lines", m.Len(), m.Bad, bytes.Count(data, []byte("\n"))+1)
		}
		for _, e := range m.entries {
			for _, a := range []uint64{e.start, e.end - 1, e.start - 1, e.end} {
				name, off, ok := m.Lookup(a)
				if ok && (name == "" || len(name) > MaxPerfMapName) {
					t.Fatalf("%#x: name %q", a, name)
				}
				_ = off
			}
			if name, _, ok := m.Lookup(e.start); !ok || name == "" {
				t.Fatalf("entry %+v not found at its start", e)
			}
		}
	})
}

// startNode runs node with --perf-basic-prof and a named JavaScript
// function in a loop; it returns the process and, once node's perf map
// names the function in anonymous executable memory, that entry.
func startNode(tb testing.TB) (cmd *exec.Cmd, addr uint64, name string) {
	tb.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		testkit.Unavailable(tb, "no node: %v", err)
	}
	cmd = exec.Command(node, "--perf-basic-prof", "-e",
		`function probekitHotLoop(n){let s=0;for(let i=0;i<n;i++)s+=i*i%7;return s}
		 setInterval(()=>{probekitHotLoop(100000)},1)`)
	cmd.Dir = tb.TempDir() // node writes isolate-*-v8.log files there
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	pid := cmd.Process.Pid
	path := "/tmp/perf-" + strconv.Itoa(pid) + ".map"
	tb.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		os.Remove(path)
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for ctx.Err() == nil {
		time.Sleep(20 * time.Millisecond)
		data, _ := os.ReadFile(path)
		var ms []procmaps.Mapping
		for _, line := range strings.Split(string(data), "\n") {
			f := strings.SplitN(line, " ", 3)
			if len(f) != 3 || !strings.Contains(f[2], "probekitHotLoop") {
				continue
			}
			a, err := strconv.ParseUint(f[0], 16, 64)
			if err != nil {
				continue
			}
			if ms == nil {
				pp, err := procmaps.Open(pid)
				if err != nil {
					tb.Fatal(err)
				}
				if ms, _, err = pp.Mappings(); err != nil {
					tb.Fatal(err)
				}
			}
			for _, m := range ms {
				if m.Start <= a && a < m.End && m.Perms&procmaps.Exec != 0 && !m.FileBacked() {
					addr, name = a, f[2]
				}
			}
		}
		if name != "" {
			return cmd, addr, name
		}
	}
	tb.Fatalf("node's perf map %s names no probekitHotLoop in executable anonymous memory within 20s", path)
	return nil, 0, ""
}

// TestSymbolizeNodePerfMap: an address in a JavaScript function node compiled is
// named from /tmp/perf-PID.map.
func TestSymbolizeNodePerfMap(t *testing.T) {
	cmd, addr, name := startNode(t)
	p, err := New(nil).Process(cmd.Process.Pid)
	if err != nil {
		t.Fatal(err)
	}
	frames, err := p.Symbolize([]uint64{addr + 1})
	if err != nil {
		t.Fatal(err)
	}
	fr := frames[0]
	if fr.Function != name || fr.Offset != 1 || fr.Object != "/tmp/perf-"+strconv.Itoa(cmd.Process.Pid)+".map" {
		t.Fatalf("%#x: %+v, want %s+0x1", addr+1, fr, name)
	}
}
