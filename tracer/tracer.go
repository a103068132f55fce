package tracer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cilium/ebpf"
	"github.com/cilium/ebpf/ringbuf"
	"golang.org/x/sys/unix"

	"github.com/probekit/probekit/attach"
	"github.com/probekit/probekit/bpfunwind"
	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/jsontext"
	"github.com/probekit/probekit/internal/privilege"
	"github.com/probekit/probekit/interp/python"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/profile"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/usdt"
)

// Config is what Run traces and how it reports. The zero value of each
// field is its default; Probes is the one field required.
type Config struct {
	// Probes are the probes to attach (probe.Parse reads the command
	// line's form). With ModeLatency, Probes[:LatencyEnd] are the starts
	// and the rest the ends.
	Probes []probe.Spec
	// Process, when set, is the one process traced: the probes are
	// attached in it only (as it sees their files), and the trace ends
	// when it exits. OpenProcess opens one and refuses a kernel thread.
	Process *procmaps.Process
	// Command, when set, is launched stopped at its execve, attached,
	// then let run; it alone is traced, and the trace ends when it exits.
	// Command[0] runs as the shell would run it: found on PATH as
	// exec.LookPath finds it, the first executable of that name, be it a
	// script (a pyenv shim). When that file lacks the USDT probes asked
	// for in it, a warning names it and the file on PATH that has them.
	// Its standard streams are the caller's (its standard output goes to
	// standard error with JSON, which keeps Output a stream of objects).
	// Process and Command exclude each other. A trace that ends before
	// the command (ctx done, Limit reached, an error) ends it: SIGTERM,
	// then SIGKILL after commandGrace (with Follow, its descendants run
	// on).
	Command []string
	// Follow traces the descendants of Process or Command too (forked,
	// exec'd), each attached before it runs (package follow). A probe
	// target "*" or a glob follows the objects of Process, of the tree,
	// or without either of every process on the host.
	Follow bool

	// Mode is record.ModeEvents (a line per hit), ModeCount, ModeHist of
	// value HistValue (probe.Arg(N), numbered from 1 as --hist N, or
	// probe.Ret() for a uretprobe's return value) or ModeLatency.
	Mode      record.Mode
	HistValue probe.ArgNum
	// LatencyEnd is the index in Probes of ModeLatency's first end probe.
	LatencyEnd int
	// Keys key the counts and histograms (ParseKeys reads them); Top,
	// when not 0, prints the Top keys counted most.
	Keys []Key
	Top  int
	// Filter is evaluated in the kernel: a hit it rejects is neither sent
	// nor counted (ParseFilter reads the expression form).
	Filter []record.FilterTerm
	// Strs are the arguments read as the strings they point to
	// (probe.Arg(N), numbered from 1 as --str N), at most record.MaxStrs.
	// A hit's Str returns them.
	Strs []probe.ArgNum
	// strMask has bit Index() of each of Strs set, histIndex is
	// HistValue.Index() (Complete sets both).
	strMask   uint32
	histIndex int
	// RingSize is the ring buffer's size in bytes (0:
	// record.DefaultRingSize; record.CheckRingSize says what is allowed).
	RingSize int
	// Limit, when not 0, ends the trace after that many hits printed.
	Limit int
	// Interval, when not 0, prints the counts or histograms that often
	// too.
	Interval time.Duration
	// Stack prints each hit's user stack, symbolized; with ModeCount it
	// counts by stack (a stack key part). The stack is whole: walked
	// inside BPF (package bpfunwind, x86-64) from the objects' call-frame
	// information where they have it and by frame records where they
	// have none (JIT code, hand-written assembly), frame by frame, in
	// every process the trace reaches: -p PID, a launched command, -f
	// descendants, and host-wide, where a process is added at its first
	// hit (which is walked by frame pointers, and counted). A stack cut
	// short says why (docs/stacks.md). FramePointers takes the kernel's
	// frame-pointer walk instead (bpf_get_stack): cheaper, and short in
	// code built without frame pointers; it is also what other
	// architectures get, with a warning.
	Stack, FramePointers bool
	// Pprof, when set, is the file ModeCount's counted stacks are written
	// to as a pprof profile, instead of their being printed (StackTable
	// prints them too); Folded prints them folded instead of as a table.
	// Both need ModeCount with Stack or a stack key (Complete).
	Pprof              string
	Folded, StackTable bool
	// OnProfile, when set, receives ModeCount's counted stacks as a pprof
	// profile (samples carry the counts; locations function, file, line
	// and inlined frames; mappings build IDs) at the end and every
	// Interval, instead of their being printed; an error it returns ends
	// the trace with that error.
	OnProfile func(*profile.Profile) error
	// JSON prints a JSON object per line; Time adds each hit's time and
	// command name to text lines (JSON has them always).
	JSON, Time bool

	// Output receives the lines (os.Stdout when nil with Run; nothing
	// is printed when nil with Start), Warnings the warnings and the
	// end-of-trace notes (os.Stderr when nil; Trace.Warnings keeps them).
	Output, Warnings io.Writer
	// OnHit, when set, receives every hit of ModeEvents instead of its
	// line being printed; an error it returns ends the trace with that
	// error.
	OnHit func(*Hit) error
}

// Hit is one hit given to Config.OnHit: the decoded record and the site
// its cookie names. Both are valid until OnHit returns. Value and Str
// take an argument numbered from 1 (probe.Arg(N)); the embedded Event's
// Args are the same values indexed from 0. Params gives a function's
// values named and typed by its DWARF.
type Hit struct {
	*record.Event
	Site *Site
}

// check refuses a Config that Run cannot trace.
func (cfg *Config) check() error {
	switch {
	case len(cfg.Probes) == 0:
		return errors.New("no probe to trace")
	case cfg.Process != nil && len(cfg.Command) > 0:
		return errors.New("a process and a command to launch exclude each other")
	case cfg.Follow && cfg.Process == nil && len(cfg.Command) == 0:
		return errors.New("following descendants needs a process or a command")
	case cfg.Mode == record.ModeLatency && (cfg.LatencyEnd <= 0 || cfg.LatencyEnd >= len(cfg.Probes)):
		return fmt.Errorf("latency: LatencyEnd %d does not split the %d probes into starts and ends (Config.PairLatency sets it)", cfg.LatencyEnd, len(cfg.Probes))
	case cfg.OnHit != nil && cfg.Mode != record.ModeEvents:
		return errors.New("OnHit takes the hits of record.ModeEvents: the other modes send none")
	case cfg.OnProfile != nil && (cfg.Mode != record.ModeCount || !cfg.HasStackKey()):
		return errors.New("OnProfile takes the stacks counted by record.ModeCount with a stack key")
	case cfg.hasCFIKey() && runtime.GOARCH != "amd64":
		return fmt.Errorf("counting by CFI-unwound stack is for x86-64 (unwind.bpf.h), not %s", runtime.GOARCH)
	}
	return nil
}

// Site is what an event's cookie stands for: a USDT location or a
// function, and the parts of its lines that every hit shares, formatted
// once.
type Site struct {
	// Kind is the kind of the records this site sends.
	Kind record.Kind
	// Label names the probe in counts and histograms: PROVIDER:NAME,
	// uprobe:FUNC or uretprobe:FUNC. Sites of one label add up.
	Label string
	// Provider and Name are a USDT probe's.
	Provider, Name string
	// Function is the function's name (FUNC), or a USDT probe's name:
	// the "func" key.
	Function string
	// Address is the site's address in its file (a USDT location's, or
	// the function's entry).
	Address uint64
	// Location is the USDT location, whose argument specs say which
	// values are signed; nil for a function, whose values are registers,
	// printed signed.
	Location *usdt.Location
	// A line is head, PID, the form's tidSep, TID, mid, the values
	// separated by the form's argSep, end. Text:
	//	PID/TID provider:name @0xADDR [ARGS]
	//	PID/TID uprobe:FUNC @0xADDR [ARGS]
	//	PID/TID uretprobe:FUNC @0xADDR = RET
	// JSON:
	//	{"kind":"usdt","provider":P,"name":N,"pid":PID,"tid":TID,"address":A,"args":[ARGS]}
	//	{"kind":"uprobe","function":F,"pid":PID,"tid":TID,"address":A,"args":[ARGS]}
	//	{"kind":"uretprobe","function":F,"pid":PID,"tid":TID,"address":A,"ret":RET}
	head, mid, end []byte
	// hits counts the events of this site (hitCount reads them while
	// the loop runs).
	hits int64
	// skipped: the function of this site was left out of its glob's
	// attachment (uprobe.Options.Skip); counts and hints ignore it.
	skipped bool
	// params, set for a function its DWARF describes, prints the values
	// by name and type (params.go).
	params *siteParams
}

// hitCount is how many events of the site the trace has read so far.
func (s *Site) hitCount() int { return int(atomic.LoadInt64(&s.hits)) }

// lineForm is what the lines of one output format share.
type lineForm struct {
	tidSep string
	argSep byte
	// argsEnd ends a line of arguments, retEnd a line with a return
	// value.
	argsEnd, retEnd string
}

var (
	textForm = lineForm{tidSep: "/", argSep: ' ', argsEnd: "]\n", retEnd: "\n"}
	jsonForm = lineForm{tidSep: `,"tid":`, argSep: ',', argsEnd: "]}\n", retEnd: "}\n"}
)

// tracer is one run of probekit trace.
type tracer struct {
	cfg *Config
	// otherCommand: checkCommand warned that the command runs a file
	// without the probes; hintSilent then blames nothing else.
	otherCommand bool
	// ctx ends the trace when done.
	ctx   context.Context
	out   output
	form  *lineForm
	sites []Site
	hits  int
	// funcRegs is the kind of registers every function site sends, when
	// the program was built knowing it (record.SetFuncRegs); nil
	// otherwise.
	funcRegs *record.Regs
	// stacks names the frames of --stack; nil without it.
	stacks *stackNamer
	// exitErr is the launched command's failure (cmd.Wait), once the
	// loop has seen it exit.
	exitErr error
	// sitesMu, set by trace -f and selector targets, guards sites, which
	// grow while the loop runs (follow.go).
	sitesMu *sync.RWMutex
	// followed are the USDT probes a followed trace attached
	// (followhints.go).
	followed followedSites
	// errOut is where warnings go; it keeps them for Trace.Warnings.
	errOut *syncWriter
	// wallBase converts hit times to the wall clock (wallTime).
	wallBase int64
	// lat is --latency's (latency.go).
	lat *latencyState
	// drain, once closed (Trace.Stop), ends the loop when the ring is
	// empty: the hits fired before Stop are all read.
	drain <-chan struct{}
}

// wallTime converts a CLOCK_MONOTONIC time (bpf_ktime_get_ns) to the
// wall clock, as the clocks stood when the tracer started.
func (t *tracer) wallTime(mono uint64) time.Time {
	return time.Unix(0, t.wallBase+int64(mono))
}

// wallBase is the wall clock's time minus CLOCK_MONOTONIC's, in
// nanoseconds.
func wallBase() int64 {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts); err != nil {
		return 0
	}
	return time.Now().UnixNano() - ts.Nano()
}

// syncWriter serializes writes: warnings come from the loop and from
// follow's notifications at once. It keeps the lines of warnings and
// notes ("probekit trace: ..."), which Trace.Warnings returns.
type syncWriter struct {
	mu    sync.Mutex
	w     io.Writer
	lines []string
}

func (s *syncWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for line := range strings.Lines(string(b)) {
		if strings.HasPrefix(line, warnPrefix) {
			s.lines = append(s.lines, strings.TrimSuffix(line, "\n"))
		}
	}
	return s.w.Write(b)
}

// kept returns the lines kept so far.
func (s *syncWriter) kept() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.lines)
}

// warnPrefix starts every warning and end-of-trace note.
const warnPrefix = "probekit trace: "

// warnf prints a warning line.
func (t *tracer) warnf(format string, args ...any) {
	fmt.Fprintf(t.errOut, "probekit trace: warning: "+format+"\n", args...)
}

// setSameArgs compiles into the program where the USDT arguments are
// (usdt.SetSameArgs) when every site is known before load and the
// program filters or aggregates hits: a named file or the -p process's
// object, not followed. A filter on arguments is then written as
// instructions (record's compiled filter: a filtered-out hit is a
// register load, a compare and an exit; BenchmarkTraceCount's
// trace_count_filtered_out), keys and histograms read their arguments
// without the site's spec. Where the sites cannot be found now the
// arguments stay read from each site's spec, as they are for a
// followed or glob target. It returns how many sites it found (0 when
// it did not look).
func setSameArgs(spec *ebpf.CollectionSpec, cfg *Config) int {
	if len(cfg.Filter) == 0 && len(cfg.Keys) == 0 && cfg.Mode == record.ModeEvents || cfg.Follow || followSelectors(cfg) {
		return 0
	}
	var refs []usdt.ProbeRef
	for _, p := range cfg.Probes {
		if p.Kind != record.KindUSDT {
			continue
		}
		// A launched command's own view of a name (its PATH, its
		// libraries) is not known before it runs.
		if cfg.Process == nil && !strings.Contains(p.Target, "/") {
			return 0
		}
		refs = append(refs, usdt.ProbeRef{Target: p.Target, Provider: p.Provider, Name: p.Name})
	}
	_, sites, err := usdt.SetSameArgs(spec, refs, &usdt.Options{Process: cfg.Process})
	if err != nil {
		return 0
	}
	return sites
}

// Run attaches cfg's probes, then prints their hits (or with OnHit gives
// them to it) until ctx is done, the traced process or command exits, or
// Limit is reached; an aggregating mode prints what the kernel counted at
// the end (and every Interval). Everything attached is detached before
// Run returns; what the kernel dropped is reported on Warnings. It needs
// the capabilities internal/privilege's table names (docs/privileges.md),
// not root. Run is Start, with Output os.Stdout when nil, then Wait.
func Run(ctx context.Context, cfg *Config) error {
	tr, err := start(ctx, cfg, os.Stdout)
	if err != nil {
		return err
	}
	return tr.Wait()
}

// start carries a trace through its first phases: plan, load and attach;
// the loop then runs in its own goroutine, and Wait reports and releases.
// A nil Config.Output prints to stdout (Run: os.Stdout; Start: nothing).
// After an error of any phase,
// what the earlier ones took is released (one cleanup path: release).
func start(ctx context.Context, cfg *Config, stdout io.Writer) (*Trace, error) {
	tr := &Trace{stdout: stdout, drain: make(chan struct{}), done: make(chan struct{})}
	err := tr.begin(ctx, cfg)
	if err != nil {
		return nil, privilege.Explain("tracing", tr.release(err))
	}
	go func() {
		tr.loopErr = tr.loop()
		close(tr.done)
	}()
	return tr, nil
}

// begin runs the phases up to the loop.
func (tr *Trace) begin(ctx context.Context, cfg *Config) (err error) {
	if tr.plan, err = newPlan(cfg); err != nil {
		return err
	}
	if err := tr.load(); err != nil {
		return err
	}
	return tr.attach(ctx)
}

// Trace is a running trace, from Start: its counts, sites and warnings
// can be read while it runs, and Stop ends it. Inside, it carries the
// trace through its phases (plan, load, attach, loop, report) with what
// each took, released at the end.
type Trace struct {
	plan *plan
	// stdout is where a nil Config.Output prints.
	stdout io.Writer
	t      *tracer
	objs   *record.Objects
	att    *usdt.Attacher
	// tables are the CFI walk's, nil without it; pyTables the Python
	// frames' beside them, nil without them.
	tables   *bpfunwind.Tables
	pyTables *python.Tables
	// follows: the trace follows processes (attachFollowed), which
	// attaches them as they come; launched, proc, links and gates are
	// then unset.
	follows bool
	// launched is the command of Config.Command, proc the process the
	// probes are attached in (Config.Process or the command's), nil for
	// every process.
	launched *procmaps.Launched
	proc     *procmaps.Process
	links    []*attach.Link
	rd       *ringbuf.Reader
	// exited gets the traced process's or command's end.
	exited chan error
	// gates counts the calls that open the gates of gated probes in a
	// launched command (watchGates), nil when none is watched.
	gates *gateWatch
	// cleanups release, last first, what the phases took; each gets the
	// trace's error and returns it, or its own when it is the first.
	cleanups []func(error) error

	// drain, closed by Stop, ends the loop once the ring is read; done
	// is closed when the loop has ended, with loopErr.
	drain    chan struct{}
	done     chan struct{}
	loopErr  error
	stopOnce sync.Once
	// end reports and releases once, for Wait and Stop; err is its
	// result.
	endOnce sync.Once
	err     error
	// mu guards the maps against the release while the live state is
	// read (Counts, Histograms, Profile); ended is set by the release,
	// and final holds what was read just before it.
	mu    sync.RWMutex
	ended bool
	final finalState
	// live: the trace is Start's, whose caller reads it.
	live bool
}

// onRelease adds a release that cannot fail.
func (tr *Trace) onRelease(f func()) {
	tr.cleanups = append(tr.cleanups, func(err error) error { f(); return err })
}

// release runs the cleanups, last first, and returns err as they leave
// it.
func (tr *Trace) release(err error) error {
	for i := len(tr.cleanups) - 1; i >= 0; i-- {
		err = tr.cleanups[i](err)
	}
	tr.cleanups = nil
	return err
}

// plan is what the plan phase decided: the Config completed and checked,
// the programs the probes need, and the collection spec set for the
// mode, keys, filter and stacks.
type plan struct {
	cfg   *Config
	which record.Programs
	spec  *ebpf.CollectionSpec
	// oneSite: the program was built for one USDT site, index 0.
	oneSite bool
	// funcRegs is the kind of registers compiled into the program for
	// every function site (record.SetFuncRegs), nil when not known.
	funcRegs *record.Regs
}

// newPlan is the plan phase: it completes a copy of cfg and checks it,
// asks for the capabilities the trace needs, decides which programs and
// key parts the probes take, and sets them in record's collection spec.
// Nothing is loaded yet.
func newPlan(cfg *Config) (*plan, error) {
	cfg, err := completed(cfg)
	if err != nil {
		return nil, err
	}
	if err := privilege.Need("tracing", cfg.privileges()...); err != nil {
		return nil, err
	}
	if err := cfg.check(); err != nil {
		return nil, err
	}
	p := &plan{cfg: cfg}
	for _, pr := range cfg.Probes {
		if pr.Kind == record.KindUSDT {
			p.which |= record.USDTProgram
		} else {
			p.which |= record.FuncProgram
		}
	}
	if p.spec, err = record.Spec(); err != nil {
		return nil, err
	}
	if err := p.setSpec(); err != nil {
		return nil, err
	}
	return p, nil
}

// setSpec sets the spec's constants and maps for the Config.
func (p *plan) setSpec() error {
	cfg, spec := p.cfg, p.spec
	// The same call as uprobe.Prepare: both programs get this kernel's
	// attach type.
	if err := usdt.Prepare(spec); err != nil {
		return err
	}
	if err := sizeTraceMaps(spec); err != nil {
		return err
	}
	if err := spec.Variables[record.StrMaskName].Set(cfg.strMask); err != nil {
		return err
	}
	ringSize := cfg.RingSize
	if ringSize == 0 {
		ringSize = record.DefaultRingSize
	}
	if cfg.Mode != record.ModeEvents {
		// Nothing is sent per hit.
		ringSize = os.Getpagesize()
		if err := record.SetMode(spec, cfg.Mode, cfg.histIndex); err != nil {
			return err
		}
		if len(cfg.Keys) > 0 {
			parts := make([]record.KeyPart, len(cfg.Keys))
			for i, k := range cfg.Keys {
				parts[i] = k.KeyPart
				if k.Kind == record.KeyStack && cfg.walksCFI() {
					parts[i].Kind = record.KeyStackCFI
				}
			}
			if err := record.SetKeys(spec, parts); err != nil {
				return err
			}
		}
	}
	if err := record.SetRingSize(spec, ringSize, os.Getpagesize()); err != nil {
		return err
	}
	if len(cfg.Filter) > 0 {
		if err := record.SetFilter(spec, cfg.Filter); err != nil {
			return err
		}
	}
	// One USDT site and nothing else: its index is 0 (t.cookie numbers
	// sites as they attach), which a counted hit need not look up.
	if p.which&record.USDTProgram != 0 {
		sites := setSameArgs(spec, cfg)
		if sites == 1 && p.which == record.USDTProgram && (cfg.Mode == record.ModeCount || cfg.Mode == record.ModeHist) {
			if err := record.SetUSDTProbe(spec, 0); err != nil {
				return err
			}
			p.oneSite = true
		}
	}
	if p.which&record.FuncProgram != 0 && len(cfg.Filter) > 0 {
		if regs, ok := knownFuncRegs(cfg); ok {
			if err := record.SetFuncRegs(spec, regs); err != nil {
				return err
			}
			p.funcRegs = &regs
		}
	}
	if cfg.Stack && cfg.Mode == record.ModeEvents {
		if err := setStackRecords(spec, cfg); err != nil {
			return err
		}
	}
	if err := setLatencyMatch(spec, cfg); err != nil {
		return err
	}
	// Every probe starts at once (gate.go).
	if err := record.SetGate(spec); err != nil {
		return err
	}
	return setFaultingStrings(spec)
}

// load is the load phase: the CFI walk's tables when the trace walks
// stacks by CFI (with the interpreters' frame tables beside them), then
// the collection with its maps, and the USDT attacher over the
// collection's spec maps.
func (tr *Trace) load() error {
	p := tr.plan
	var opts *ebpf.CollectionOptions
	if p.cfg.walksCFI() {
		// The walk's tables, filled per traced process (stackNamer.watch).
		tables, err := bpfunwind.New(nil)
		if err != nil {
			return err
		}
		tr.onRelease(func() { tables.Close() })
		if err := tables.Prepare(p.spec); err != nil {
			return err
		}
		tr.tables = tables
		opts = &ebpf.CollectionOptions{MapReplacements: tables.Replacements()}
		warnings := p.cfg.Warnings
		if warnings == nil {
			warnings = os.Stderr
		}
		py := interpTables(p.spec, opts, warnings)
		tr.onRelease(func() { closeInterpTables(py) })
		tr.pyTables = py
	}
	objs, err := record.LoadSpecOptions(p.spec, p.which, opts)
	if err != nil {
		return err
	}
	tr.onRelease(func() { objs.Close() })
	tr.objs = objs
	if p.which&record.USDTProgram != 0 {
		if tr.att, err = usdt.NewAttacherWithMaps(p.spec, objs.Specs, objs.IPToSpecID); err != nil {
			return err
		}
	}
	return nil
}

// attach is the attach phase: it makes the tracer that formats and
// counts the hits, launches Config.Command stopped at its execve,
// attaches every probe (all of them, or the phase fails), arms the
// programs, watches the command's runtime gates (watchGates), opens the
// ring reader, then lets the command run. A trace that follows
// processes attaches as they come instead (attachFollowed).
func (tr *Trace) attach(ctx context.Context) error {
	cfg, objs := tr.plan.cfg, tr.objs
	stdout, stderr := cfg.Output, cfg.Warnings
	if stdout == nil {
		stdout = tr.stdout
	}
	if stderr == nil {
		stderr = os.Stderr
	}
	t := newTracer(cfg, stdout, stderr)
	if note := sleepableRefused(objs); note != "" {
		t.warnf("%s", note) // strings.go
	}
	t.funcRegs = tr.plan.funcRegs
	t.ctx = ctx
	t.drain = tr.drain
	tr.t = t
	if len(cfg.Command) > 0 {
		t.checkCommand()
	}
	if tr.tables != nil {
		tr.onRelease(t.startTables(objs, tr.tables, tr.pyTables))
	} else if note := cfg.framePointersNote(); note != "" {
		t.warnf("%s", note)
	}
	// Without BPF cookies (before Linux 5.15) a position-independent
	// file's sites are found by their runtime address in a process: a
	// trace of every process attaches per process, as a host watch.
	cookie, err := features.Have(features.Cookie)
	if err != nil {
		return err
	}
	if cfg.Follow || followSelectors(cfg) || !cookie && cfg.Process == nil && len(cfg.Command) == 0 {
		tr.follows = true
		return tr.attachFollowed()
	}
	tr.proc = cfg.Process
	if tr.proc != nil && t.stacks != nil {
		t.stacks.watch(tr.proc)
	}
	if len(cfg.Command) > 0 {
		launched, err := procmaps.Launch(launchCommand(cfg))
		if err != nil {
			return err
		}
		tr.launched, tr.proc = launched, launched.Process
		if t.stacks != nil {
			t.stacks.watchLaunched(launched)
		}
		// Kills the command, stopped since its execve, on an error of
		// any phase before Finish(nil) below lets it run.
		tr.cleanups = append(tr.cleanups, launched.Finish)
	}
	if err := tr.attachProbes(); err != nil {
		return err
	}
	if tr.launched != nil {
		tr.gates = watchGates(cfg.Probes, tr.links, tr.launched.Process)
		tr.onRelease(tr.gates.close)
	}
	if tr.plan.oneSite && len(t.sites) != 1 {
		return fmt.Errorf("the program was built for one USDT site and %d were attached (did the target change?)", len(t.sites))
	}
	if cfg.Mode == record.ModeCount && len(cfg.Keys) == 0 && len(t.sites) > record.MaxCounted {
		return fmt.Errorf("--count counts at most %d probe sites, these probes have %d", record.MaxCounted, len(t.sites))
	}
	if cfg.Mode == record.ModeEvents {
		if tr.rd, err = ringbuf.NewReader(objs.Events); err != nil {
			return err
		}
		tr.onRelease(func() { tr.rd.Close() })
	}
	return tr.watchEnd(ctx)
}

// attachProbes attaches each of Config.Probes in tr.proc (every process
// for nil) and arms the programs.
func (tr *Trace) attachProbes() error {
	t, objs := tr.t, tr.objs
	// With the gate setters' links (watchGates): closed at once.
	tr.onRelease(func() { closeLinks(append(tr.links[:len(tr.links):len(tr.links)], tr.gates.attached()...)) })
	opts := &usdt.Options{LocationCookie: t.cookie, Process: tr.proc}
	fa := &funcAttacher{t: t, prog: objs.FuncProgram, table: objs.FuncIPs, proc: tr.proc}
	tr.onRelease(fa.close)
	for _, p := range tr.plan.cfg.Probes {
		var l *attach.Link
		var err error
		if p.Kind == record.KindUSDT {
			// The target as given: a path, a program on PATH or a
			// library name, as the process sees it with -p.
			l, err = tr.att.Attach(objs.Program, p.Target, p.Provider, p.Name, t.latencyOptions(p, opts))
		} else {
			l, err = fa.attach(p)
		}
		if err != nil {
			if tr.launched != nil {
				return launchHint(err)
			}
			return err
		}
		tr.links = append(tr.links, l)
		for _, w := range l.Warnings() {
			t.warnf("%s", w)
		}
	}
	// Attached: the files may go (the kernel holds what it needs).
	fa.close()
	return objs.Arm()
}

// watchEnd makes tr.exited get the end of the traced process, and lets
// the launched command run: from here its exit ends the trace, and a
// trace that ends first ends it (endCommand).
func (tr *Trace) watchEnd(ctx context.Context) error {
	tr.exited = make(chan error, 1)
	if proc := tr.plan.cfg.Process; proc != nil {
		// Like a launched command, a traced process ends the trace when
		// it exits.
		wctx, cancel := context.WithCancel(ctx)
		tr.onRelease(cancel)
		go func() {
			if proc.WaitExit(wctx) == nil {
				tr.exited <- nil
			}
		}()
	}
	if tr.launched == nil {
		return nil
	}
	if err := tr.launched.Finish(nil); err != nil {
		return err
	}
	waited := make(chan struct{})
	go func() {
		tr.exited <- tr.launched.Wait()
		close(waited)
	}()
	tr.onRelease(func() { endCommand(tr.launched.Cmd.Process, waited) })
	return nil
}

// loop is the loop phase: it reads the ring and prints or hands over the
// hits, or waits and prints the counts, until ctx is done, the traced
// process ends or Limit is reached, then says what the kernel dropped.
func (tr *Trace) loop() error {
	return tr.t.run(tr.objs, tr.rd, tr.t.ctx.Done(), tr.exited)
}

// report is the report phase, once the loop has ended: the hints about
// probes that saw no hit, and the launched command's failure.
func (tr *Trace) report() error {
	t, cfg := tr.t, tr.plan.cfg
	if tr.follows {
		t.hintFollowed()
	} else {
		prog := ""
		if tr.launched != nil {
			prog = tr.launched.Cmd.Path
		}
		t.hintSilent(t.errOut, tr.links, tr.proc, prog, tr.gates.closed())
	}
	if t.exitErr != nil && len(cfg.Command) > 0 {
		// Every event is printed; the command failed (a crash under the
		// probes would show here).
		return fmt.Errorf("%s: %w", cfg.Command[0], t.exitErr)
	}
	return nil
}

// commandGrace is how long a launched command has to exit after SIGTERM
// when its trace ends first.
const commandGrace = time.Second

// endCommand ends a launched command that outlives its trace: SIGTERM,
// SIGKILL after commandGrace, and returns once it is reaped (waited
// closed) or at once if it was.
func endCommand(p *os.Process, waited <-chan struct{}) {
	select {
	case <-waited:
		return
	default:
	}
	p.Signal(syscall.SIGTERM)
	select {
	case <-waited:
		return
	case <-time.After(commandGrace):
	}
	p.Kill()
	<-waited
}

// launchHint adds to the refusal of a launched command's probe without
// BPF cookies that -f attaches it: stopped at its execve, the command
// has not mapped its libraries, whose runtime addresses the probes then
// need; a followed process gets its probes as it maps each file.
func launchHint(err error) error {
	if !errors.Is(err, ebpf.ErrNotSupported) {
		return err
	}
	if cookie, ferr := features.Have(features.Cookie); ferr != nil || cookie {
		return err
	}
	return fmt.Errorf("%w (with -f the probes are attached as the command maps the file)", err)
}

// run prints the hits (rd set) or the counts until stop, the end of the
// traced process (exited) or -n, then says what the kernel dropped.
func (t *tracer) run(objs *record.Objects, rd *ringbuf.Reader, stop <-chan struct{}, exited <-chan error) error {
	var err error
	if rd != nil {
		err = t.loop(rd, stop, exited)
	} else {
		err = t.aggregateLoop(objs, stop, exited)
	}
	if err != nil {
		return err
	}
	if n, err := objs.DroppedCount(); err == nil && n > 0 {
		if rd != nil {
			fmt.Fprintf(t.errOut, "probekit trace: %d events lost (ring buffer full; a larger --ring-size keeps more)\n", n)
		} else {
			fmt.Fprintf(t.errOut, "probekit trace: %d hits not counted (no value to count, or the histogram map full)\n", n)
		}
	}
	if t.cfg.Mode == record.ModeLatency {
		t.reportLatencyLost(objs)
	}
	if len(t.cfg.Keys) > 0 {
		if n, err := objs.KeyOverflowCount(); err == nil && n > 0 {
			fmt.Fprintf(t.errOut, "probekit trace: %d hits not counted: the key map is full (%d keys)\n", n, record.MaxKeyed)
		}
	}
	return nil
}

// maxClosing bounds the links closed at once by closeLinks (each blocks a
// thread in close(2)).
const maxClosing = 512

// closeLinks closes links concurrently. Closing a uprobe link waits for
// the kernel's RCU grace periods (tens of milliseconds each); one at a
// time, the 2,566 links of uprobe:libc.so.6:* took two minutes to close,
// all at once about a second: concurrent closes share grace periods.
func closeLinks(links []*attach.Link) {
	var wg sync.WaitGroup
	slots := make(chan struct{}, maxClosing)
	for _, l := range links {
		slots <- struct{}{}
		wg.Go(func() {
			l.Close()
			<-slots
		})
	}
	wg.Wait()
}

func newTracer(cfg *Config, stdout, stderr io.Writer) *tracer {
	t := &tracer{cfg: cfg, out: output{w: stdout, buf: make([]byte, 0, outputChunk+record.MaxEventSize*8)}, form: &textForm, errOut: &syncWriter{w: stderr}, wallBase: wallBase(),
		lat: &latencyState{ends: map[uint64]bool{}}}
	if cfg.JSON {
		t.form = &jsonForm
	}
	if cfg.Stack || cfg.HasStackKey() {
		t.stacks = newStackNamer(t.warnf)
	}
	return t
}

// OpenProcess opens process pid for Config.Process, refusing a kernel
// thread: it has no user space, so no probe of it ever fires.
func OpenProcess(pid int) (*procmaps.Process, error) {
	proc, err := procmaps.Open(pid)
	if err != nil {
		return nil, err
	}
	kthread, err := proc.KernelThread()
	if err != nil {
		return nil, err
	}
	if kthread {
		return nil, fmt.Errorf("pid %d is a kernel thread: no user space to trace", pid)
	}
	return proc, nil
}

// cookie numbers each attached location; events carry the number.
func (t *tracer) cookie(p *usdt.Probe, i int) uint64 {
	loc := &p.Locations[i]
	s := Site{Location: loc, Kind: record.KindUSDT, Label: p.Provider + ":" + p.Name, Provider: p.Provider, Name: p.Name, Function: p.Name, Address: loc.Address, end: []byte(t.form.argsEnd)}
	if t.cfg.JSON {
		s.head = append(s.head, `{"kind":"usdt","provider":`...)
		s.head = jsontext.Append(s.head, p.Provider, false)
		s.head = append(s.head, `,"name":`...)
		s.head = jsontext.Append(s.head, p.Name, false)
		s.head = append(s.head, `,"pid":`...)
		s.mid = fmt.Appendf(nil, `,"address":%d,"args":[`, loc.Address)
	} else {
		s.mid = fmt.Appendf(nil, " %s:%s @%#x [", Escape(p.Provider), Escape(p.Name), loc.Address)
	}
	t.sites = append(t.sites, s)
	return uint64(len(t.sites) - 1)
}

// liveInterval bounds how long a hit waits before it is printed (the
// program does not wake the reader for every record: the reader polls),
// and how long a signal or the command's exit waits for the loop.
const liveInterval = 100 * time.Millisecond

// checkEvery is how many hits the loop formats between two looks at the
// clock and the stop signals while the ring stays busy.
const checkEvery = 1024

func (t *tracer) loop(rd *ringbuf.Reader, stop <-chan struct{}, exited <-chan error) error {
	rec := ringbuf.Record{RawSample: make([]byte, 0, record.MaxRecordSize)}
	var ev record.Event
	draining := false
	rd.SetDeadline(time.Now().Add(liveInterval))
	for {
		err := rd.ReadInto(&rec)
		switch {
		case errors.Is(err, os.ErrDeadlineExceeded):
			// Nothing more came before the deadline: the ring is empty.
			if err := t.out.flush(); err != nil {
				return err
			}
			if draining {
				return nil
			}
		case err != nil:
			return err
		default:
			if err := t.handle(rec.RawSample, &ev); err != nil {
				return err
			}
			if t.cfg.Limit > 0 && t.hits >= t.cfg.Limit {
				return t.out.flush()
			}
			if draining || rec.Remaining != 0 && t.hits%checkEvery != 0 {
				continue
			}
			// Remaining 0: the ring is empty for now, and the next
			// read waits for a wakeup or the deadline.
			if rec.Remaining == 0 || time.Since(t.out.last) >= liveInterval {
				if err := t.out.flush(); err != nil {
					return err
				}
			}
		}
		// Between bursts, and every checkEvery hits of a long one.
		select {
		case <-stop:
			return t.out.flush()
		case <-t.drain:
			// Stop: what was fired before it is in the ring; read until
			// it is empty.
			draining = true
			rd.SetDeadline(time.Now())
			continue
		case err := <-exited:
			// Everything the command fired is in the ring by now: read
			// until it is empty, then stop.
			t.exitErr = err
			draining = true
			rd.SetDeadline(time.Now())
			continue
		default:
		}
		rd.SetDeadline(time.Now().Add(liveInterval))
	}
}

// handle decodes a record into ev and prints it, a chunk of output at a
// time.
func (t *tracer) handle(rec []byte, ev *record.Event) error {
	err := ev.Decode(rec)
	if err != nil {
		return err
	}
	if t.cfg.OnHit != nil {
		if err := t.give(ev); err != nil {
			return err
		}
		t.hits++
		return nil
	}
	if t.out.buf, err = t.appendHit(t.out.buf, ev); err != nil {
		return err
	}
	t.hits++
	if len(t.out.buf) >= outputChunk {
		return t.out.write()
	}
	return nil
}

// siteOf is the site of ev's cookie, its hit counted; t.sitesMu, where
// set, is held.
func (t *tracer) siteOf(ev *record.Event) (*Site, error) {
	if ev.Cookie >= uint64(len(t.sites)) || ev.ArgCnt < 0 {
		return nil, fmt.Errorf("event for unknown location (cookie %d, arg count %d)", ev.Cookie, ev.ArgCnt)
	}
	site := &t.sites[ev.Cookie]
	if ev.Kind != site.Kind {
		return nil, fmt.Errorf("event of kind %d for a site of kind %d (cookie %d)", ev.Kind, site.Kind, ev.Cookie)
	}
	atomic.AddInt64(&site.hits, 1)
	return site, nil
}

// give hands ev and its site to Config.OnHit.
func (t *tracer) give(ev *record.Event) error {
	if t.sitesMu != nil {
		t.sitesMu.RLock()
		defer t.sitesMu.RUnlock()
	}
	site, err := t.siteOf(ev)
	if err != nil {
		return err
	}
	return t.cfg.OnHit(&Hit{Event: ev, Site: site})
}

// appendHit appends ev's line to b.
func (t *tracer) appendHit(b []byte, ev *record.Event) ([]byte, error) {
	if t.sitesMu != nil {
		t.sitesMu.RLock()
		defer t.sitesMu.RUnlock()
	}
	site, err := t.siteOf(ev)
	if err != nil {
		return b, err
	}
	form := t.form
	if t.cfg.Time && !t.cfg.JSON {
		// TIME COMM PID/TID ...
		b = t.wallTime(ev.TimeNS).AppendFormat(b, "15:04:05.000000000")
		b = append(b, ' ')
		b = AppendEscaped(b, ev.CommName())
		b = append(b, ' ')
	}
	b = append(b, site.head...)
	b = strconv.AppendUint(b, uint64(ev.PID), 10)
	b = append(b, form.tidSep...)
	b = strconv.AppendUint(b, uint64(ev.TID), 10)
	if t.cfg.JSON {
		b = append(b, `,"comm":`...)
		b = jsontext.Append(b, ev.CommName(), false)
		b = append(b, `,"time_ns":`...)
		b = strconv.AppendUint(b, ev.TimeNS, 10)
		b = append(b, `,"time":"`...)
		b = append(t.wallTime(ev.TimeNS).UTC().AppendFormat(b, time.RFC3339Nano), '"')
	}
	b = append(b, site.mid...)
	if site.params != nil {
		b = t.appendParams(b, ev, site)
	} else {
		for i := range ev.NArgs {
			if i > 0 {
				b = append(b, form.argSep)
			}
			b = appendArg(b, ev, i, site.Location, t.cfg.JSON)
		}
	}
	if t.stacks == nil {
		return append(b, site.end...), nil
	}
	frames, cut := t.stacks.symbolize(ev)
	if t.cfg.JSON {
		// The stack goes in the object: before its closing "}\n".
		b = append(b, site.end[:len(site.end)-2]...)
		return append(appendStackJSON(b, frames, cut), "}\n"...), nil
	}
	return appendStackText(append(b, site.end...), frames, cut), nil
}

// appendArg appends value i: signed or unsigned as its spec says (signed
// without a spec: a register), a quoted string (strings.go), the mark of
// a string that could not be read, or null when the BPF program could
// not read the value.
func appendArg(b []byte, ev *record.Event, i int, loc *usdt.Location, json bool) []byte {
	if strUnreadable(ev, i) {
		return appendUnreadable(b, uint64(ev.Args[i]), json)
	}
	if ev.Errors&(1<<i) != 0 {
		return append(b, "null"...)
	}
	if str, ok := ev.Str(i); ok {
		return appendStr(b, str, json)
	}
	v := ev.Args[i]
	if loc == nil || i >= len(loc.Args) || loc.Args[i].Signed {
		return strconv.AppendInt(b, v, 10)
	}
	// Unsigned: the program zero-extended it; an 8-byte value needs the
	// full unsigned range.
	return strconv.AppendUint(b, uint64(v), 10)
}

// outputChunk is the size of the writes of a burst: a pipe takes 64 KiB
// at a time, and fewer, larger writes leave the traced program the CPU.
const outputChunk = 256 << 10

// output batches lines: written by the chunk in a burst, flushed when the
// ring is empty and at least every liveInterval.
type output struct {
	w    io.Writer
	buf  []byte
	last time.Time // last flush
}

// write hands the lines to w.
func (o *output) write() error {
	if len(o.buf) == 0 {
		return nil
	}
	_, err := o.w.Write(o.buf)
	o.buf = o.buf[:0]
	return err
}

// flush writes the lines and flushes w when it buffers (main's stdout).
func (o *output) flush() error {
	o.last = time.Now()
	if err := o.write(); err != nil {
		return err
	}
	if f, ok := o.w.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}
