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

	"github.com/probekit/probekit/cmd/probekit/internal/exporter"
	"github.com/probekit/probekit/cmd/probekit/internal/traceprog"
)

const exportUsage = "export --config FILE [--listen ADDR]"

func init() {
	register(&command{
		name:    "export",
		usage:   exportUsage,
		summary: "serve Prometheus metrics (/metrics) counted in the kernel at the probes FILE names: counters of hits, histograms of an argument or of the latency between two probes, labels from arguments; SIGHUP reloads FILE, SIGTERM detaches",
		run:     runExport,
	})
}

// defaultListen is the exporter's address: loopback, a port next to
// node_exporter's 9100 family not claimed in Prometheus's port list.
const defaultListen = "127.0.0.1:9435"

// exportProbe is parseProbe for the exporter's configuration.
func exportProbe(s string) (*exporter.Probe, error) {
	p, err := parseProbe(s)
	if err != nil {
		return nil, err
	}
	return &exporter.Probe{Kind: p.kind, Target: p.target, Provider: p.provider, Name: p.name, Func: p.fn}, nil
}

func runExport(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("export", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	config := fs.String("config", "", "the configuration `FILE`")
	listen := fs.String("listen", defaultListen, "the `ADDR`ess to serve /metrics on")
	pos, err := parseFlags(fs, args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return err
		}
		return usagef("%v", err)
	}
	if len(pos) != 0 {
		return usagef("unexpected argument %q", pos[0])
	}
	if *config == "" {
		return usagef("--config FILE is required")
	}
	cfg, err := exporter.LoadConfig(*config, exportProbe)
	if err != nil {
		return err
	}
	if os.Geteuid() != 0 {
		return fmt.Errorf("exporting needs root (loading BPF programs and attaching uprobes): %w", os.ErrPermission)
	}
	if err := checkFuncProbes(); err != nil {
		for _, m := range cfg.Metrics {
			if m.Probe.Kind != traceprog.KindUSDT || m.End != nil && m.End.Kind != traceprog.KindUSDT {
				return err
			}
		}
	}
	logger := log.New(os.Stderr, "probekit export: ", log.LstdFlags)
	x := exporter.New(exporter.Options{Log: logger})
	defer x.Close()
	x.Apply(cfg)
	srv, addr, err := x.Serve(*listen)
	if err != nil {
		return err
	}
	logger.Printf("serving http://%s/metrics", addr)

	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, os.Interrupt, syscall.SIGHUP)
	defer signal.Stop(sigs)
	for {
		select {
		case err := <-srv:
			return err
		case s := <-sigs:
			if s != syscall.SIGHUP {
				logger.Printf("%v: detaching", s)
				return nil
			}
			cfg, err := exporter.LoadConfig(*config, exportProbe)
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
