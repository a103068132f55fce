package attach

import (
	"errors"
	"fmt"
	"strings"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/features"
)

// CookieFlag is the volatile const of usdt.bpf.h that tells the BPF side
// whether to find a USDT spec by BPF cookie (Linux 5.15) or by the
// probe's address through the IP map.
const CookieFlag = "probekit_usdt_have_cookie"

// IsProbeProgram reports whether p is a program Prepare handles: a Kprobe
// program in a "uprobe", "uretprobe" or "usdt" section, as libbpf and
// cilium/ebpf name them (SEC("uprobe"), SEC("uretprobe/..."),
// SEC("usdt/PATH:PROVIDER:NAME"), SEC("uprobe.s"), ...). Kprobe programs
// in other sections (kprobes proper) are left alone.
func IsProbeProgram(p *ebpf.ProgramSpec) bool {
	if p.Type != ebpf.Kprobe {
		return false
	}
	s := p.SectionName
	for _, prefix := range []string{"uprobe", "uretprobe", "usdt"} {
		rest, ok := strings.CutPrefix(s, prefix)
		if !ok || strings.HasPrefix(rest, ".session") {
			continue // a uprobe.session program keeps its own attach type
		}
		if rest == "" || rest[0] == '/' || rest[0] == '.' {
			return true
		}
	}
	return false
}

// Prepare readies spec before it is loaded, the same way for USDT and
// function probes:
//
//   - every probe program (IsProbeProgram), and every program named in
//     programs, gets the attach type of the links this kernel will get:
//     ebpf.AttachTraceUprobeMulti where the kernel has uprobe_multi with
//     its PID-filter fix, ebpf.AttachNone (perf-event uprobes) elsewhere;
//   - the cookie flag of usdt.bpf.h, if the collection includes it, is set
//     to whether the kernel has BPF cookies.
//
// Attach makes the same decision from the same cached probe, so no mode
// travels from here to there.
func Prepare(spec *ebpf.CollectionSpec, programs ...string) error {
	if spec == nil {
		return errors.New("prepare: nil collection spec")
	}
	multi, err := features.Have(features.UprobeMulti)
	if err != nil {
		return fmt.Errorf("prepare: probe uprobe_multi support: %w", err)
	}
	at := ebpf.AttachNone
	if multi {
		at = ebpf.AttachTraceUprobeMulti
	}
	for _, name := range programs {
		p, ok := spec.Programs[name]
		if !ok {
			return fmt.Errorf("prepare: no program %q in the collection spec", name)
		}
		if p.Type != ebpf.Kprobe {
			return fmt.Errorf("prepare: program %s is of type %s, want %s", name, p.Type, ebpf.Kprobe)
		}
		p.AttachType = at
	}
	for _, p := range spec.Programs {
		if IsProbeProgram(p) {
			p.AttachType = at
		}
	}
	if v, ok := spec.Variables[CookieFlag]; ok {
		cookie, err := features.Have(features.Cookie)
		if err != nil {
			return fmt.Errorf("prepare: probe BPF cookie support: %w", err)
		}
		if err := v.Set(cookie); err != nil {
			return fmt.Errorf("prepare: set %s: %w", CookieFlag, err)
		}
	}
	if v, ok := spec.Variables[EntryCallerName]; ok {
		// stack.bpf.h's: whether the kernel's stack walk gives a
		// function entry's caller itself. A probe that cannot run
		// leaves it unknown (0).
		mode := uint32(0)
		if adds, err := features.Have(features.EntryCaller); err == nil {
			mode = 1
			if adds {
				mode = 2
			}
		}
		if err := v.Set(mode); err != nil {
			return fmt.Errorf("prepare: set %s: %w", EntryCallerName, err)
		}
	}
	return nil
}

// EntryCallerName is stack.bpf.h's constant telling whether the
// kernel's user stack walk gives a function entry's caller itself.
const EntryCallerName = "probekit_stack_entry_caller"
