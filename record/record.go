package record

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"os"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/bpfunwind"
	"github.com/probekit/probekit/interp"
	"github.com/probekit/probekit/usdt/bpf"
)

// Names in trace.c.
const (
	// ProgramName is the program for USDT locations, in a "usdt"
	// section.
	ProgramName = "trace_usdt"
	// FuncProgramName is the program for function probes (entries,
	// return sites, uretprobes), in a "uprobe" section; each probe's
	// BPF cookie is a FuncCookie.
	FuncProgramName = "trace_func"
	// EventsMapName is the ring buffer of events.
	EventsMapName = "events"
	// CookieFlagName is usdt.bpf.h's constant choosing BPF cookies (true)
	// or the IP map (false) to find a probe's spec.
	CookieFlagName = "probekit_usdt_have_cookie"
	// StrMaskName is the constant whose bit n makes the program read
	// argument n as a pointer to a NUL-terminated string.
	StrMaskName = "probekit_trace_str_mask"
	// WakeupBytesName is the constant holding how many unread bytes make
	// the program wake the reader (see SetRingSize).
	WakeupBytesName = "probekit_trace_wakeup_bytes"
	// ModeName is the constant choosing what a hit does (Mode).
	ModeName = "probekit_trace_mode"
	// HistValName is the constant numbering the value ModeHist counts.
	HistValName = "probekit_trace_hist_val"
	// StackName is the constant making records carry the user stack:
	// 1 the kernel's frame-pointer walk (Event.Frames), 2 a copy of the
	// stack top (Event.Copy; see SetStackCopy), 3 the CFI walk inside
	// BPF (Event.Frames and Event.StackStop; see SetStackCFI).
	StackName = "probekit_trace_stack"
	// CopyPagesName is the constant bounding the pages of a stack copy.
	CopyPagesName = "probekit_trace_copy_pages"
	// KeySpecName is the constant describing the key parts of ModeCount
	// and ModeHist (see SetKeys).
	KeySpecName = "probekit_trace_key_spec"
	// NTermsName is the constant holding how many filter terms apply
	// (see SetFilter).
	NTermsName = "probekit_trace_nterms"
	// TermsName is the constant holding the filter's terms (see
	// SetFilter).
	TermsName = "probekit_trace_terms"
)

// Mode is what the programs do with a hit (enum trace_mode of trace.c).
type Mode uint32

const (
	// ModeEvents sends a record per hit to Events.
	ModeEvents Mode = 0
	// ModeCount adds 1 to the probe's slot of Counts; nothing is sent.
	ModeCount Mode = 1
	// ModeHist adds 1 to the probe's log2 bucket of one value in Hist;
	// nothing is sent.
	ModeHist Mode = 2
	// ModeLatency pairs each start hit with its end hit on the same
	// thread (LatencyEnd) and adds 1 to the start probe's log2 bucket of
	// the nanoseconds between them in Hist; nothing is sent (see
	// latency.go).
	ModeLatency Mode = 3
)

// MaxCounted is how many probe indexes ModeCount counts (the size of the
// counts array; TRACE_MAX_COUNTED in trace.c). A hit of a probe
// past it counts in Dropped.
const MaxCounted = 8192

// NumBuckets is the number of log2 buckets of a histogram: negative
// values, zero, then [2^k, 2^(k+1)) for k from 0 to 62 (the values are
// signed 64-bit integers).
const NumBuckets = 65

// Bucket returns the bucket of v, as trace.c's hist_bucket.
func Bucket(v int64) int {
	switch {
	case v < 0:
		return 0
	case v == 0:
		return 1
	}
	return bits.Len64(uint64(v)) + 1
}

// BucketRange returns the values bucket b (below NumBuckets) holds: from
// low, included, to high, excluded.
func BucketRange(b int) (low int64, high uint64) {
	switch {
	case b <= 0:
		return math.MinInt64, 0
	case b == 1:
		return 0, 1
	}
	return 1 << (b - 2), 1 << (b - 1)
}

// Histogram is one probe's histogram: hits per bucket (see Bucket).
type Histogram [NumBuckets]uint64

// Counts returns the hits of probe indexes 0 to n-1 (n at most
// MaxCounted).
func (o *Objects) Counts(n int) ([]uint64, error) {
	if n > MaxCounted {
		return nil, fmt.Errorf("record: %d probes counted, at most %d", n, MaxCounted)
	}
	out := make([]uint64, n)
	for i := range n {
		if err := o.CountsMap.Lookup(uint32(i), &out[i]); err != nil {
			return nil, fmt.Errorf("read the count of probe %d: %w", i, err)
		}
	}
	return out, nil
}

// histKey is struct hist_key of trace.c.
type histKey struct {
	Probe, Bucket uint32
}

// Histograms returns the histograms of probe indexes 0 to n-1; a probe
// without hits has an all-zero histogram.
func (o *Objects) Histograms(n int) ([]Histogram, error) {
	out := make([]Histogram, n)
	var k histKey
	var c uint64
	it := o.HistMap.Iterate()
	for it.Next(&k, &c) {
		if int(k.Probe) >= n || k.Bucket >= NumBuckets {
			return nil, fmt.Errorf("record: histogram entry of probe %d bucket %d, want below %d and %d", k.Probe, k.Bucket, n, NumBuckets)
		}
		out[k.Probe][k.Bucket] += c
	}
	if err := it.Err(); err != nil {
		return nil, fmt.Errorf("read the histograms: %w", err)
	}
	return out, nil
}

// SetMode makes spec's programs count (ModeCount), build histograms of
// value histVal (ModeHist) or of latencies (ModeLatency, histVal 0)
// instead of sending records.
func SetMode(spec *ebpf.CollectionSpec, mode Mode, histVal int) error {
	if mode > ModeLatency || histVal < 0 || histVal >= MaxArgs {
		return fmt.Errorf("record: mode %d, histogram value %d", mode, histVal)
	}
	if err := spec.Variables[ModeName].Set(uint32(mode)); err != nil {
		return fmt.Errorf("set %s: %w", ModeName, err)
	}
	if err := spec.Variables[HistValName].Set(uint32(histVal)); err != nil {
		return fmt.Errorf("set %s: %w", HistValName, err)
	}
	return nil
}

// USDTProbeName is the constant SetUSDTProbe sets.
const USDTProbeName = "probekit_trace_usdt_probe"

// SetUSDTProbe tells spec's USDT program that every hit it counts
// (ModeCount, ModeHist) is of probe index, as when it is attached to one
// site whose cookie is index: a hit then reads no spec for its index and
// calls no helper. Other modes, and hits that send records, still read
// the cookie.
func SetUSDTProbe(spec *ebpf.CollectionSpec, index uint32) error {
	if index >= MaxCounted {
		return fmt.Errorf("record: probe index %d, at most %d", index, MaxCounted-1)
	}
	if err := spec.Variables[USDTProbeName].Set(index + 1); err != nil {
		return fmt.Errorf("set %s: %w", USDTProbeName, err)
	}
	return nil
}

// MaxArgs is the number of values a record can carry (usdt.bpf.h's
// BPF_USDT_MAX_ARG_CNT: 12 USDT arguments; a function probe sends at most
// 9 argument registers, Go's on x86-64, or one return register).
const MaxArgs = 12

// MaxStrs is how many values of one hit can be read as strings, and
// StrLen the most bytes read for each, its NUL included
// (TRACE_MAX_STRS, TRACE_STR_LEN in trace.c).
const (
	MaxStrs = 4
	StrLen  = 96
)

// MaxFrames is the most user stack frames a record carries (stack.bpf.h's
// PROBEKIT_STACK_MAX_DEPTH).
const MaxFrames = bpf.MaxStackDepth

// MaxInterpFrames is the most interpreter frames a record or a counted
// stack carries (python.bpf.h's PROBEKIT_INTERP_MAX_FRAMES), and
// InterpFrameSize the size of one (struct probekit_interp_frame,
// interp.Raw).
const (
	MaxInterpFrames = 32
	InterpFrameSize = 16
)

// HeaderSize is the size of a record's fixed part (struct event of
// trace.c); MaxEventSize is the largest record: every value, a full
// stack with its interpreter frames and every string at its longest.
const (
	HeaderSize   = 56
	MaxEventSize = HeaderSize + 8*MaxArgs + 8*MaxFrames + InterpFrameSize*MaxInterpFrames + MaxStrs*StrLen
	// MaxRecordSize is the largest record with a stack copy
	// (SetStackCopy): MaxEventSize, up to 8 bytes of alignment, the
	// copy's 40-byte header and MaxCopyPages pages.
	MaxRecordSize = MaxEventSize + 8 + 40 + MaxCopyPages*4096
)

// Ring buffer sizes: DefaultRingSize holds about 175,000 four-argument
// records (88 bytes and the kernel's 8-byte header each), a sixth of a
// second of hits at 1 µs a hit; MaxRingSize is a ceiling on the locked
// kernel memory one trace may ask for.
const (
	DefaultRingSize = 16 << 20
	MaxRingSize     = 1 << 30
)

// Kind says what a record's values are.
type Kind uint8

const (
	// KindUSDT: the values are the probe's arguments, in order.
	KindUSDT Kind = 0
	// KindUprobe: the values are a function's argument registers at its
	// entry, in the order of its calling convention (Regs).
	KindUprobe Kind = 1
	// KindUretprobe: the one value is a function's return register, read
	// by a uretprobe or at a return instruction.
	KindUretprobe Kind = 2
	numKinds           = 3
)

// Regs is the register set a function probe sends (enum func_regs of
// trace.c). The registers of each set are in trace.c, per architecture.
type Regs uint8

const (
	// RegsC are the C calling convention's integer argument registers:
	// rdi, rsi, rdx, rcx, r8, r9 on x86-64 (System V psABI); x0-x7 on
	// arm64 (AAPCS64).
	RegsC Regs = 0
	// RegsGo are Go's register ABI (ABIInternal; Go 1.17 on amd64, 1.18
	// on arm64) integer argument registers: rax, rbx, rcx, rdi, rsi, r8,
	// r9, r10, r11 on x86-64; x0-x7 on arm64 (of Go's x0-x15).
	RegsGo Regs = 1
	// RegsRet is the (first) return register, rax or x0, for C and Go.
	RegsRet Regs = 2
)

// FuncCookie is the BPF cookie of a function probe: the index the
// records carry as their Cookie (bits 0-31), the registers to send
// (32-39), the records' kind (40-47) and the values to read as strings
// too (48-59: bit n for value n). It is never 0.
func FuncCookie(index uint32, regs Regs, kind Kind, strMask uint32) (uint64, error) {
	if kind != KindUprobe && kind != KindUretprobe || regs > RegsRet || strMask>>MaxArgs != 0 {
		return 0, fmt.Errorf("record: function probe of kind %d, registers %d, strings %#b", kind, regs, strMask)
	}
	return uint64(index) | uint64(regs)<<funcCookieRegsShift | uint64(kind)<<40 | uint64(strMask)<<48, nil
}

// funcCookieRegsShift is where a function cookie's Regs are (trace.c's
// FUNC_COOKIE_REGS_SHIFT).
const funcCookieRegsShift = 32

// Event is one hit, decoded from a record (see Decode).
type Event struct {
	Kind Kind
	// Cookie is the usdt cookie the attacher gave the location that
	// fired, or the index in a function probe's FuncCookie.
	Cookie uint64
	// PID and TID are the process (thread group) and thread ids as the
	// initial PID namespace sees them.
	PID, TID uint32
	// ArgCnt is the location's argument count; negative (-ESRCH) when the
	// program found no spec for the location, in which case Cookie is 0.
	// For a function probe it is NArgs.
	ArgCnt int32
	// Errors has bit n set when value n could not be read (an operand
	// probekit cannot express, or memory that could not be read without
	// faulting); Args[n] is 0 then.
	Errors uint32
	// NArgs is the number of values in Args; slots past it are 0.
	NArgs int
	// Args holds the values, each truncated to its size and sign- or
	// zero-extended as the note says.
	Args [MaxArgs]int64
	// StrArgs has bit n set when value n was read as a string too: the
	// k-th such value's string is Strs[k].
	StrArgs uint32
	// Strs are the strings read, without their NUL. After Decode they
	// share the record's memory.
	Strs [MaxStrs][]byte
	// NFrames is the number of user stack frames in Frames (0 unless the
	// program was loaded with StackName set): innermost first, the
	// instruction pointer then return addresses (bpf.Stack).
	NFrames int
	Frames  [MaxFrames]uint64
	// StackStop says why the CFI walk of SetStackCFI ended (0 for the
	// other stacks); FPSteps is how many of its steps took frame
	// records because no CFI row covered the frame (an object without
	// tables, JIT code, a process the tables did not know yet), and
	// FPLast whether the last step it tried was one: a walk that ended
	// early then ended where an object had no CFI.
	StackStop bpfunwind.Stop
	FPSteps   int
	FPLast    bool
	// NInterp is the number of interpreter frames in Interp (the CFI
	// walk's stacks, SetStackCFI, in a process whose interpreter
	// python.Tables holds): innermost first, as python.bpf.h reads
	// them, for interp.Merge to place among the native frames and the
	// interpreter to name. InterpStop is why that walk ended
	// (PROBEKIT_INTERP_STOP_*; 0 without the walk).
	NInterp    int
	Interp     [MaxInterpFrames]interp.Raw
	InterpStop uint8
	// Copy is the stack copy of a program loaded with SetStackCopy: a
	// struct probekit_stack_copy (bpf.DecodeStackCopy reads it), nil
	// when the stack could not be read. It aliases the record.
	Copy []byte
	// TimeNS is when the program ran: CLOCK_MONOTONIC, in nanoseconds
	// (bpf_ktime_get_ns).
	TimeNS uint64
	// Comm is the thread's command name, NUL-padded (bpf_get_current_comm).
	Comm [CommLen]byte
}

// CommLen is the size of a command name with its NUL (TASK_COMM_LEN).
const CommLen = 16

// CommName returns e.Comm up to its NUL.
func (e *Event) CommName() []byte {
	if i := bytes.IndexByte(e.Comm[:], 0); i >= 0 {
		return e.Comm[:i]
	}
	return e.Comm[:]
}

// Stack returns the frames of the hit's user stack.
func (e *Event) Stack() bpf.Stack { return e.Frames[:e.NFrames] }

// InterpStack returns the hit's interpreter frames, innermost first.
func (e *Event) InterpStack() []interp.Raw { return e.Interp[:e.NInterp] }

// Str returns value n's string, if it was read as one. n counts from 0,
// as Args does; tracer.Hit.Str takes a probe.ArgNum, from 1.
func (e *Event) Str(n int) ([]byte, bool) {
	if n < 0 || n >= MaxArgs || e.StrArgs&(1<<n) == 0 {
		return nil, false
	}
	k := bits.OnesCount32(e.StrArgs & (1<<n - 1))
	if k >= MaxStrs {
		return nil, false
	}
	return e.Strs[k], true
}

// ErrBadEvent is returned by Decode for a record that does not hold what
// its header says.
var ErrBadEvent = errors.New("record: malformed event record")

func badEvent(format string, args ...any) error {
	return fmt.Errorf("%w: %s (object and package out of sync?)", ErrBadEvent, fmt.Sprintf(format, args...))
}

// Decode decodes a ring buffer record (host byte order: the kernel wrote
// it) into e, overwriting all of it. e.Strs alias rec: they are valid
// until rec is reused. Decode does not allocate unless it fails.
func (e *Event) Decode(rec []byte) error {
	if len(rec) < HeaderSize {
		return badEvent("%d bytes, want at least %d", len(rec), HeaderSize)
	}
	ne := binary.NativeEndian
	kind, nvals, nstrs, nframes := Kind(rec[28]), int(rec[29]), int(rec[30]), int(rec[31])
	strArgs := uint32(ne.Uint16(rec[24:]))
	ninterp := int(rec[26])
	switch {
	case kind >= numKinds:
		return badEvent("kind %d", kind)
	case nvals > MaxArgs:
		return badEvent("%d values, at most %d", nvals, MaxArgs)
	case nstrs > MaxStrs || nstrs != bits.OnesCount32(strArgs) || strArgs>>nvals != 0:
		return badEvent("%d strings for values %#b of %d", nstrs, strArgs, nvals)
	case nframes > MaxFrames:
		return badEvent("%d stack frames, at most %d", nframes, MaxFrames)
	case ninterp > MaxInterpFrames:
		return badEvent("%d interpreter frames, at most %d", ninterp, MaxInterpFrames)
	}
	off := HeaderSize + 8*nvals + 8*nframes + InterpFrameSize*ninterp
	if len(rec) < off {
		return badEvent("%d bytes for %d values, %d frames and %d interpreter frames", len(rec), nvals, nframes, ninterp)
	}
	e.Kind = kind
	e.Cookie = ne.Uint64(rec)
	e.PID = ne.Uint32(rec[8:])
	e.TID = ne.Uint32(rec[12:])
	e.ArgCnt = int32(ne.Uint32(rec[16:]))
	e.TimeNS = ne.Uint64(rec[32:])
	copy(e.Comm[:], rec[40:HeaderSize])
	errs := ne.Uint32(rec[20:])
	e.Errors = errs &^ (hasCopy | stopMask | fpMask | fpLast)
	e.StackStop = bpfunwind.Stop(errs & stopMask >> stopShift)
	e.FPSteps = int(errs & fpMask >> fpShift)
	e.FPLast = errs&fpLast != 0
	withCopy := errs&hasCopy != 0
	e.StrArgs = strArgs
	e.NArgs = nvals
	for i := range e.Args {
		e.Args[i] = 0
		if i < nvals {
			e.Args[i] = int64(ne.Uint64(rec[HeaderSize+8*i:]))
		}
	}
	e.NFrames = nframes
	for i := range nframes {
		e.Frames[i] = ne.Uint64(rec[HeaderSize+8*nvals+8*i:])
	}
	e.NInterp = ninterp
	e.InterpStop = rec[27]
	decodeInterp(e.Interp[:ninterp], rec[HeaderSize+8*nvals+8*nframes:])
	rest := rec[off:]
	for k := range e.Strs {
		e.Strs[k] = nil
		if k >= nstrs {
			continue
		}
		n := bytes.IndexByte(rest, 0)
		if n < 0 || n >= StrLen {
			return badEvent("string %d not terminated within %d bytes", k, StrLen)
		}
		e.Strs[k], rest = rest[:n:n], rest[n+1:]
	}
	e.Copy = nil
	if withCopy {
		e.Copy = rest
	}
	return nil
}

// decodeInterp reads len(dst) struct probekit_interp_frame from b (host
// byte order), which holds them.
func decodeInterp(dst []interp.Raw, b []byte) {
	ne := binary.NativeEndian
	for i := range dst {
		f := b[InterpFrameSize*i:]
		dst[i] = interp.Raw{Code: ne.Uint64(f), Instr: ne.Uint32(f[8:]), Flags: ne.Uint32(f[12:])}
	}
}

// hasCopy is TRACE_HAS_COPY, bit 31 of a record's errors: a stack copy
// follows the strings, right after the last one's NUL.
const hasCopy = 1 << 31

// A record's errors hold, above the values' bits, the CFI walk's end in
// bits 24..26 (TRACE_STOP_SHIFT), its frame-record steps in bits 16..22
// (TRACE_FP_SHIFT) and, in bit 23, whether the last step tried was one.
const (
	stopShift = 24
	stopMask  = 7 << stopShift
	fpShift   = 16
	fpMask    = 0x7f << fpShift
	fpLast    = 1 << 23
	stackCFI  = 3 // TRACE_STACK_CFI
)

// SetStackCFI makes records carry the user stack walked inside BPF by
// unwind.bpf.h (x86-64): CFI rows where the frame's object has them,
// frame records where it has none, frame by frame, with why the walk
// ended (Event.StackStop) and how many steps took frame records
// (Event.FPSteps). The load then needs a bpfunwind.Tables' Replacements
// in LoadSpecOptions (after its Prepare of spec): a process whose
// objects the tables do not hold is walked by frame records alone.
func SetStackCFI(spec *ebpf.CollectionSpec) error {
	if err := spec.Variables[StackName].Set(uint32(stackCFI)); err != nil {
		return fmt.Errorf("set %s: %w", StackName, err)
	}
	return nil
}

// MaxCopyPages is the most pages SetStackCopy copies
// (PROBEKIT_STACK_COPY_PAGES).
const MaxCopyPages = 4

// SetStackCopy makes records carry a copy of the stack top (at most
// pages pages of 4 KiB from the stack pointer's page, 1 to
// MaxCopyPages) with the registers, in Event.Copy, instead of the
// frame-pointer walk: package unwind walks it with the objects' CFI.
func SetStackCopy(spec *ebpf.CollectionSpec, pages int) error {
	if pages < 1 || pages > MaxCopyPages {
		return fmt.Errorf("record: stack copy of %d pages, want 1 to %d", pages, MaxCopyPages)
	}
	if err := spec.Variables[StackName].Set(uint32(2)); err != nil {
		return fmt.Errorf("set %s: %w", StackName, err)
	}
	if err := spec.Variables[CopyPagesName].Set(uint32(pages)); err != nil {
		return fmt.Errorf("set %s: %w", CopyPagesName, err)
	}
	return nil
}

// AppendBinary appends e as the program writes it: what Decode reads
// back. Strings longer than StrLen-1 bytes or holding a NUL are an error.
func (e *Event) AppendBinary(b []byte) ([]byte, error) {
	if e.NArgs < 0 || e.NArgs > MaxArgs || e.StrArgs>>e.NArgs != 0 || bits.OnesCount32(e.StrArgs) > MaxStrs ||
		e.NFrames < 0 || e.NFrames > MaxFrames || e.NInterp < 0 || e.NInterp > MaxInterpFrames {
		return b, fmt.Errorf("record: %d values with strings %#b, %d frames", e.NArgs, e.StrArgs, e.NFrames)
	}
	ne := binary.NativeEndian
	nstrs := bits.OnesCount32(e.StrArgs)
	b = ne.AppendUint64(b, e.Cookie)
	b = ne.AppendUint32(b, e.PID)
	b = ne.AppendUint32(b, e.TID)
	b = ne.AppendUint32(b, uint32(e.ArgCnt))
	errs := e.Errors &^ (hasCopy | stopMask | fpMask | fpLast)
	errs |= uint32(e.StackStop) << stopShift & stopMask
	errs |= uint32(min(max(e.FPSteps, 0), 0x7f)) << fpShift
	if e.FPLast {
		errs |= fpLast
	}
	if e.Copy != nil {
		errs |= hasCopy
	}
	b = ne.AppendUint32(b, errs)
	b = ne.AppendUint16(b, uint16(e.StrArgs))
	b = append(b, byte(e.NInterp), e.InterpStop)
	b = append(b, byte(e.Kind), byte(e.NArgs), byte(nstrs), byte(e.NFrames))
	b = ne.AppendUint64(b, e.TimeNS)
	b = append(b, e.Comm[:]...)
	for _, v := range e.Args[:e.NArgs] {
		b = ne.AppendUint64(b, uint64(v))
	}
	for _, f := range e.Frames[:e.NFrames] {
		b = ne.AppendUint64(b, f)
	}
	for _, f := range e.Interp[:e.NInterp] {
		b = ne.AppendUint64(b, f.Code)
		b = ne.AppendUint32(b, f.Instr)
		b = ne.AppendUint32(b, f.Flags)
	}
	for _, s := range e.Strs[:nstrs] {
		if len(s) >= StrLen || bytes.IndexByte(s, 0) >= 0 {
			return b, fmt.Errorf("record: string %q: at most %d bytes, no NUL", s, StrLen-1)
		}
		b = append(append(b, s...), 0)
	}
	return append(b, e.Copy...), nil
}

// Objects is the loaded programs and their maps.
type Objects struct {
	// Program is the program to attach to USDT locations; nil when not
	// loaded (see Programs).
	Program *ebpf.Program
	// FuncProgram is the program to attach to function entries, return
	// sites and uretprobes, each with a FuncCookie; nil when not loaded.
	FuncProgram *ebpf.Program
	// Events is the ring buffer of Event records.
	Events *ebpf.Map
	// Dropped is a one-slot array counting events lost to a full ring
	// buffer (see DroppedCount).
	Dropped *ebpf.Map
	// Scratch is the per-CPU buffer records are built in.
	Scratch *ebpf.Map
	// CountsMap and HistMap are what ModeCount and ModeHist fill (see
	// Counts, Histograms).
	CountsMap, HistMap *ebpf.Map
	// KeyedMap is what ModeCount and ModeHist fill with keys (see
	// SetKeys, Keyed); KeyOverflow a one-slot array counting the hits it
	// had no room for (KeyOverflowCount).
	KeyedMap, KeyOverflow *ebpf.Map
	// LatStacks, LatKeys and LatLost are ModeLatency's: the threads'
	// stacks of open starts, the keys of their frames (with SetKeys) and
	// the counts of hits not timed (see LatencyLost).
	LatStacks, LatKeys, LatLost *ebpf.Map
	// StackMap holds the stacks of KeyStack keys, CFIStackMap those of
	// KeyStackCFI keys (see Stack).
	StackMap, CFIStackMap *ebpf.Map
	// Specs and IPToSpecID are usdt.bpf.h's __bpf_usdt_specs and
	// __bpf_usdt_ip_to_spec_id, for the attacher; nil without Program.
	Specs, IPToSpecID *ebpf.Map
	// FuncIPs is where FuncProgram finds each site's FuncCookie on a
	// kernel without BPF cookies (CookieFlagName false): give it to
	// package uprobe as Options.AddressTable. Nil without FuncProgram.
	FuncIPs *ebpf.Map

	// FaultingStrings is true when the programs were loaded sleepable,
	// their string reads faulting (SetFaultingStrings).
	FaultingStrings bool
	// SleepableRefusal is the kernel's refusal of the sleepable programs
	// when SetFaultingStrings was asked for and LoadSpec loaded them
	// without it (FaultingStrings false); nil otherwise.
	SleepableRefusal error

	// cfiPart is the KeyStackCFI key part's index + 1 (0: none).
	cfiPart int
	// With the interpreter walk (interp.go): the trace programs that
	// Program and FuncProgram tail-call, their array and the scratch.
	tail          []*ebpf.Program
	tailMap       *ebpf.Map
	interpScratch *ebpf.Map
	// armed is the start gate's global, bss its map (see Arm).
	armed *ebpf.Variable
	bss   *ebpf.Map
}

// Programs selects the programs LoadSpec loads.
type Programs uint8

const (
	// USDTProgram is trace_usdt, with usdt.bpf.h's maps.
	USDTProgram Programs = 1 << iota
	// FuncProgram is trace_func, with the table (FuncIPs) it reads its
	// probe from on kernels without BPF cookies.
	FuncProgram
)

// loadTarget receives what LoadSpec loads: cilium/ebpf loads only the
// programs and maps a struct names (and the maps those programs use).
type loadTarget struct {
	Events      *ebpf.Map `ebpf:"events"`
	Dropped     *ebpf.Map `ebpf:"dropped"`
	Scratch     *ebpf.Map `ebpf:"scratch"`
	Counts      *ebpf.Map `ebpf:"counts"`
	Hist        *ebpf.Map `ebpf:"hist"`
	Keyed       *ebpf.Map `ebpf:"keyed"`
	KeyOverflow *ebpf.Map `ebpf:"key_overflow"`
	LatStacks   *ebpf.Map `ebpf:"lat_stacks"`
	LatKeys     *ebpf.Map `ebpf:"lat_keys"`
	LatLost     *ebpf.Map `ebpf:"lat_lost"`
	Stacks      *ebpf.Map `ebpf:"stack_traces"`
	CFIStacks   *ebpf.Map `ebpf:"cfi_stacks"`
	// InterpScratch is where the interpreter walk leaves its frames.
	InterpScratch *ebpf.Map `ebpf:"trace_stack_scratch"`
	// The start gate (gate.go): the global and its map.
	Armed *ebpf.Variable `ebpf:"probekit_trace_armed"`
	BSS   *ebpf.Map      `ebpf:".bss"`
}

type loadUSDT struct {
	loadTarget
	Program    *ebpf.Program `ebpf:"trace_usdt"`
	Specs      *ebpf.Map     `ebpf:"__bpf_usdt_specs"`
	IPToSpecID *ebpf.Map     `ebpf:"__bpf_usdt_ip_to_spec_id"`
}

type loadFunc struct {
	loadTarget
	FuncProgram *ebpf.Program `ebpf:"trace_func"`
	FuncIPs     *ebpf.Map     `ebpf:"func_ips"`
}

type loadBoth struct {
	loadUSDT
	FuncProgram *ebpf.Program `ebpf:"trace_func"`
	FuncIPs     *ebpf.Map     `ebpf:"func_ips"`
}

// Close releases the program and the maps.
func (o *Objects) Close() error {
	var errs []error
	for _, c := range []interface{ Close() error }{o.Program, o.FuncProgram, o.Events, o.Dropped, o.Scratch, o.CountsMap, o.HistMap, o.KeyedMap, o.KeyOverflow, o.LatStacks, o.LatKeys, o.LatLost, o.StackMap, o.CFIStackMap, o.Specs, o.IPToSpecID, o.FuncIPs, o.bss} {
		errs = append(errs, c.Close()) // nil *Program and *Map close as nothing
	}
	errs = append(errs, o.closeInterp())
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
// before LoadSpec (usdt.Prepare, SetRingSize). As it is, the ring buffer
// is DefaultRingSize and the program wakes the reader as the kernel does
// by default.
func Spec() (*ebpf.CollectionSpec, error) {
	return loadTrace()
}

// SetRingSize sizes spec's ring buffer (a power of two from the page size
// to MaxRingSize) and makes the program wake the reader only once a
// quarter of it is unread: a reader that polls at least every few
// hundredths of a second then keeps up with a burst at the price of one
// wakeup per quarter ring, where the kernel's default wakes it for most
// records and costs the traced threads an interrupt each.
func SetRingSize(spec *ebpf.CollectionSpec, size, pageSize int) error {
	if err := CheckRingSize(size, pageSize); err != nil {
		return err
	}
	spec.Maps[EventsMapName].MaxEntries = uint32(size)
	if err := spec.Variables[WakeupBytesName].Set(uint64(size / 4)); err != nil {
		return fmt.Errorf("set %s: %w", WakeupBytesName, err)
	}
	return nil
}

// CheckRingSize refuses a ring buffer size the kernel would refuse (not a
// power of two, not a multiple of the page size) or above MaxRingSize.
func CheckRingSize(size, pageSize int) error {
	if size < pageSize || size > MaxRingSize || size&(size-1) != 0 || size%pageSize != 0 {
		return fmt.Errorf("ring buffer size %d: want a power of two from the page size (%d) to %dM", size, pageSize, MaxRingSize>>20)
	}
	return nil
}

// LoadSpec loads the programs which selects (at least one) of spec (from
// Spec) into the kernel, with the maps they use.
func LoadSpec(spec *ebpf.CollectionSpec, which Programs) (*Objects, error) {
	return LoadSpecOptions(spec, which, nil)
}

// LoadSpecOptions is LoadSpec with the collection's options: with a
// KeyStackCFI key part, opts.MapReplacements must hold a
// bpfunwind.Tables' Replacements (after its Prepare of spec). With a
// CFI stack (SetStackCFI or a KeyStackCFI part) and InterpMapName among
// the replacements too (python.Tables'), records and counted stacks
// carry the threads' Python frames: Program and FuncProgram are then
// the interpreter walk's programs (interp.go), and the load is not
// sleepable (SetFaultingStrings is dropped: a sleepable program cannot
// tail-call).
func LoadSpecOptions(spec *ebpf.CollectionSpec, which Programs, opts *ebpf.CollectionOptions) (*Objects, error) {
	if faultingStrings(spec) && interpWanted(spec, opts) {
		// A sleepable program cannot tail-call (no program array), and
		// the interpreter walk tail-calls the trace program: the
		// interpreter frames are kept, the faulting strings not.
		spec = spec.Copy()
		if err := withoutFaultingStrings(spec); err != nil {
			return nil, err
		}
	}
	o, err := loadSpecOptions(spec, which, opts)
	if err == nil || !faultingStrings(spec) {
		return o, err
	}
	// Refused sleepable (strings.go): the same programs without it.
	refusal := err
	spec = spec.Copy()
	if err := withoutFaultingStrings(spec); err != nil {
		return nil, err
	}
	o, err = loadSpecOptions(spec, which, opts)
	if err != nil {
		return nil, err
	}
	o.SleepableRefusal = refusal
	return o, nil
}

func loadSpecOptions(spec *ebpf.CollectionSpec, which Programs, opts *ebpf.CollectionOptions) (*Objects, error) {
	var o Objects
	var err error
	if err := sizeLatencyMaps(spec); err != nil {
		return nil, err
	}
	cfiPart, err := cfiKeyPart(spec)
	if err != nil {
		return nil, err
	}
	// A copy: the caller may set other values and load spec again.
	spec = spec.Copy()
	if err := setInterpRecords(spec, opts, cfiPart); err != nil {
		return nil, err
	}
	if err := dropStackTraceLoads(spec); err != nil {
		return nil, err
	}
	faulting := faultingStrings(spec)
	if _, err := compileUSDTFilter(spec); err != nil {
		return nil, err
	}
	if _, err := compileFuncFilter(spec); err != nil {
		return nil, err
	}
	inlineConstants(spec)
	dropDeadLoads(spec)
	var stackMode uint32
	if err := spec.Variables[StackName].Get(&stackMode); err != nil {
		return nil, fmt.Errorf("read %s: %w", StackName, err)
	}
	dropCFIWalk(spec, cfiPart > 0, stackMode == stackCFI)
	switch which {
	case USDTProgram:
		var l loadUSDT
		err = spec.LoadAndAssign(&l, opts)
		o = Objects{Program: l.Program, Specs: l.Specs, IPToSpecID: l.IPToSpecID}
		o.setMaps(l.loadTarget)
	case FuncProgram:
		var l loadFunc
		err = spec.LoadAndAssign(&l, opts)
		o = Objects{FuncProgram: l.FuncProgram, FuncIPs: l.FuncIPs}
		o.setMaps(l.loadTarget)
	case USDTProgram | FuncProgram:
		var l loadBoth
		err = spec.LoadAndAssign(&l, opts)
		o = Objects{Program: l.Program, FuncProgram: l.FuncProgram, Specs: l.Specs, IPToSpecID: l.IPToSpecID, FuncIPs: l.FuncIPs}
		o.setMaps(l.loadTarget)
	default:
		return nil, fmt.Errorf("record: no programs selected (%#b)", which)
	}
	if err != nil {
		return nil, fmt.Errorf("load the trace program: %w", err)
	}
	if wantsInterp(opts, cfiPart > 0 || stackMode == stackCFI) {
		if err := o.loadInterp(spec, which, opts); err != nil {
			o.Close()
			return nil, err
		}
	}
	o.cfiPart = cfiPart
	o.FaultingStrings = faulting
	return &o, nil
}

func (o *Objects) setMaps(l loadTarget) {
	o.Events, o.Dropped, o.Scratch = l.Events, l.Dropped, l.Scratch
	o.CountsMap, o.HistMap = l.Counts, l.Hist
	o.KeyedMap, o.KeyOverflow = l.Keyed, l.KeyOverflow
	o.LatStacks, o.LatKeys, o.LatLost = l.LatStacks, l.LatKeys, l.LatLost
	o.StackMap, o.CFIStackMap = l.Stacks, l.CFIStacks
	o.interpScratch = l.InterpScratch
	o.armed, o.bss = l.Armed, l.BSS
}

// Options are the choices Load makes before loading. The zero value
// selects BPF cookies and perf-event uprobes.
type Options struct {
	// NoCookie makes the programs find USDT specs through the IP map
	// and function probes through FuncIPs, for kernels without BPF
	// cookies (before 5.15).
	NoCookie bool
	// UprobeMulti loads the program for uprobe_multi links (kernel 6.6);
	// it can then not be attached with perf-event uprobes.
	UprobeMulti bool
	// StrMask has bit n set to read value n (from 0, bit 0 the first
	// argument) as a string too; tracer.Config.Strs takes probe.ArgNum.
	StrMask uint32
	// RingSize, when not 0, sizes the ring buffer and sets the wakeup
	// threshold (see SetRingSize).
	RingSize int
	// Programs selects the programs to load; 0 means USDTProgram.
	Programs Programs
	// Gated makes the programs record nothing until Objects.Arm (see
	// SetGate).
	Gated bool
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
	if err := spec.Variables[StrMaskName].Set(opts.StrMask); err != nil {
		return nil, nil, fmt.Errorf("set %s: %w", StrMaskName, err)
	}
	if opts.RingSize != 0 {
		if err := SetRingSize(spec, opts.RingSize, os.Getpagesize()); err != nil {
			return nil, nil, err
		}
	}
	if opts.Gated {
		if err := SetGate(spec); err != nil {
			return nil, nil, err
		}
	}
	if opts.UprobeMulti {
		spec.Programs[ProgramName].AttachType = ebpf.AttachTraceUprobeMulti
	}
	which := opts.Programs
	if which == 0 {
		which = USDTProgram
	}
	if opts.UprobeMulti && which&FuncProgram != 0 {
		spec.Programs[FuncProgramName].AttachType = ebpf.AttachTraceUprobeMulti
	}
	objs, err := LoadSpec(spec, which)
	if err != nil {
		return nil, nil, err
	}
	return objs, spec, nil
}
