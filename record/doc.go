// Package record holds the generic BPF programs behind `probekit
// trace`, which report every hit as a record: the probe's index, the
// process and thread, a kind, values (with a bit per value that could not
// be read), some of them also read as strings.
//
//   - trace_usdt (ProgramName) is attached to USDT locations with
//     usdt.bpf.h's spec maps filled in; its values are the location's
//     arguments, its index the usdt cookie the attacher gave the location.
//   - trace_func (FuncProgramName) is attached to function entries,
//     return instructions and uretprobes. Its BPF cookie (FuncCookie)
//     describes the probe: the index, the kind, the register set to send
//     (Regs: a calling convention's argument registers, or the return
//     register) and the values to read as strings. A uprobe's context is
//     readable only at constant offsets, so each register set is a fixed
//     list of pt_regs field reads, one BPF function per set, chosen by
//     the cookie. On a kernel without bpf_get_attach_cookie (before
//     Linux 5.15) it finds the same description in a hash map keyed by
//     the process and the probed address (Objects.FuncIPs), which package
//     uprobe fills (Options.AddressTable). LoadSpec loads it only when
//     asked (Programs).
//
// A record is as long as what it carries: a 32-byte header, 8 bytes per
// value, 8 bytes per user stack frame when StackName is set (the
// program takes the stack with usdt/bpf's stack.bpf.h, at_entry for a
// function entry), 16 bytes per Python frame after them with the CFI
// walk and an interpreter map (Event.Interp; LoadSpecOptions), then
// each string with its NUL (Event, Decode). The
// kind byte of the header says what the values are (KindUSDT,
// KindUprobe, KindUretprobe).
//
// With SetMode, the programs send nothing: ModeCount adds each hit to its
// probe index's slot of an array (Counts), ModeHist to a log2 bucket
// (Bucket, BucketRange) of one of its values in a hash (Histograms),
// each counter one value for all CPUs, added to atomically. With
// SetKeys they count per key tuple instead (Keyed).
//
// ModeLatency times pairs of hits: a hit of a probe whose cookie has
// LatencyEnd set ends its thread's latest open start, and the
// nanoseconds between them go to a log2 bucket of the start's probe
// (Histograms) or key (KeyedHistograms). Starts and ends pair per thread
// as a stack of MaxLatencyDepth frames, so nested and recursive calls
// are timed each from its own start; the filter and the keys are taken
// at the start; what could not be paired is counted (LatencyLost).
// Function probes of Go code pair per goroutine with LatencyGoroutine. A
// function's latency, entry to return (Example_latency in full):
//
//	spec, _ := record.Spec()
//	_ = uprobe.Prepare(spec)
//	_ = record.SetMode(spec, record.ModeLatency, 0)
//	_ = record.SetKeys(spec, []record.KeyPart{{Kind: record.KeyArg, Val: 0}}) // optional: per first argument
//	objs, _ := record.LoadSpec(spec, record.FuncProgram)
//	defer objs.Close()
//	bin, _ := uprobe.Open("libc.so.6")
//	defer bin.Close()
//	start, _ := record.FuncCookie(0, record.RegsC, record.KindUprobe, 0)
//	end, _ := record.FuncCookie(1, record.RegsRet, record.KindUretprobe, 0)
//	in, _ := bin.Entry("fsync", objs.FuncProgram, &uprobe.Options{Cookie: start})
//	defer in.Close()
//	out, _ := bin.Return("fsync", objs.FuncProgram, &uprobe.Options{Cookie: end | record.LatencyEnd})
//	defer out.Close()
//	// ... later: per first argument, a histogram of nanoseconds.
//	hists, _ := objs.KeyedHistograms()
//
// A USDT pair is the same with the attacher: the start probe's locations
// with usdt.Options.Cookie set to an index, the end's with an index |
// LatencyEnd.
//
// Typical use with the usdt attacher and package uprobe:
//
//	spec, _ := record.Spec()
//	_ = usdt.Prepare(spec) // = uprobe.Prepare: attach type for this kernel, cookie flag
//	_ = record.SetRingSize(spec, record.DefaultRingSize, os.Getpagesize())
//	objs, _ := record.LoadSpec(spec, record.USDTProgram|record.FuncProgram)
//	defer objs.Close()
//	// attach objs.Program with an Attacher built on objs.Specs and
//	// objs.IPToSpecID; attach objs.FuncProgram with uprobe's Entry or
//	// Return and Options.Cookie from FuncCookie; then read objs.Events
//	// with cilium's ringbuf reader (ReadInto, with a deadline: after
//	// SetRingSize the programs wake the reader only when a quarter of
//	// the ring is unread) and Event.Decode.
//
// The object is built for x86-64 and arm64 (gen.go).
package record
