package tracer

import (
	"errors"
	"fmt"
	"math/bits"

	"github.com/probekit/probekit/record"
)

// Complete applies the rules that tie a Config's fields together, the
// same for a Go caller as for the command line (which calls it on its
// flags): Stack with ModeCount counts by stack, so a stack key part is
// added after Keys unless Keys has one; Stack with ModeHist or
// ModeLatency, and Pprof or Folded without ModeCount and a stack key,
// are refused. Run and Start apply it to a copy of their Config; calling
// it again changes nothing.
func (cfg *Config) Complete() error {
	if cfg.Stack && cfg.Mode == record.ModeHist {
		return errors.New("Stack (--stack) prints the stack of each hit, or with ModeCount (--count) counts by stack: ModeHist (--hist) has no stacks")
	}
	if cfg.Mode == record.ModeLatency && (cfg.Stack || cfg.HasStackKey()) {
		return errors.New("Stack (--stack) prints the stack of each hit, or with ModeCount (--count) counts by stack: ModeLatency (--latency) has no stacks")
	}
	if cfg.Stack && cfg.Mode == record.ModeCount {
		if !cfg.HasStackKey() {
			cfg.Keys = append(cfg.Keys[:len(cfg.Keys):len(cfg.Keys)], Key{KeyPart: record.KeyPart{Kind: record.KeyStack}, Name: "stack"})
		}
		if len(cfg.Keys) > record.MaxKeys {
			return fmt.Errorf("Keys (--by) with Stack (--stack): at most %d keys, the stack one of them", record.MaxKeys)
		}
	}
	if (cfg.Pprof != "" || cfg.Folded) && (cfg.Mode != record.ModeCount || !cfg.HasStackKey()) {
		return errors.New("Pprof and Folded (--pprof, --folded) write the stacks counted by ModeCount with Stack or a stack key (--count --stack)")
	}
	if cfg.StackTable && cfg.Pprof == "" {
		return errors.New("StackTable prints the counted stacks beside Pprof's file: without Pprof they are printed anyway")
	}
	return cfg.completeArgs()
}

// completeArgs checks the argument numbers of Strs and HistValue and
// sets strMask and histIndex from them.
func (cfg *Config) completeArgs() error {
	var mask uint32
	for _, a := range cfg.Strs {
		if a.IsRet() {
			return errors.New("Strs (--str): a return value is not read as a string; want probe.Arg(N)")
		}
		if err := a.Check(); err != nil {
			return fmt.Errorf("Strs (--str): %w", err)
		}
		mask |= 1 << a.Index()
	}
	if n := bits.OnesCount32(mask); n > record.MaxStrs {
		return fmt.Errorf("Strs (--str): %d string arguments, at most %d", n, record.MaxStrs)
	}
	if mask != 0 && cfg.Mode != record.ModeEvents {
		return errors.New("Strs (--str) prints strings of hits: ModeCount, ModeHist and ModeLatency print none")
	}
	cfg.strMask, cfg.histIndex = mask, 0
	switch {
	case cfg.Mode == record.ModeHist:
		if err := cfg.HistValue.Check(); err != nil {
			return fmt.Errorf("HistValue (--hist): %w", err)
		}
		cfg.histIndex = cfg.HistValue.Index()
	case !cfg.HistValue.IsZero():
		return errors.New("HistValue (--hist) is the value ModeHist counts: set Mode to record.ModeHist, or leave HistValue zero")
	}
	return nil
}

// completed is a copy of cfg, Completed.
func completed(cfg *Config) (*Config, error) {
	c := *cfg
	if err := c.Complete(); err != nil {
		return nil, err
	}
	return &c, nil
}
