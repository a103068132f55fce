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
