package record

import (
	"fmt"

	"github.com/cilium/ebpf"
)

// Latency (ModeLatency): the programs pair hits per thread as a stack.
// A hit of a probe whose cookie has LatencyEnd set (the usdt cookie of a
// USDT location, a function probe's FuncCookie) ends the thread's latest
// open start; any other hit is a start. So a function's latency is its
// entry (a uprobe, a start) to its return (a uretprobe or return-site
// probe with LatencyEnd), and a pair of USDT probes such as PostgreSQL's
// query__start and query__done (the end's locations with LatencyEnd)
// times each query, nested and recursive ones too.
//
// The interval, in nanoseconds (CLOCK_MONOTONIC), goes to a log2 bucket
// (Bucket) of the start's probe index in Hist (read with Histograms),
// or with SetKeys of the start's key in KeyedMap (Keyed,
// KeyedHistograms). SetFilter's terms are tested at the start, on the
// start's values: an end is never filtered, and a dropped start is not
// timed. Key parts are read at the start too: argument and string parts
// are the start probe's values (a function's arguments at its entry);
// KeyProbe is the start's probe index.
//
// An end closes the latest open start of its identity: with
// SetLatencyMatch, the values of up to MaxLatencyMatch arguments, the
// same for START and END (Python's function__entry and function__return:
// the file and the function, arguments 0 and 1). Starts above the one it
// closes are dropped (their ends never came: LatencyLost.Abandoned); an
// end whose identity no open start has is counted
// (LatencyLost.NoStart) and dropped, never paired with another start.
// Without it, every end closes the latest start. Function probes have no
// identity arguments (a return has only its value): their ends come in
// their calls' order.
//
// A thread keeps MaxLatencyDepth open starts; deeper starts are counted
// (LatencyLost.Deep) and not timed, and an end with no open start on its
// thread is counted (LatencyLost.NoStart).

// LatencyEnd is the cookie bit that makes a probe's hits ends in
// ModeLatency (TRACE_LAT_END in trace.c). FuncCookie never sets it, and
// the other modes ignore it.
const LatencyEnd uint64 = 1 << 63

// LatencyGoroutine is the function probe cookie bit that pairs its hits
// per goroutine instead of per thread, for Go code (built with the
// register ABI: Go 1.17 on x86-64, 1.18 on arm64): Go's scheduler moves
// goroutines between threads, so a call that starts on one thread may
// return on another, which per thread would be an end without a start
// and a start never ended. The goroutine is read from the g register
// (r14, x28), valid at a function's entry and its returns. Give it to the
// start and the end probes alike (TRACE_LAT_GOROUTINE in trace.c).
const LatencyGoroutine uint64 = 1 << 62

// MaxLatencyDepth is how many open starts a thread keeps
// (TRACE_LAT_MAX_DEPTH in trace.c).
const MaxLatencyDepth = 32

// LatencyThreads is how many threads' stacks ModeLatency keeps (an LRU
// hash of 1032-byte stacks: 4 MiB); LatencyKeyFrames how many open
// frames' keys it keeps with SetKeys (136 bytes each: 2 MiB). The least
// recently used goes first: a thread that exits between a start and its
// end leaves a stack that newer ones push out.
const (
	LatencyThreads   = 4096
	LatencyKeyFrames = 16384
)

// Names in trace.c of ModeLatency's maps.
const (
	latStacksName = "lat_stacks"
	latKeysName   = "lat_keys"
)

// LatencyMatchName is the constant SetLatencyMatch sets.
const LatencyMatchName = "probekit_trace_lat_match"

// MaxLatencyMatch is how many identity arguments SetLatencyMatch takes
// (TRACE_LAT_MATCH_N in trace.c).
const MaxLatencyMatch = 2

// latencyMatches are the identity arguments (0-based) of known USDT
// START/END pairs. CPython's function__entry and function__return give
// (file, function, line); the line differs between the two, and 3.11
// fires function__return without function__entry for the sys.setprofile
// callback.
var latencyMatches = map[[2]string][]int{
	{"python:function__entry", "python:function__return"}: {0, 1},
}

// LatencyMatch returns the identity arguments (0-based) of the known
// USDT pair start and end ("PROVIDER:NAME" each), for SetLatencyMatch,
// or nil when the pair is not known.
func LatencyMatch(start, end string) []int {
	return latencyMatches[[2]string{start, end}]
}

// SetLatencyMatch makes an end of ModeLatency close only a start whose
// arguments args (0-based, at most MaxLatencyMatch) have the end's
// values; it applies to USDT probes, START and END alike. The values are
// compared as the probes give them (a string argument's pointer, not its
// text).
func SetLatencyMatch(spec *ebpf.CollectionSpec, args ...int) error {
	if len(args) > MaxLatencyMatch {
		return fmt.Errorf("record: %d latency identity arguments, at most %d", len(args), MaxLatencyMatch)
	}
	var m uint32
	for i, a := range args {
		if a < 0 || a >= MaxArgs {
			return fmt.Errorf("record: latency identity argument %d, want 0 to %d", a, MaxArgs-1)
		}
		m |= uint32(a+1) << (4 * i)
	}
	if err := spec.Variables[LatencyMatchName].Set(m); err != nil {
		return fmt.Errorf("set %s: %w", LatencyMatchName, err)
	}
	return nil
}

// sizeLatencyMaps gives ModeLatency's maps their sizes when spec's mode is
// ModeLatency (their keys' map only with keys); otherwise they keep the
// one entry of trace.c, since the other modes never use them.
func sizeLatencyMaps(spec *ebpf.CollectionSpec) error {
	var mode uint32
	var keys uint64
	if v := spec.Variables[ModeName]; v != nil {
		if err := v.Get(&mode); err != nil {
			return fmt.Errorf("read %s: %w", ModeName, err)
		}
	}
	if Mode(mode) != ModeLatency {
		return nil
	}
	if v := spec.Variables[KeySpecName]; v != nil {
		if err := v.Get(&keys); err != nil {
			return fmt.Errorf("read %s: %w", KeySpecName, err)
		}
	}
	stacks, frames := spec.Maps[latStacksName], spec.Maps[latKeysName]
	if stacks == nil || frames == nil {
		return fmt.Errorf("record: no %s or %s map", latStacksName, latKeysName)
	}
	stacks.MaxEntries = LatencyThreads
	if keys != 0 {
		frames.MaxEntries = LatencyKeyFrames
	}
	return nil
}

// LatencyLost counts the hits of ModeLatency that were not timed (enum
// lat_lost of trace.c).
type LatencyLost struct {
	// Deep: starts with MaxLatencyDepth starts open on their thread
	// already (their ends are not counted anywhere).
	Deep uint64
	// NoStart: ends with no open start of their identity on their
	// thread (the trace attached in the middle of a pair, or an end
	// without its start); they are dropped.
	NoStart uint64
	// Full: starts with no room for their thread's stack or key.
	Full uint64
	// Abandoned: starts whose end never came: a later end closed a
	// start below them on their thread (see SetLatencyMatch).
	Abandoned uint64
}

// LatencyLost returns the counts of hits not timed, summed over the
// CPUs.
func (o *Objects) LatencyLost() (LatencyLost, error) {
	var out [4]uint64
	var per []uint64
	for i := range out {
		if err := o.LatLost.Lookup(uint32(i), &per); err != nil {
			return LatencyLost{}, fmt.Errorf("read the latency loss counter %d: %w", i, err)
		}
		for _, c := range per {
			out[i] += c
		}
	}
	return LatencyLost{Deep: out[0], NoStart: out[1], Full: out[2], Abandoned: out[3]}, nil
}

// KeyedHistogram is one key's histogram: of latencies in ModeLatency, of
// a value in ModeHist.
type KeyedHistogram struct {
	Key  Key
	Hist Histogram
}

// KeyedHistograms returns KeyedMap's entries as one histogram per key,
// in the order the map yields the keys.
func (o *Objects) KeyedHistograms() ([]KeyedHistogram, error) {
	entries, err := o.Keyed()
	if err != nil {
		return nil, err
	}
	var out []KeyedHistogram
	index := map[Key]int{}
	for _, e := range entries {
		i, ok := index[e.Key]
		if !ok {
			i = len(out)
			index[e.Key] = i
			out = append(out, KeyedHistogram{Key: e.Key})
		}
		out[i].Hist[e.Bucket] += e.Count
	}
	return out, nil
}
