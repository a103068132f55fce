package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/probekit/probekit/follow"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
	"github.com/probekit/probekit/tracer"
)

const traceUsage = "trace [--json] [--time] [-o FILE] [-p PID] [-f] [-n COUNT] [--str N,...] [--ring-size SIZE] [--stack[=fp] | --count [--stack [--folded] [--pprof FILE]] | --hist N|ret | --latency] [--by KEY,... [--top N]] [-i SECONDS] [--filter EXPR] PROBE... [-- CMD ARGS...]\n" +
	"      PROBE := [usdt:]TARGET:PROVIDER:NAME | uprobe:TARGET:FUNC | uretprobe:TARGET:FUNC\n" +
	"      --latency uprobe:TARGET:FUNC (entry to return) | --latency START END (two probes, paired per thread)"

func init() {
	register(&command{
		name:    "trace",
		usage:   traceUsage,
		summary: "print every hit of the USDT probes (globs allowed in PROVIDER and NAME) with its decoded arguments, of the functions (globs allowed in FUNC) with their argument registers, and of their returns with the return value; with -- CMD, launch CMD stopped until attached, trace only it, and exit when it exits; with -f, the descendants of CMD or of -p PID too, each attached before it runs; TARGET \"*\" or a glob (python3*): every such object of -p PID or of the -f tree, now and later, or without either of every process on the host",
		runIO:   runTrace,
	})
}

// traceRequest is a parsed command line: the trace, and what only the
// command line has.
type traceRequest struct {
	tracer.Config
	// pid is -p's process, opened as Config.Process when the trace
	// starts.
	pid int
	// outPath is the file the output goes to instead of standard output
	// (-o).
	outPath string
}

func parseTrace(args []string) (*traceRequest, error) {
	var cmd []string
	for i, a := range args {
		if a == "--" {
			args, cmd = args[:i], args[i+1:]
			break
		}
	}
	fs := newFlagSet("trace")
	req := &traceRequest{Config: tracer.Config{Command: cmd}}
	fs.BoolVar(&req.JSON, "json", false, "one JSON object per hit")
	pid := pidFlag(fs, "trace only process `PID`")
	fs.IntVar(&req.Limit, "n", 0, "exit after COUNT hits (at least 1; without -n, no limit)")
	strs := fs.String("str", "", "comma-separated argument numbers `N,...` (from 1) to print as strings")
	ring := fs.String("ring-size", "", "the ring buffer's `SIZE`: a power of two with K, M or G (default 16M)")
	count := fs.Bool("count", false, "count the hits of each probe in the kernel; print the counts at exit")
	hist := fs.String("hist", "", "a log2 histogram of argument N (from 1) or of ret, built in the kernel; printed at exit")
	latency := fs.Bool("latency", false, "a log2 histogram of nanoseconds from a function's entry to its return (one uprobe PROBE), or from START to END (two PROBEs), paired per thread in the kernel; printed at exit")
	interval := fs.Int("i", 0, "with --count or --hist, print every SECONDS too")
	fs.StringVar(&req.outPath, "o", "", "write the output to FILE (created or truncated) instead of standard output")
	fs.BoolVar(&req.Time, "time", false, "print each hit's time and command name (--json has them always)")
	fs.Var(&stackFlag{req}, "stack", "print each hit's whole user stack, symbolized (CFI where objects have it, frame pointers where not; =fp: frame pointers only, cheaper); with --count, count by stack")
	fs.StringVar(&req.Pprof, "pprof", "", "with --count --stack, write the counted stacks to FILE as a pprof profile")
	fs.BoolVar(&req.Folded, "folded", false, "with --count --stack, print the counted stacks folded (main;outer;leaf COUNT)")
	by := fs.String("by", "", "with --count or --hist, per KEY[,KEY...]: arg N, str N, ret, pid, tid, comm, probe, func")
	filter := fs.String("filter", "", "only the hits for which EXPR holds (argN, strN, ret, pid, tid, comm compared with constants, joined by && and ||), tested in the kernel")
	fs.IntVar(&req.Top, "top", 0, "with --by, print the N keys counted most")
	fs.BoolVar(&req.Follow, "f", false, "follow the descendants of -p PID or of -- CMD (forked, exec'd), attached before they run")
	pos, err := parseFlags(fs, joinByArgs(args))
	if err != nil {
		return nil, err
	}
	req.pid = *pid
	if *by != "" {
		if req.Keys, err = tracer.ParseKeys(*by); err != nil {
			return nil, usagef("--by %q: %v", *by, err)
		}
	}
	req.RingSize = record.DefaultRingSize
	if *ring != "" {
		n, err := parseSize(*ring)
		if err == nil {
			err = record.CheckRingSize(n, os.Getpagesize())
		}
		if err != nil {
			return nil, usagef("--ring-size %q: %v", *ring, err)
		}
		req.RingSize = n
	}
	if *strs != "" {
		for _, f := range strings.Split(*strs, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > record.MaxArgs {
				return nil, usagef("--str %q: want argument numbers from 1 to %d", *strs, record.MaxArgs)
			}
			if !slices.Contains(req.Strs, probe.Arg(n)) {
				req.Strs = append(req.Strs, probe.Arg(n))
			}
		}
		if len(req.Strs) > record.MaxStrs {
			return nil, usagef("--str %q: at most %d string arguments", *strs, record.MaxStrs)
		}
	}
	histRet := false
	switch {
	case *latency && (*count || *hist != ""):
		return nil, usagef("--latency, --count and --hist exclude each other")
	case *latency:
		req.Mode = record.ModeLatency
	case *count && *hist != "":
		return nil, usagef("--count and --hist exclude each other")
	case *count:
		req.Mode = record.ModeCount
	case *hist == "ret":
		req.Mode, req.HistValue, histRet = record.ModeHist, probe.Ret(), true
	case *hist != "":
		n, err := strconv.Atoi(*hist)
		if err != nil || n < 1 || n > record.MaxArgs {
			return nil, usagef("--hist %q: want an argument number from 1 to %d, or ret", *hist, record.MaxArgs)
		}
		req.Mode, req.HistValue = record.ModeHist, probe.Arg(n)
	}
	if err := stackCounting(req); err != nil {
		return nil, err
	}
	if req.Mode != record.ModeEvents {
		switch {
		case req.Limit != 0:
			return nil, usagef("-n counts printed hits: --count, --hist and --latency print none")
		case len(req.Strs) != 0:
			return nil, usagef("--str prints strings of hits: --count, --hist and --latency print none")
		case req.Time:
			return nil, usagef("--time prints the time of each hit: --count, --hist and --latency print no hits")
		case *interval < 0:
			return nil, usagef("-i %d: want seconds", *interval)
		case req.Top < 0:
			return nil, usagef("--top %d: want a number of keys", req.Top)
		case req.Top > 0 && len(req.Keys) == 0:
			return nil, usagef("--top prints the top keys of --by")
		}
		req.Interval = time.Duration(*interval) * time.Second
	} else if *interval != 0 {
		return nil, usagef("-i prints the counts of --count, --hist or --latency")
	} else if len(req.Keys) > 0 || req.Top != 0 {
		return nil, usagef("--by and --top key the counts of --count, --hist or --latency")
	}
	switch {
	case len(pos) == 0:
		return nil, usagef("want at least one PROBE: [usdt:]TARGET:PROVIDER:NAME, uprobe:TARGET:FUNC or uretprobe:TARGET:FUNC")
	case req.Limit < 0 || req.Limit == 0 && nSet(fs):
		// 0 is the default, no limit; written out it is refused rather
		// than read as "no limit" or "exit at once".
		return nil, usagef("-n %d: want a count of at least 1 (without -n, no limit)", req.Limit)
	case req.pid != 0 && len(cmd) > 0:
		return nil, usagef("-p and -- CMD exclude each other")
	case req.Follow && req.pid == 0 && len(cmd) == 0:
		return nil, usagef("-f follows the descendants of -p PID or of -- CMD")
	}
	if cmd != nil && len(cmd) == 0 {
		return nil, usagef("-- needs a command")
	}
	takesStrs := false
	for _, p := range pos {
		ps, err := probe.Parse(p)
		if err != nil {
			return nil, usagef("probe %v", err)
		}
		req.Probes = append(req.Probes, ps)
		takesStrs = takesStrs || ps.Kind != record.KindUretprobe
	}
	for _, p := range req.Probes {
		switch {
		case !follow.Selector(p.Target):
		case p.Kind != record.KindUSDT:
			return nil, usagef("targets \"*\" and globs take USDT probes; uprobe and uretprobe need a named target")
		case len(cmd) > 0 && !req.Follow:
			return nil, usagef("a target \"*\" or a glob with -- CMD needs -f")
		}
	}
	if req.Mode == record.ModeLatency {
		if err := req.PairLatency(); err != nil {
			return nil, usagef("%v", err)
		}
	}
	if req.Mode == record.ModeHist {
		for _, p := range req.Probes {
			if (p.Kind == record.KindUretprobe) != histRet {
				return nil, usagef("--hist %s: a uretprobe has one value, ret; a USDT probe and a uprobe have arguments (N from 1)", *hist)
			}
		}
	}
	if *filter != "" {
		terms, usesRet, usesArgs, err := tracer.ParseFilter(*filter)
		if err != nil {
			return nil, usagef("--filter %q: %v", *filter, err)
		}
		for _, p := range req.startProbes() {
			if ret := p.Kind == record.KindUretprobe; ret && usesArgs || !ret && usesRet {
				return nil, usagef("--filter %q: a uretprobe has one value, ret; a USDT probe and a uprobe have arguments (argN, strN)%s", *filter, req.atStart())
			}
		}
		req.Filter = terms
	}
	for _, k := range req.Keys {
		for _, p := range req.startProbes() {
			ret := p.Kind == record.KindUretprobe
			if (k.Kind == record.KeyArg || k.Kind == record.KeyStr) && (k.Name == "ret") != ret {
				return nil, usagef("--by %s: a uretprobe has one value, ret; a USDT probe and a uprobe have arguments (arg N, str N)%s", k.Name, req.atStart())
			}
		}
	}
	if len(req.Strs) != 0 && !takesStrs {
		return nil, usagef("--str %q: numbers arguments, and a uretprobe has none: it prints a return value", *strs)
	}
	return req, nil
}

// nSet reports whether -n was given.
func nSet(fs *flag.FlagSet) bool {
	set := false
	fs.Visit(func(f *flag.Flag) { set = set || f.Name == "n" })
	return set
}

func runTrace(args []string, stdout, stderr io.Writer) error {
	req, err := parseTrace(args)
	if errors.Is(err, flag.ErrHelp) {
		fmt.Fprintln(stdout, "usage: probekit "+traceUsage)
		return err
	}
	if err != nil {
		var ue *usageError
		if errors.As(err, &ue) {
			return err
		}
		return usagef("%v", err)
	}
	if req.pid != 0 {
		if req.Process, err = tracer.OpenProcess(req.pid); err != nil {
			return err
		}
	}
	req.Output, req.Warnings = stdout, stderr
	ctx, stop := signal.NotifyContext(context.Background(), endSignals...)
	defer stop()
	if req.outPath == "" {
		return quietEnd(tracer.Run(ctx, &req.Config))
	}
	f, err := os.OpenFile(req.outPath, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return err
	}
	req.Output = f
	err = tracer.Run(ctx, &req.Config)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// parseSize reads a byte count with an optional K, M or G (powers of
// 1024, "iB" allowed) suffix.
func parseSize(s string) (int, error) {
	num := strings.TrimSuffix(strings.TrimSuffix(s, "iB"), "B")
	shift := 0
	if n := len(num); n > 0 {
		switch num[n-1] {
		case 'K', 'k':
			shift = 10
		case 'M', 'm':
			shift = 20
		case 'G', 'g':
			shift = 30
		}
		if shift != 0 {
			num = num[:n-1]
		}
	}
	v, err := strconv.ParseUint(num, 10, 64)
	if err != nil || v == 0 {
		return 0, errors.New("want a size such as 16M, 256K or 1G")
	}
	if bits.Len64(v)+shift > 31 {
		return 0, fmt.Errorf("too large: at most %dM", record.MaxRingSize>>20)
	}
	return int(v) << shift, nil
}

// stackFlag is --stack: a bool flag that also takes =fp (the kernel's
// frame-pointer walk, tracer.Config.FramePointers) and =cfi (the
// default, kept as a name: the whole-stack walk).
type stackFlag struct{ req *traceRequest }

func (f *stackFlag) IsBoolFlag() bool { return true }

func (f *stackFlag) String() string {
	if f.req == nil || !f.req.Stack {
		return "false"
	}
	if f.req.FramePointers {
		return "fp"
	}
	return "true"
}

func (f *stackFlag) Set(s string) error {
	switch s {
	case "true", "cfi":
		f.req.Stack, f.req.FramePointers = true, false
	case "false":
		f.req.Stack, f.req.FramePointers = false, false
	case "fp":
		f.req.Stack, f.req.FramePointers = true, true
	default:
		return fmt.Errorf("want --stack (whole stacks) or --stack=fp (frame pointers only)")
	}
	return nil
}

// stackCounting turns --count --stack into a stack key part (as --by
// stack), after the parts of --by, and checks --pprof and --folded:
// the library's rule (tracer.Config.Complete).
func stackCounting(req *traceRequest) error {
	if err := req.Complete(); err != nil {
		return usagef("%v", err)
	}
	return nil
}

// startProbes are the probes whose values the filter and the keys read:
// every probe, or --latency's START.
func (req *traceRequest) startProbes() []probe.Spec {
	if req.Mode == record.ModeLatency {
		return req.Probes[:req.LatencyEnd]
	}
	return req.Probes
}

// atStart completes a message on the values of the filter or the keys:
// --latency reads them at the start.
func (req *traceRequest) atStart() string {
	if req.Mode != record.ModeLatency {
		return ""
	}
	return "; --latency reads them at the start, " + req.Probes[0].Label()
}

// joinByArgs makes "--by str 2" one argument, "--by=str 2": a key's
// number may follow it as a word of its own.
func joinByArgs(args []string) []string {
	out := make([]string, 0, len(args))
	for i := 0; i < len(args); i++ {
		a := args[i]
		if a == "--by" || a == "-by" {
			if i+1 < len(args) {
				a, i = a+"="+args[i+1], i+1
			}
		}
		if strings.HasPrefix(a, "--by=") || strings.HasPrefix(a, "-by=") {
			for i+1 < len(args) {
				last := a[strings.LastIndexAny(a, "=,")+1:]
				if (last != "arg" && last != "str") || !startsWithDigit(args[i+1]) {
					break
				}
				a, i = a+" "+args[i+1], i+1
			}
		}
		out = append(out, a)
	}
	return out
}

func startsWithDigit(s string) bool { return s != "" && s[0] >= '0' && s[0] <= '9' }
