package safeelf

import (
	"os"
	"runtime"
	"strings"
	"testing"
)

// TestGoInlineFrames: the inline chains of this test binary's own code
// (Go, not PIE, so link-time and runtime addresses are one), for every
// 7th byte of every function, are what runtime.CallersFrames gives for
// the same pc: names, files, lines and the number of frames.
func TestGoInlineFrames(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	fh, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	f, err := NewFile(fh)
	if err != nil {
		t.Fatal(err)
	}
	gt, err := f.GoTable()
	if err != nil {
		t.Fatal(err)
	}
	if gt.inline() == nil {
		t.Fatal("no inline data found (moduledata's gofunc)")
	}
	gi := gt.inline()
	var got []GoFrame
	checked, inlined, bad := 0, 0, 0
	for _, fn := range gt.Funcs {
		for pc := fn.Entry; pc < fn.End; pc += 7 {
			rf := runtime.FuncForPC(uintptr(pc))
			if rf == nil || rf.Name() == "" {
				continue
			}
			if next := runtime.FuncForPC(uintptr(pc) + 1); next != nil && next.Entry() == uintptr(pc)+1 {
				// pc+1 (how CallersFrames is asked for pc) starts the
				// next function, which CallersFrames then names.
				continue
			}
			got = gt.Frames(got[:0], pc)
			if len(got) == 0 {
				continue
			}
			// The pcs of the chain: pc, then each call site's
			// (entry + parentPc), as the runtime unwinds inlined calls.
			pcs := []uint64{pc}
			if fo, entry, ok := gi.funcAt(gt.TextStart, pc); ok {
				tree, _ := gi.funcdata(fo, funcdataInlTree)
				tab, _ := gi.pcdata(fo, pcdataInlTreeIndex)
				for p := pc; len(pcs) < len(got); {
					ix := gi.pcvalue(tab, entry, p)
					if ix < 0 {
						break
					}
					parent := int32(gi.bo.Uint32(gi.funcData[uint64(tree)+uint64(ix)*inlinedCallSize+8:]))
					p = entry + uint64(int64(parent))
					pcs = append(pcs, p)
				}
			}
			checked++
			inlined += len(got) - 1
			// FuncForPC names the innermost function.
			same := len(pcs) == len(got) && printName(got[0].Function) == rf.Name()
			if !same && bad < 10 {
				t.Logf("%#x: %+v, %d pcs, FuncForPC %s", pc, got, len(pcs), rf.Name())
			}
			for k := 0; same && k < len(got); k++ {
				// CallersFrames takes return addresses: pc+1 is looked
				// up at pc, and gives its innermost frame first.
				w, _ := runtime.CallersFrames([]uintptr{uintptr(pcs[k]) + 1}).Next()
				if w.Function == "" && k == 0 {
					break // a marker the runtime names nothing (go:textfipsend)
				}
				if w.File == "?" {
					w.File, w.Line = "", 0 // no line: Frames says "" and 0
				}
				same = printName(got[k].Function) == w.Function && got[k].File == w.File && got[k].Line == w.Line && got[k].Inlined == (k < len(got)-1)
				if !same && bad < 10 {
					t.Logf("%#x frame %d (at %#x): %+v, CallersFrames %s %s:%d", pc, k, pcs[k], got[k], w.Function, w.File, w.Line)
				}
			}
			if !same {
				bad++
			}
		}
	}
	t.Logf("%d pcs, %d inlined frames, %d differ", checked, inlined, bad)
	if inlined < checked/20 {
		t.Errorf("only %d inlined frames for %d pcs", inlined, checked)
	}
	if bad > 0 {
		t.Errorf("%d of %d pcs differ from runtime.CallersFrames", bad, checked)
	}
}

func frameNames(fs []runtime.Frame) []string {
	var s []string
	for _, f := range fs {
		s = append(s, f.Function+" "+f.File+":"+itoa(f.Line))
	}
	return s
}

func itoa(n int) string {
	b := []byte{}
	if n == 0 {
		return "0"
	}
	for ; n > 0; n /= 10 {
		b = append([]byte{byte('0' + n%10)}, b...)
	}
	return string(b)
}

// printName is a function name as the runtime prints it: from the first
// '[' to the last ']' (type arguments) becomes "[...]".
func printName(s string) string {
	i, j := strings.IndexByte(s, '['), strings.LastIndexByte(s, ']')
	if i < 0 || j <= i {
		return s
	}
	return s[:i] + "[...]" + s[j+1:]
}
