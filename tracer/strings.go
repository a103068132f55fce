package tracer

import (
	"errors"
	"fmt"

	"github.com/cilium/ebpf"

	"github.com/probekit/probekit/internal/features"
	"github.com/probekit/probekit/internal/jsontext"
	"github.com/probekit/probekit/record"
	"golang.org/x/sys/unix"
)

// Strings the traced program passes (docs/strings.md).
//
// A string argument is read by the BPF program at the hit. The
// non-faulting read (bpf_probe_read_user_str) fails on a page the process
// has not touched yet, which is the common case at a function's first
// call with a string literal in .rodata. Where the kernel runs sleepable
// uprobe programs (Linux 6.0, features.SleepableUprobe) the programs are
// loaded sleepable and retry such a read after faulting the page in
// (record.SetFaultingStrings). A read that fails all the same, or on an
// older kernel, prints as Unreadable, never as the pointer.
//
// Text output quotes and escapes what the program controls (appendQuoted,
// Escape): no control byte or invalid UTF-8 reaches the terminal. JSON
// output is JSON (internal/jsontext): invalid UTF-8 becomes U+FFFD.

// NotResident is Unreadable.Reason of a string whose memory could not be
// read at the hit: not resident, and either the kernel has no faulting
// read for uprobe programs or the fault failed too (an address the
// process has not mapped).
const NotResident = "not resident"

// Unreadable is Param.Value of a string argument (a char pointer) that
// the BPF program could not read: Address is the pointer, Reason why.
// The text line prints it as <unreadable: REASON>, JSON as
// {"unreadable":REASON,"address":"0x..."}.
type Unreadable struct {
	Address uint64
	Reason  string
}

func (u Unreadable) String() string { return "<unreadable: " + u.Reason + ">" }

// setFaultingStrings makes spec's string reads fault their pages in
// where the kernel can.
func setFaultingStrings(spec *ebpf.CollectionSpec) error {
	ok, err := features.Have(features.SleepableUprobe)
	if err != nil || !ok {
		return err
	}
	return record.SetFaultingStrings(spec)
}

// sleepableRefused is the warning for programs the kernel refused to
// load sleepable (record.Objects.SleepableRefusal), which were loaded
// without faulting string reads; "" when they loaded as asked. Debian's
// 6.1 refuses the sleepable programs that walk whole stacks and read
// strings: its verifier processes more than the 1,000,000 instructions
// it allows one program (E2BIG; measured in the kernel matrix's 6.1 VM,
// record.TestLoadEveryMode logs the verifier's last lines), where 6.12's
// verifier accepts the same programs.
func sleepableRefused(objs *record.Objects) string {
	err := objs.SleepableRefusal
	if err == nil {
		return ""
	}
	why := err.Error()
	if errors.Is(err, unix.E2BIG) {
		why = "its verifier went past the 1,000,000 instructions it processes for one program"
	}
	return "this kernel refused to load the trace programs sleepable (" + why +
		"): strings are read without faulting their pages in, so one the process has not touched yet prints <unreadable: " + NotResident + ">"
}

// strUnreadable reports whether value i of ev was to be read as a string
// and the read failed at a non-NULL address (a failed operand read leaves
// the value 0).
func strUnreadable(ev *record.Event, i int) bool {
	return i >= 0 && i < record.MaxArgs && ev.Errors&(1<<i) != 0 && ev.StrArgs&(1<<i) != 0 && ev.Args[i] != 0
}

// appendUnreadable appends the mark of a string at addr that could not
// be read.
func appendUnreadable(b []byte, addr uint64, json bool) []byte {
	if json {
		return fmt.Appendf(b, `{"unreadable":%q,"address":"%#x"}`, NotResident, addr)
	}
	return append(b, "<unreadable: "+NotResident+">"...)
}

// appendQuoted appends s between double quotes for text output: escaped
// as by Escape, a double quote as \".
func appendQuoted[S ~string | ~[]byte](b []byte, s S) []byte {
	b = append(b, '"')
	start := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '"' {
			b = append(AppendEscaped(b, s[start:i]), '\\', '"')
			start = i + 1
		}
	}
	return append(AppendEscaped(b, s[start:]), '"')
}

// appendStr appends a string the program read: JSON, or quoted and
// escaped for text.
func appendStr(b, s []byte, json bool) []byte {
	if json {
		return jsontext.Append(b, s, false)
	}
	return appendQuoted(b, s)
}
