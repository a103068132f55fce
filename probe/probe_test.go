package probe

import (
	"strings"
	"testing"

	"github.com/probekit/probekit/record"
)

// FuzzParse: no panic, and what parses has the fields of its kind.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"uprobe:libc.so.6:malloc",
		"uretprobe:/a:b/prog:main.(*Server).Handle",
		"usdt:python3.11:python:function__entry",
		"/usr/lib/postgresql/15/bin/postgres:postgresql:query__start",
		"*:python:function__entry",
		"uprobe:x:",
		"usdt:uprobe:p:n",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		p, err := Parse(s)
		if err != nil {
			if p != (Spec{}) {
				t.Fatalf("%q: %v and %+v", s, err, p)
			}
			return
		}
		switch p.Kind {
		case record.KindUSDT:
			if p.Target == "" || p.Provider == "" || p.Name == "" || p.Func != "" {
				t.Fatalf("%q: %+v", s, p)
			}
		case record.KindUprobe, record.KindUretprobe:
			if p.Target == "" || p.Func == "" || strings.Contains(p.Func, ":") || p.Provider != "" || p.Name != "" {
				t.Fatalf("%q: %+v", s, p)
			}
		default:
			t.Fatalf("%q: kind %v", s, p.Kind)
		}
	})
}

// The PROBE grammar: a prefix picks the kind; FUNC follows the last colon
// (function names hold none, paths may); no prefix is USDT.
func TestParseProbe(t *testing.T) {
	for _, c := range []struct {
		in   string
		want Spec
	}{
		{"uprobe:libc.so.6:malloc", Spec{Kind: record.KindUprobe, Target: "libc.so.6", Func: "malloc"}},
		{"uretprobe:/a:b/prog:main.(*Server).Handle", Spec{Kind: record.KindUretprobe, Target: "/a:b/prog", Func: "main.(*Server).Handle"}},
		{"uprobe:node:uv_fs_*", Spec{Kind: record.KindUprobe, Target: "node", Func: "uv_fs_*"}},
		{"uprobe:libc.so.6:malloc@@GLIBC_2.2.5", Spec{Kind: record.KindUprobe, Target: "libc.so.6", Func: "malloc@@GLIBC_2.2.5"}},
		{"usdt:python3.11:python:function__entry", Spec{Kind: record.KindUSDT, Target: "python3.11", Provider: "python", Name: "function__entry"}},
		{"python3.11:python:function__*", Spec{Kind: record.KindUSDT, Target: "python3.11", Provider: "python", Name: "function__*"}},
		// A file named uprobe: its USDT probes need the usdt: prefix.
		{"usdt:uprobe:p:n", Spec{Kind: record.KindUSDT, Target: "uprobe", Provider: "p", Name: "n"}},
	} {
		got, err := Parse(c.in)
		if err != nil || got != c.want {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
	for _, bad := range []string{"uprobe:", "uprobe:f", "uprobe::f", "uretprobe:t:", "usdt:t:p", "t:f", "nocolons", "usdt:"} {
		if got, err := Parse(bad); err == nil {
			t.Errorf("Parse(%q) = %+v, want an error", bad, got)
		}
	}
}
