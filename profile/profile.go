// Package profile turns stacks counted in the kernel (stack.bpf.h's
// probekit_count_user_stack, read by bpf.ReadStackCounts, or stacks
// unwound by package unwind and counted in user space) into a pprof
// profile (github.com/google/pprof/profile), which go tool pprof,
// Pyroscope and Parca read, and into the folded format of
// flamegraph.pl, speedscope and inferno ("main;outer;emit;write 3").
//
// Names come from a Symbolizer: Process names a live process's
// addresses with package symbolize and its mappings with their
// build-ids; a caller with better information (DWARF file:line,
// inlined frames) implements Symbolizer itself.
package profile

import (
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/google/pprof/profile"

	"github.com/probekit/probekit/interp"
)

// Profile is a pprof profile (github.com/google/pprof/profile): Write
// writes it gzipped, as go tool pprof reads it.
type Profile = profile.Profile

// Stack is one distinct stack and what was counted under it.
type Stack struct {
	PID uint32
	// Frames are runtime addresses, innermost first: the instruction
	// pointer, then return addresses (bpf.Stack, unwind.Result.Frames).
	Frames []uint64
	Count  uint64
	// Sum is the total of the values counted (bytes allocated, time);
	// written as the second sample value when Options.SumName is set.
	Sum uint64
	// Truncated, when set, says why the walk stopped before the
	// outermost frame: the sample gets an outermost location of its own,
	// with no address and the function "[truncated: Truncated]", so a
	// cut stack stands apart from a short one in pprof and folded views.
	Truncated string
	// Parts, when set, is the order of the stack's frames with its
	// interpreted ones (interp.Merge's, over Frames and Interp): the
	// native frames at their places, each interpreted frame a location
	// of its own with no address, its function named by Interp's
	// DisplayName with its file and line, and a PartInterpCut marker a
	// location named interp.CutName. Nil: Frames alone.
	Parts  []interp.Part
	Interp []interp.Frame
}

// TruncatedName is the function name of the marker location of a
// Stack's Truncated reason.
func TruncatedName(reason string) string { return "[truncated: " + reason + "]" }

// Line is one function at a location: a location's Lines are innermost
// first, the inlined callees before the function that holds them.
type Line struct {
	Function string
	File     string
	Line     int64
}

// Mapping is the object a location lies in.
type Mapping struct {
	Start, Limit, Offset uint64
	File                 string
	BuildID              string
}

// Location is what a Symbolizer knows of one address.
type Location struct {
	// Lines are empty for an unknown function.
	Lines []Line
	// Mapping is nil for an address in no known object.
	Mapping *Mapping
}

// Symbolizer names the frames of one process's stack. addrs are as in
// Stack.Frames; the symbolizer looks return addresses (all but the
// first) up at address-1, the call instruction, and returns one
// Location per address.
type Symbolizer interface {
	Locate(pid uint32, addrs []uint64) ([]Location, error)
}

// Options name the sample values.
type Options struct {
	// CountName and CountUnit are the first value's type: "samples",
	// "count" by default.
	CountName, CountUnit string
	// SumName and SumUnit, when SumName is set, add Stack.Sum as a
	// second value ("alloc_space", "bytes").
	SumName, SumUnit string
}

// Build makes a pprof profile of stacks, naming them with sym. A
// stack whose process cannot be symbolized keeps addresses only (the
// error is returned with the profile, which is still whole).
func Build(stacks []Stack, sym Symbolizer, opts *Options) (*profile.Profile, error) {
	if opts == nil {
		opts = &Options{}
	}
	p := &profile.Profile{
		SampleType: []*profile.ValueType{{Type: or(opts.CountName, "samples"), Unit: or(opts.CountUnit, "count")}},
	}
	if opts.SumName != "" {
		p.SampleType = append(p.SampleType, &profile.ValueType{Type: opts.SumName, Unit: or(opts.SumUnit, "count")})
	}
	b := builder{p: p, funcs: map[[2]string]*profile.Function{}, maps: map[mapKey]*profile.Mapping{}, locs: map[locKey]*profile.Location{}}
	var errs []error
	for _, s := range stacks {
		locs, err := sym.Locate(s.PID, s.Frames)
		if err != nil || len(locs) != len(s.Frames) {
			if err == nil {
				err = fmt.Errorf("%d locations for %d addresses", len(locs), len(s.Frames))
			}
			errs = append(errs, fmt.Errorf("pid %d: %w", s.PID, err))
			locs = make([]Location, len(s.Frames))
		}
		sample := &profile.Sample{Value: []int64{int64(s.Count)}}
		if opts.SumName != "" {
			sample.Value = append(sample.Value, int64(s.Sum))
		}
		sample.Label = map[string][]string{"pid": {strconv.FormatUint(uint64(s.PID), 10)}}
		if s.Parts == nil {
			for i, a := range s.Frames {
				sample.Location = append(sample.Location, b.location(s.PID, a, &locs[i]))
			}
		}
		runtime := ""
		for _, pt := range s.Parts {
			switch {
			case pt.Kind == interp.PartNative && pt.Index >= 0 && pt.Index < len(s.Frames):
				sample.Location = append(sample.Location, b.location(s.PID, s.Frames[pt.Index], &locs[pt.Index]))
			case pt.Kind == interp.PartInterp && pt.Index >= 0 && pt.Index < len(s.Interp):
				f := s.Interp[pt.Index]
				runtime = f.Runtime
				sample.Location = append(sample.Location, b.interpLocation(f))
			case pt.Kind == interp.PartInterpCut:
				sample.Location = append(sample.Location, b.marker(interp.CutName(runtime)))
			}
		}
		if s.Truncated != "" {
			sample.Location = append(sample.Location, b.marker(TruncatedName(s.Truncated)))
		}
		p.Sample = append(p.Sample, sample)
	}
	if err := p.CheckValid(); err != nil {
		return nil, err
	}
	if len(errs) > 0 {
		return p, fmt.Errorf("symbolizing: %w", errs[0])
	}
	return p, nil
}

func runtimeOr(r string) string { return or(r, "interpreter") }

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

type mapKey struct {
	pid          uint32
	start, limit uint64
	file         string
}

type locKey struct {
	pid    uint32
	addr   uint64
	marker string
}

type builder struct {
	p     *profile.Profile
	funcs map[[2]string]*profile.Function
	maps  map[mapKey]*profile.Mapping
	locs  map[locKey]*profile.Location
}

// location is one pprof location per (process, address): the same
// address in two processes may be two objects.
func (b *builder) location(pid uint32, addr uint64, l *Location) *profile.Location {
	if loc := b.locs[locKey{pid: pid, addr: addr}]; loc != nil {
		return loc
	}
	loc := &profile.Location{ID: uint64(len(b.p.Location) + 1), Address: addr}
	if m := l.Mapping; m != nil {
		k := mapKey{pid, m.Start, m.Limit, m.File}
		pm := b.maps[k]
		if pm == nil {
			pm = &profile.Mapping{ID: uint64(len(b.p.Mapping) + 1), Start: m.Start, Limit: m.Limit, Offset: m.Offset,
				File: m.File, BuildID: m.BuildID, HasFunctions: true}
			b.maps[k] = pm
			b.p.Mapping = append(b.p.Mapping, pm)
		}
		loc.Mapping = pm
	}
	// pprof's Location.Line: the last entry is the caller, earlier
	// ones the functions inlined into it, as Lines are ordered.
	for _, ln := range l.Lines {
		fk := [2]string{ln.Function, ln.File}
		fn := b.funcs[fk]
		if fn == nil {
			fn = &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: ln.Function, SystemName: ln.Function, Filename: ln.File}
			b.funcs[fk] = fn
			b.p.Function = append(b.p.Function, fn)
		}
		loc.Line = append(loc.Line, profile.Line{Function: fn, Line: ln.Line})
	}
	b.locs[locKey{pid: pid, addr: addr}] = loc
	b.p.Location = append(b.p.Location, loc)
	return loc
}

// interpLocation is the location of an interpreted frame: one per
// function, file and line, with no address and no mapping.
func (b *builder) interpLocation(f interp.Frame) *profile.Location {
	name := f.DisplayName()
	k := locKey{marker: "\x00" + f.Runtime + "\x00" + name + "\x00" + f.File + "\x00" + strconv.Itoa(f.Line)}
	if loc := b.locs[k]; loc != nil {
		return loc
	}
	fk := [2]string{name, f.File}
	fn := b.funcs[fk]
	if fn == nil {
		// A SystemName of its own: pprof takes a function whose Name
		// equals it for a C++ name to demangle, and drops <...> from
		// it, which would leave <module> unnamed.
		fn = &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: runtimeOr(f.Runtime) + ":" + name, Filename: f.File}
		b.funcs[fk] = fn
		b.p.Function = append(b.p.Function, fn)
	}
	loc := &profile.Location{ID: uint64(len(b.p.Location) + 1), Line: []profile.Line{{Function: fn, Line: int64(f.Line)}}}
	b.locs[k] = loc
	b.p.Location = append(b.p.Location, loc)
	return loc
}

// marker is the location of a frame that is no address (a truncation
// marker): one per name, with no address and no mapping.
func (b *builder) marker(name string) *profile.Location {
	k := locKey{addr: 0, marker: name}
	if loc := b.locs[k]; loc != nil {
		return loc
	}
	fk := [2]string{name, ""}
	fn := b.funcs[fk]
	if fn == nil {
		fn = &profile.Function{ID: uint64(len(b.p.Function) + 1), Name: name, SystemName: name}
		b.funcs[fk] = fn
		b.p.Function = append(b.p.Function, fn)
	}
	loc := &profile.Location{ID: uint64(len(b.p.Location) + 1), Line: []profile.Line{{Function: fn}}}
	b.locs[k] = loc
	b.p.Location = append(b.p.Location, loc)
	return loc
}

// WriteFolded writes p in the folded format: per distinct call path,
// the function names outermost first joined by ';' (inlined frames
// each their own name), a space and the first sample value; paths are
// merged and sorted. A frame without a name is written as its address
// in hex, in its object when known ("libc.so.6+0x2a1f0").
func WriteFolded(w io.Writer, p *profile.Profile) error {
	sums := map[string]int64{}
	for _, s := range p.Sample {
		var names []string
		for i := len(s.Location) - 1; i >= 0; i-- {
			loc := s.Location[i]
			if len(loc.Line) == 0 {
				names = append(names, unnamed(loc))
				continue
			}
			for j := len(loc.Line) - 1; j >= 0; j-- {
				names = append(names, strings.ReplaceAll(loc.Line[j].Function.Name, ";", ":"))
			}
		}
		if len(s.Value) > 0 {
			sums[strings.Join(names, ";")] += s.Value[0]
		}
	}
	keys := make([]string, 0, len(sums))
	for k := range sums {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if _, err := fmt.Fprintf(w, "%s %d\n", k, sums[k]); err != nil {
			return err
		}
	}
	return nil
}

func unnamed(loc *profile.Location) string {
	if m := loc.Mapping; m != nil && m.File != "" {
		f := m.File[strings.LastIndexByte(m.File, '/')+1:]
		return fmt.Sprintf("%s+%#x", f, loc.Address-m.Start+m.Offset)
	}
	return fmt.Sprintf("%#x", loc.Address)
}
