// Command probekit-export is `probekit export`: it serves Prometheus
// metrics counted in the kernel at the probes a configuration file names.
// `probekit export ARGS` executes it with ARGS. It is an executable of its
// own so that the other subcommands of probekit do not link, and
// initialise at every start, the Prometheus client, protobuf and YAML
// packages. Build it next to probekit:
//
//	go build -o bin/probekit-export ./cmd/probekit-export
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/probekit/probekit/exporter"
	"github.com/probekit/probekit/internal/clihelp"
	"github.com/probekit/probekit/internal/privilege"
	"github.com/probekit/probekit/probe"
	"github.com/probekit/probekit/record"
)

const usage = "probekit export --config FILE [--listen ADDR]"

// exportExamples end --help.
const exportExamples = `
examples:
  probekit export --config examples/exporter/python.yaml
      Python function calls by function, in every Python process, on 127.0.0.1:9435/metrics
  probekit export --config examples/exporter/postgresql.yaml --listen :9500
      PostgreSQL queries and their latency, served on port 9500 of every address
`

// defaultListen is the exporter's address: loopback, a port next to
// node_exporter's 9100 family not claimed in Prometheus's port list.
const defaultListen = "127.0.0.1:9435"

// usageError is a command line that does not parse; it exits with 2.
type usageError struct{ msg string }

func (e *usageError) Error() string { return e.msg }

func main() {
	err := run(os.Args[1:])
	var ue *usageError
	switch {
	case err == nil, errors.Is(err, flag.ErrHelp):
		os.Exit(0)
	case errors.As(err, &ue):
		fmt.Fprintf(os.Stderr, "probekit export: %v\nusage: %s\n", err, usage)
		os.Exit(2)
	default:
		fmt.Fprintf(os.Stderr, "probekit export: %v\n", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	config := fs.String("config", "", "the configuration `FILE`")
	listen := fs.String("listen", defaultListen, "the `ADDR`ess to serve /metrics on")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Printf("usage: %s\n\nserve Prometheus metrics (/metrics) counted in the kernel at the probes FILE names; SIGHUP reloads FILE, SIGTERM detaches (docs/exporter.md)\n\nflags:\n", usage)
			clihelp.WriteFlags(os.Stdout, fs)
			fmt.Print("\nexamples:\n  probekit export --config examples/exporter/python.yaml\n      count Python function calls by function in every python3.11 process, on :9435/metrics\n  probekit export --config examples/exporter/postgres.yaml --listen 127.0.0.1:9500\n      PostgreSQL query latency histograms, served on 127.0.0.1 only\n")
			return err
		}
		return &usageError{err.Error()}
	}
	if fs.NArg() != 0 {
		return &usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *config == "" {
		return &usageError{"--config FILE is required"}
	}
	cfg, err := exporter.LoadConfig(*config, exporter.ParseProbe)
	if err != nil {
		return err
	}
	if err := privilege.Need("exporting", privilege.LoadBPF, privilege.LockMemory); err != nil {
		return err
	}
	if err := probe.CheckFuncProbes(); err != nil {
		for _, m := range cfg.Metrics {
			if m.Probe.Kind != record.KindUSDT || m.End != nil && m.End.Kind != record.KindUSDT {
				return err
			}
		}
	}
	logger := log.New(os.Stderr, "probekit export: ", log.LstdFlags)
	x := exporter.New(exporter.Options{Log: logger})
	defer x.Close()
	// Signals are taken before the attach, which may take seconds: a
	// SIGTERM or SIGHUP meanwhile is handled once it ends, instead of
	// killing the process with probes half attached.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt, syscall.SIGHUP)
	defer signal.Stop(sigs)
	// Bind first: a port in use fails before any probe is attached.
	// Scrapes during the attach see the metrics attached so far.
	srv, addr, err := x.Serve(*listen)
	if err != nil {
		return err
	}
	start := time.Now()
	x.Apply(cfg)
	logger.Printf("attached %d of %d metrics in %v", len(x.Attached()), len(cfg.Metrics), time.Since(start).Round(time.Millisecond))
	// Attached: keep only what reloads and new processes need.
	if kept, dropped, err := privilege.Keep(privilege.LoadBPF, privilege.OtherUser, privilege.UnreadableFile); err != nil {
		logger.Printf("dropping capabilities: %v", err)
	} else {
		logger.Printf("capabilities kept: %v; dropped: %v", kept, dropped)
	}
	logger.Printf("serving http://%s/metrics", addr)

	for {
		select {
		case err := <-srv:
			return err
		case s := <-sigs:
			if s != syscall.SIGHUP {
				logger.Printf("%v: detaching", s)
				start := time.Now()
				err := x.Close()
				logger.Printf("detached in %v", time.Since(start).Round(time.Millisecond))
				return err
			}
			cfg, err := exporter.LoadConfig(*config, exporter.ParseProbe)
			if err != nil {
				// The running configuration stays.
				logger.Printf("reload: %v", err)
				x.ReloadFailed()
				continue
			}
			x.Apply(cfg)
			logger.Printf("reloaded %s", *config)
		}
	}
}
