// Package probe reads the PROBE syntax of `probekit trace` and
// `probekit export`: [usdt:]TARGET:PROVIDER:NAME, uprobe:TARGET:FUNC or
// uretprobe:TARGET:FUNC. It is a package of its own so that the exporter,
// a separate executable, parses PROBE as `probekit trace` does.
//
// # Argument numbers
//
// A probe's arguments are numbered from 1, one way everywhere a user
// writes one: `probekit trace --str 1,2`, `--hist 2`, `--by arg 1`,
// `--filter 'arg2 > 100'`, the exporter's YAML (`arg: 2`, `value: 2`),
// and the Go API, whose fields and accessors take an ArgNum
// (tracer.Config.Strs and HistValue, tracer.Hit.Str and Value,
// exporter.Label.Arg and Metric.Value): Arg(1) is the first argument,
// Ret() a uretprobe's return value. ArgNum is not an integer, so that
// the compiler refuses `Arg: 0`; only the slices of decoded values
// (record.Event.Args) and the BPF-side masks of package record count
// from 0, as Go slices and bits do.
package probe

import (
	"fmt"
	"strings"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/usdt"
)

// Spec is one PROBE.
type Spec struct {
	// Kind is KindUSDT, KindUprobe or KindUretprobe.
	Kind   record.Kind
	Target string
	// Provider and Name of a USDT probe; Func is a function name or glob.
	Provider, Name, Func string
}

// Prefixes of PROBE.
const (
	USDTPrefix      = "usdt:"
	UprobePrefix    = "uprobe:"
	UretprobePrefix = "uretprobe:"
)

// Parse reads [usdt:]TARGET:PROVIDER:NAME, uprobe:TARGET:FUNC or
// uretprobe:TARGET:FUNC. FUNC is what follows the last colon: function
// names (C, mangled C++, Go, versioned) hold none, a path may.
func Parse(s string) (Spec, error) {
	for _, f := range []struct {
		prefix string
		kind   record.Kind
	}{{UprobePrefix, record.KindUprobe}, {UretprobePrefix, record.KindUretprobe}} {
		rest, ok := strings.CutPrefix(s, f.prefix)
		if !ok {
			continue
		}
		i := strings.LastIndexByte(rest, ':')
		if i <= 0 || i == len(rest)-1 {
			return Spec{}, fmt.Errorf("%q: want %sTARGET:FUNC", s, f.prefix)
		}
		return Spec{Kind: f.kind, Target: rest[:i], Func: rest[i+1:]}, nil
	}
	target, provider, name, err := usdt.ParseSection(strings.TrimPrefix(s, USDTPrefix))
	if err != nil {
		if strings.Count(s, ":") == 1 && !strings.HasPrefix(s, USDTPrefix) {
			return Spec{}, fmt.Errorf("%q: want [usdt:]TARGET:PROVIDER:NAME, or uprobe:%s for a function", s, s)
		}
		return Spec{}, fmt.Errorf("%q: want [usdt:]TARGET:PROVIDER:NAME, uprobe:TARGET:FUNC or uretprobe:TARGET:FUNC", s)
	}
	return Spec{Kind: record.KindUSDT, Target: target, Provider: provider, Name: name}, nil
}

// CheckFuncProbes refuses function probes on a kernel without BPF
// cookies, for programs that find their probe's description only in the
// cookie (the exporter's): the kernel would refuse to load them.
// probekit trace's record program needs no such check: it finds the
// description by address there (uprobe.Options.AddressTable).
func CheckFuncProbes() error {
	if err := features.Check(features.Cookie); err != nil {
		return fmt.Errorf("uprobe and uretprobe probes: %w", err)
	}
	return nil
}

// Label names s as counts and histograms do: PROVIDER:NAME, uprobe:FUNC
// or uretprobe:FUNC.
func (s Spec) Label() string {
	switch s.Kind {
	case record.KindUSDT:
		return s.Provider + ":" + s.Name
	case record.KindUretprobe:
		return "uretprobe:" + s.Func
	}
	return "uprobe:" + s.Func
}
