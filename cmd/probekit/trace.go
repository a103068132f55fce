package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/bits"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cilium/ebpf/ringbuf"

	"github.com/probekit/probekit/argspec"
	"github.com/probekit/probekit/internal/traceprog"
	"github.com/probekit/probekit/procmaps"
	"github.com/probekit/probekit/usdt"
)

const traceUsage = "trace [--json] [-p PID] [-n COUNT] [--str N,...] TARGET:PROVIDER:NAME... [-- CMD ARGS...]"

func init() {
	register(&command{
		name:    "trace",
		usage:   traceUsage,
		summary: "print every hit of the USDT probes (globs allowed in PROVIDER and NAME) with its decoded arguments; with -- CMD, launch CMD stopped until attached, trace only it, and exit when it exits",
		run:     runTrace,
	})
}

// traceRequest is a parsed command line.
type traceRequest struct {
	json  bool
	pid   int
	count int
	// strMask has bit n set to print argument n (0-based) as the string
	// it points to.
	strMask uint32
	probes  []probeSpec
	cmd     []string
}

type probeSpec struct {
	target, provider, name string
}

func parseTrace(args []string) (*traceRequest, error) {
	var cmd []string
	for i, a := range args {
		if a == "--" {
			args, cmd = args[:i], args[i+1:]
			break
		}
	}
	fs := flag.NewFlagSet("trace", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	req := &traceRequest{cmd: cmd}
	fs.BoolVar(&req.json, "json", false, "one JSON object per hit")
	fs.IntVar(&req.pid, "p", 0, "trace only this process")
	fs.IntVar(&req.count, "n", 0, "exit after COUNT hits")
	strs := fs.String("str", "", "comma-separated argument numbers (from 1) to print as strings")
	pos, err := parseFlags(fs, args)
	if err != nil {
		return nil, err
	}
	if *strs != "" {
		for _, f := range strings.Split(*strs, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 1 || n > traceprog.MaxArgs {
				return nil, usagef("--str %q: want argument numbers from 1 to %d", *strs, traceprog.MaxArgs)
			}
			req.strMask |= 1 << (n - 1)
		}
		if bits.OnesCount32(req.strMask) > traceprog.MaxStrs {
			return nil, usagef("--str %q: at most %d string arguments", *strs, traceprog.MaxStrs)
		}
	}
	switch {
	case len(pos) == 0:
		return nil, usagef("want at least one TARGET:PROVIDER:NAME")
	case req.pid < 0:
		return nil, usagef("-p %d: want a process id", req.pid)
	case req.count < 0:
		return nil, usagef("-n %d: want a count", req.count)
	case req.pid != 0 && len(cmd) > 0:
		return nil, usagef("-p and -- CMD exclude each other")
	}
	if cmd != nil && len(cmd) == 0 {
		return nil, usagef("-- needs a command")
	}
	for _, p := range pos {
		target, provider, name, err := usdt.ParseSection(p)
		if err != nil {
			return nil, usagef("probe %v", err)
		}
		req.probes = append(req.probes, probeSpec{target, provider, name})
	}
	return req, nil
}

func runTrace(args []string, stdout io.Writer) error {
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
	return trace(req, stdout)
}

// traceSite is what a usdt cookie stands for in the events: one location.
type traceSite struct {
	probe *usdt.Probe
	loc   *usdt.Location
}

// tracer is one run of probekit trace.
type tracer struct {
	req   *traceRequest
	out   io.Writer
	sites []traceSite
	hits  int
}

func trace(req *traceRequest, stdout io.Writer) (err error) {
	if os.Geteuid() != 0 {
		return fmt.Errorf("tracing needs root (loading BPF programs and attaching uprobes): %w", os.ErrPermission)
	}
	spec, err := traceprog.Spec()
	if err != nil {
		return err
	}
	if err := usdt.Prepare(spec); err != nil {
		return err
	}
	if err := spec.Variables[traceprog.StrMaskName].Set(req.strMask); err != nil {
		return err
	}
	objs, err := traceprog.LoadSpec(spec)
	if err != nil {
		return err
	}
	defer objs.Close()
	att, err := usdt.NewAttacherWithMaps(spec, objs.Specs, objs.IPToSpecID)
	if err != nil {
		return err
	}
	t := &tracer{req: req, out: stdout}

	var launched *usdt.Launched
	opts := &usdt.AttachOptions{PID: req.pid, LocationCookie: t.cookie}
	if len(req.cmd) > 0 {
		name := req.cmd[0]
		if !strings.ContainsRune(name, '/') {
			// As for TARGET: an ELF binary on PATH over a wrapper script
			// (pyenv's shim would exec another python than the one
			// whose probes were named).
			if p := procmaps.LookPath(name); p != "" {
				name = p
			}
		}
		cmd := exec.Command(name, req.cmd[1:]...)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = os.Stdin, os.Stdout, os.Stderr
		if req.json {
			// Keep stdout a stream of JSON objects.
			cmd.Stdout = os.Stderr
		}
		launched, err = usdt.Launch(cmd)
		if err != nil {
			return err
		}
		opts.Process = launched.Process
		defer func() {
			if err != nil && launched != nil {
				launched.Kill()
			}
		}()
	}

	var links []*usdt.Link
	defer func() {
		for _, l := range links {
			l.Close()
		}
	}()
	for _, p := range req.probes {
		// A bare name is looked up on PATH and in the library
		// directories; a path is taken as the process sees it.
		target, err := procmaps.Resolve(p.target)
		if err != nil {
			return err
		}
		l, err := att.Attach(objs.Program, target, p.provider, p.name, opts)
		if err != nil {
			return err
		}
		links = append(links, l)
		for _, w := range l.Warnings() {
			fmt.Fprintln(os.Stderr, "probekit trace: warning:", w)
		}
	}

	rd, err := ringbuf.NewReader(objs.Events)
	if err != nil {
		return err
	}
	defer rd.Close()

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(stop)

	exited := make(chan error, 1)
	if req.pid != 0 {
		// Like a launched command, a traced process ends the trace when
		// it exits.
		proc, err := procmaps.Open(req.pid)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		go func() {
			if proc.WaitExit(ctx) == nil {
				exited <- nil
			}
		}()
	}
	if launched != nil {
		if err := launched.Resume(); err != nil {
			return err
		}
		cmd := launched.Cmd
		launched = nil // resumed: no longer ours to kill
		go func() { exited <- cmd.Wait() }()
	}
	if err := t.loop(rd, stop, exited); err != nil {
		return err
	}
	if n, err := objs.DroppedCount(); err == nil && n > 0 {
		fmt.Fprintf(os.Stderr, "probekit trace: %d events lost (ring buffer full)\n", n)
	}
	return nil
}

// cookie numbers each attached location; events carry the number.
func (t *tracer) cookie(p *usdt.Probe, i int) uint64 {
	t.sites = append(t.sites, traceSite{probe: p, loc: &p.Locations[i]})
	return uint64(len(t.sites) - 1)
}

// pollInterval bounds how long a signal or the command's exit waits for
// the ring buffer reader.
const pollInterval = 100 * time.Millisecond

func (t *tracer) loop(rd *ringbuf.Reader, stop <-chan os.Signal, exited <-chan error) error {
	draining := false
	for {
		if !draining {
			select {
			case <-stop:
				return nil
			case <-exited:
				// Everything the command fired is in the buffer by now:
				// read until it is empty.
				draining = true
			default:
			}
		}
		rd.SetDeadline(time.Now().Add(pollInterval))
		rec, err := rd.Read()
		if errors.Is(err, os.ErrDeadlineExceeded) {
			if draining {
				return nil
			}
			continue
		}
		if err != nil {
			return err
		}
		var ev traceprog.Event
		if err := ev.UnmarshalBinary(rec.RawSample); err != nil {
			return err
		}
		if err := t.print(&ev); err != nil {
			return err
		}
		t.hits++
		if t.req.count > 0 && t.hits >= t.req.count {
			return nil
		}
	}
}

// hitJSON is one line of --json output.
type hitJSON struct {
	Provider string            `json:"provider"`
	Name     string            `json:"name"`
	PID      uint32            `json:"pid"`
	TID      uint32            `json:"tid"`
	Address  uint64            `json:"address"`
	Args     []json.RawMessage `json:"args"`
}

func (t *tracer) print(ev *traceprog.Event) error {
	if ev.Cookie >= uint64(len(t.sites)) || ev.ArgCnt < 0 {
		return fmt.Errorf("event for unknown location (cookie %d, arg count %d)", ev.Cookie, ev.ArgCnt)
	}
	site := t.sites[ev.Cookie]
	args := make([]string, 0, ev.ArgCnt)
	for i := 0; i < int(ev.ArgCnt) && i < len(ev.Args); i++ {
		args = append(args, formatArg(ev, i, site.loc))
	}
	if t.req.json {
		h := hitJSON{
			Provider: site.probe.Provider, Name: site.probe.Name,
			PID: ev.PID, TID: ev.TID, Address: site.loc.Address,
			Args: make([]json.RawMessage, len(args)),
		}
		for i, a := range args {
			h.Args[i] = json.RawMessage(a)
		}
		enc := json.NewEncoder(t.out)
		enc.SetEscapeHTML(false) // "<string>" stays readable
		return flush(t.out, enc.Encode(h))
	}
	_, err := fmt.Fprintf(t.out, "%d/%d %s:%s @%#x [%s]\n", ev.PID, ev.TID,
		site.probe.Provider, site.probe.Name, site.loc.Address, strings.Join(args, " "))
	return flush(t.out, err)
}

// formatArg renders argument i: signed or unsigned as its spec says, or
// null when the BPF program could not read it.
func formatArg(ev *traceprog.Event, i int, loc *usdt.Location) string {
	if ev.Errors&(1<<i) != 0 {
		return "null"
	}
	if str, ok := ev.Str(i); ok {
		// A JSON string is a fine quoted form for people too.
		return jsonString(str)
	}
	v := ev.Args[i]
	var a *argspec.Arg
	if i < len(loc.Args) {
		a = &loc.Args[i]
	}
	if a == nil || a.Signed {
		return strconv.FormatInt(v, 10)
	}
	// Unsigned: the program zero-extended it; an 8-byte value needs the
	// full unsigned range.
	return strconv.FormatUint(uint64(v), 10)
}

// flush pushes a line out at once: a trace is read as it happens.
func flush(w io.Writer, err error) error {
	if err != nil {
		return err
	}
	if f, ok := w.(interface{ Flush() error }); ok {
		return f.Flush()
	}
	return nil
}

// jsonString quotes s as JSON, without escaping <, > and &.
func jsonString(s string) string {
	var b strings.Builder
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.Encode(s)
	return strings.TrimSuffix(b.String(), "\n")
}
