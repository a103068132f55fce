// Package tracer is the engine of `probekit trace` as a library: it
// attaches a set of probes (package probe's PROBE specs: USDT probes,
// function entries and returns, globs, "*" targets) with package record's
// generic BPF programs, then prints every hit with its arguments, or
// counts, histograms or latencies built in the kernel, until the traced
// process ends or the context is done.
//
// One Config describes a trace; Run carries it out:
//
//	cfg := &tracer.Config{
//		Probes:  []probe.Spec{spec},         // probe.Parse("python3.11:python:function__entry")
//		Command: []string{"python3.11", "app.py"}, // or Process, or neither: every process
//		Mode:    record.ModeCount,
//		Keys:    keys,                       // tracer.ParseKeys("str 2")
//		Filter:  terms,                      // tracer.ParseFilter(`comm == "python*"`)
//	}
//	err := tracer.Run(ctx, cfg)
//
// Start is Run's first half: it returns a *Trace once every probe is
// attached, which reads the counts, sites and warnings while the trace
// runs, and Stop detaches (Run is Start, then Wait).
//
// The same rules hold for every caller: a function glob is resolved by
// uprobe.Binary.Resolve (one function per address), a function's
// registers are those of its calling convention (Go's register ABI where
// the binary's Go version has it), sites that a kernel refuses are
// skipped with one warning per reason, and after a trace in which a
// probe saw no hit, Warnings gets the runtime switch that enables it (a
// gated USDT probe of Ruby, PHP or OpenJDK) or the semaphore another
// tracer lowered; for CPython, whose function__entry fires for a few
// frames without its switch, a launched command that never set a
// profile or trace function gets that line whatever the hits.
//
// Output is the command's: a line per hit, text or JSON (Config.JSON),
// with its stack (Config.Stack: native frames with the Python
// functions CPython runs among them, docs/stacks.md), or at the end the counts and
// histograms; Config.OnHit receives the decoded hits instead, with the
// Site each came from, for a Go program that handles them itself
// (Hit.Params: a function's parameters by name, type and value, as the
// text line prints them).
// Warnings and what the kernel dropped go to Config.Warnings.
//
// Processes: Config.Process traces one process (OpenProcess opens it,
// checking it is not a kernel thread); Config.Command launches a command
// stopped at its execve, attaches, then lets it run; Config.Follow
// follows the descendants of either (package follow). Without them the
// probes fire in every process that runs their files.
package tracer
