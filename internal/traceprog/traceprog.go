package traceprog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/cilium/ebpf"
)

// Names in trace.c.
const (
	// ProgramName is the program, in a "usdt" section.
	ProgramName = "trace_usdt"
	// EventsMapName is the ring buffer of events.
	EventsMapName = "events"
	// CookieFlagName is usdt.bpf.h's constant choosing BPF cookies (true)
	// or the IP map (false) to find a probe's spec.
	CookieFlagName = "probekit_usdt_have_cookie"
	// StrMaskName is the constant whose bit n makes the program read
	// argument n as a pointer to a NUL-terminated string.
	StrMaskName = "probekit_trace_str_mask"
)

// MaxArgs is the number of argument slots of an event (usdt.bpf.h's
// BPF_USDT_MAX_ARG_CNT).
const MaxArgs = 12

// MaxStrs is how many arguments of one hit can be read as strings, and
// StrLen the buffer of each (TRACE_MAX_STRS, TRACE_STR_LEN in trace.c).
const (
	MaxStrs = 4
	StrLen  = 96
)

// EventSize is the size of one event record (struct event of trace.c).
const EventSize = 8 + 4 + 4 + 4 + 4 + 8*MaxArgs + 4 + 4 + MaxStrs*StrLen

// Event is one hit.
type Event struct {
	// Cookie is the usdt cookie the attacher gave the location that fired.
	Cookie uint64
	// PID and TID are the process (thread group) and thread ids as the
	// initial PID namespace sees them.
	PID, TID uint32
	// ArgCnt is the location's argument count; negative (-ESRCH) when the
	// program found no spec for the location, in which case Cookie is 0.
	ArgCnt int32
	// Errors has bit n set when argument n could not be read (an operand
	// probekit cannot express, or memory that could not be read without
	// faulting); Args[n] is 0 then.
	Errors uint32
	// Args holds the ArgCnt arguments, each truncated to its size and sign-
	// or zero-extended as the note says; slots past ArgCnt are 0.
	Args [MaxArgs]int64
	// StrArgs has bit n set when argument n was read as a string: the
	// k-th such argument's string is Strs[k].
	StrArgs uint32
	// Strs are the strings read, without their NUL.
	Strs [MaxStrs]string
}

// Str returns argument n's string, if it was read as one.
func (e *Event) Str(n int) (string, bool) {
	if n < 0 || n >= MaxArgs || e.StrArgs&(1<<n) == 0 {
		return "", false
	}
	k := 0
	for i := 0; i < n; i++ {
		if e.StrArgs&(1<<i) != 0 {
			k++
		}
	}
	if k >= MaxStrs {
		return "", false
	}
	return e.Strs[k], true
}

// ErrShortEvent is returned by UnmarshalBinary for a record smaller than
// EventSize.
var ErrShortEvent = errors.New("traceprog: event record too short")

// UnmarshalBinary decodes a ring buffer record (host byte order: the
// kernel wrote it).
func (e *Event) UnmarshalBinary(b []byte) error {
	if len(b) < EventSize {
		return fmt.Errorf("%w: %d bytes, want %d (object and package out of sync?)", ErrShortEvent, len(b), EventSize)
	}
	ne := binary.NativeEndian
	e.Cookie = ne.Uint64(b)
	e.PID = ne.Uint32(b[8:])
	e.TID = ne.Uint32(b[12:])
	e.ArgCnt = int32(ne.Uint32(b[16:]))
	e.Errors = ne.Uint32(b[20:])
	for i := range e.Args {
		e.Args[i] = int64(ne.Uint64(b[24+8*i:]))
	}
	off := 24 + 8*MaxArgs
	e.StrArgs = ne.Uint32(b[off:])
	off += 8
	for k := range e.Strs {
		s := b[off+k*StrLen : off+(k+1)*StrLen]
		if i := bytes.IndexByte(s, 0); i >= 0 {
			s = s[:i]
		}
		e.Strs[k] = string(s)
	}
	return nil
}

// Objects is the loaded program and its maps.
type Objects struct {
	// Program is the program to attach to USDT locations.
	Program *ebpf.Program
	// Events is the ring buffer of Event records.
	Events *ebpf.Map
	// Dropped is a one-slot array counting events lost to a full ring
	// buffer (see DroppedCount).
	Dropped *ebpf.Map
	// Specs and IPToSpecID are usdt.bpf.h's __bpf_usdt_specs and
	// __bpf_usdt_ip_to_spec_id, for the attacher.
	Specs, IPToSpecID *ebpf.Map
}

// Close releases the program and the maps.
func (o *Objects) Close() error {
	var errs []error
	for _, c := range []interface{ Close() error }{o.Program, o.Events, o.Dropped, o.Specs, o.IPToSpecID} {
		if c != nil {
			errs = append(errs, c.Close())
		}
	}
	return errors.Join(errs...)
}

// DroppedCount returns how many events were lost because the ring buffer
// was full.
func (o *Objects) DroppedCount() (uint64, error) {
	var n uint64
	if err := o.Dropped.Lookup(uint32(0), &n); err != nil {
		return 0, fmt.Errorf("read dropped-events counter: %w", err)
	}
	return n, nil
}

// Spec returns a fresh copy of the program's CollectionSpec, to adjust
// before LoadSpec (usdt.Prepare, a larger ring buffer through
// Maps[EventsMapName].MaxEntries).
func Spec() (*ebpf.CollectionSpec, error) {
	return loadTrace()
}

// LoadSpec loads spec (from Spec) into the kernel.
func LoadSpec(spec *ebpf.CollectionSpec) (*Objects, error) {
	var objs traceObjects
	if err := spec.LoadAndAssign(&objs, nil); err != nil {
		return nil, fmt.Errorf("load the trace program: %w", err)
	}
	return &Objects{
		Program:    objs.TraceUsdt,
		Events:     objs.Events,
		Dropped:    objs.Dropped,
		Specs:      objs.BpfUsdtSpecs,
		IPToSpecID: objs.BpfUsdtIpToSpecId,
	}, nil
}

// Options are the choices Load makes before loading. The zero value
// selects BPF cookies and perf-event uprobes.
type Options struct {
	// NoCookie makes the program find specs through the IP map, for
	// kernels without BPF cookies (before 5.15).
	NoCookie bool
	// UprobeMulti loads the program for uprobe_multi links (kernel 6.6);
	// it can then not be attached with perf-event uprobes.
	UprobeMulti bool
}

// Load loads the program with explicit choices, for callers that do not
// use usdt.Prepare. It returns the spec it loaded, whose __bpf_usdt_specs
// value type gives the spec layout.
func Load(opts Options) (*Objects, *ebpf.CollectionSpec, error) {
	spec, err := Spec()
	if err != nil {
		return nil, nil, err
	}
	if err := spec.Variables[CookieFlagName].Set(!opts.NoCookie); err != nil {
		return nil, nil, fmt.Errorf("set %s: %w", CookieFlagName, err)
	}
	if opts.UprobeMulti {
		spec.Programs[ProgramName].AttachType = ebpf.AttachTraceUprobeMulti
	}
	objs, err := LoadSpec(spec)
	if err != nil {
		return nil, nil, err
	}
	return objs, spec, nil
}
